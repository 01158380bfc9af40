"""The pipelined restart: aggregators read round k+1 (large independent reads, checksums verified) in a helper
thread while round k is exchanged; the same results with every extent reader and MPI thread level, and a
failure in a round read ahead is still an error on every rank, naming the block."""

from __future__ import annotations

import json

import pytest
from mpi_helpers import BACKENDS, run_script

ROUNDS = r"""
import json, os, sys
import mpi4py
mpi4py.rc.thread_level = sys.argv[3]
from mpi4py import MPI
import numpy as np, ckptio
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
path, backend = sys.argv[1], sys.argv[2]
rows = 96
def field(lo, hi):
    return np.arange(lo * 64, hi * 64, dtype=np.float64).reshape(hi - lo, 8, 8) * 1.5
with ckptio.create(path, comm, backend=backend) as ck:
    lo, hi = r * rows // n, (r + 1) * rows // n
    ck.write("u", field(lo, hi), offset=(lo, 0, 0), global_shape=(rows, 8, 8))
    ck.write("w", -field(lo, hi)[:, :4], offset=(lo, 0, 0), global_shape=(rows, 4, 8))
with ckptio.open(path, comm, buffer_bytes="4K") as ck:     # 1.5 blocks of 8 rows per round: many rounds
    lo = (r * rows // n + 5) % rows
    cnt = min(rows - lo, rows // n + 3)                       # uneven, shifted: pieces of several writers
    u, w = ck.read_many([("u", (lo, 0, 0), (cnt, 8, 8)), ("w", (lo, 0, 0), (cnt, 4, 8))])
    assert np.array_equal(u, field(lo, lo + cnt)) and np.array_equal(w, -field(lo, lo + cnt)[:, :4])
    s = ck.stats.to_json()
    agg = r in ck.aggregators
print("STATS", json.dumps({"rank": r, "aggregator": agg, "thread": MPI.Query_thread(), **s}), flush=True)
"""


def _stats(stdout: str) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in stdout.splitlines() if line.startswith("STATS ")]


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_rounds_are_read_ahead_by_a_helper_thread_with_the_same_results(tmp_path, backend, nprocs):
    proc = run_script(nprocs, ROUNDS, tmp_path, str(tmp_path / "chk"), backend, "multiple", timeout=300)
    stats = _stats(proc.stdout)
    assert len(stats) == nprocs, proc.stdout + proc.stderr
    for s in stats:
        assert s["rounds"] > 2, s
        if s["aggregator"]:  # read ahead; every round's bytes with few, large calls
            assert s["read_ahead"] and s["opened_file"] and s["file_calls"] <= 2 * s["rounds"], s
        else:
            assert not s["read_ahead"] and not s["opened_file"], s
        assert s["seconds"]["data"] > 0 and s["seconds"]["wait"] <= s["seconds"]["data"], s


@pytest.mark.mpi
@pytest.mark.parametrize("how", ["single", "mpiio", "nothread"])
def test_without_a_helper_thread_the_rounds_run_in_turn(tmp_path, how):
    """MPI_THREAD_SINGLE (no helper thread beside MPI), the collective MPI-IO reader (CKPTIO_READ_IO=mpiio: its
    reads are collective, so they stay in the calling thread) and CKPTIO_READ_THREAD=0: same data, no read-ahead."""
    env = {"CKPTIO_READ_IO": "mpiio"} if how == "mpiio" else {"CKPTIO_READ_THREAD": "0"} if how == "nothread" else {}
    level = "single" if how == "single" else "multiple"
    proc = run_script(3, ROUNDS, tmp_path, str(tmp_path / "chk"), "mpiio", level, timeout=300, env=env)
    stats = _stats(proc.stdout)
    assert len(stats) == 3, proc.stdout + proc.stderr
    for s in stats:
        assert s["rounds"] > 2 and not s["read_ahead"], s
        if how == "single":
            assert s["thread"] == 0, s  # MPI.THREAD_SINGLE
        if how == "mpiio" and s["aggregator"]:
            assert s["file_calls"] == s["rounds"], s  # one collective Read_all per round


CORRUPT = r"""
import sys, numpy as np, ckptio
from mpi4py import MPI
from ckptio.backends import get_backend
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
path = sys.argv[1]
with ckptio.create(path, comm) as ck:
    for b in range(4):  # 4 blocks per rank, 2 KiB each
        ck.write("u", np.full((32, 8), float(4 * r + b)), offset=(32 * (4 * r + b), 0), global_shape=(128 * n, 8))
if r == 0:
    backend = get_backend("mpiio")
    last = int(backend.extent_table(backend.read_metadata(path)).file_offset.max())  # read in a late round
    with open(path, "r+b") as f:
        f.seek(last + 100)
        f.write(b"\xff")
comm.Barrier()
with ckptio.open(path, comm, buffer_bytes="4K", aggregators=1) as ck:
    try:
        ck.read("u")
        print("READ", r, flush=True)
    except ckptio.CorruptCheckpointError as exc:
        print("CORRUPT", r, "checksum mismatch" in str(exc) and "'u'" in str(exc), ck.stats.rounds, flush=True)
assert comm.allreduce(1) == n
print("AFTER", r, flush=True)
"""


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_corruption_in_a_round_read_ahead_fails_every_rank(tmp_path, nprocs):
    proc = run_script(nprocs, CORRUPT, tmp_path, str(tmp_path / "chk"), timeout=240)
    lines = proc.stdout.splitlines()
    corrupt = sorted(line for line in lines if line.startswith("CORRUPT"))
    assert len(corrupt) == nprocs and all(line.split()[2] == "True" for line in corrupt), proc.stdout
    assert len({line.split()[3] for line in corrupt}) == 1 and int(corrupt[0].split()[3]) > 1, corrupt
    assert sorted(line for line in lines if line.startswith("AFTER")) == [f"AFTER {r}" for r in range(nprocs)]
