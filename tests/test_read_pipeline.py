"""The pipelined restart: aggregators read round k+1 (large independent reads, checksums verified) in a helper
thread while round k is exchanged; the same results with every extent reader and MPI thread level, and a
failure in a round read ahead is still an error on every rank, naming the block."""

from __future__ import annotations

import json

import pytest
from mpi_helpers import BACKENDS, PROGRAMS, run_mpi

PROGRAM = str(PROGRAMS / "read_pipeline.py")  # the MPI programs of these tests


def _stats(stdout: str) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in stdout.splitlines() if line.startswith("STATS ")]


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_rounds_are_read_ahead_by_a_helper_thread_with_the_same_results(tmp_path, backend, nprocs):
    proc = run_mpi(nprocs, [PROGRAM, "rounds", str(tmp_path / "chk"), backend, "multiple"], timeout=300)
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
    proc = run_mpi(3, [PROGRAM, "rounds", str(tmp_path / "chk"), "mpiio", level], timeout=300, env=env)
    stats = _stats(proc.stdout)
    assert len(stats) == 3, proc.stdout + proc.stderr
    for s in stats:
        assert s["rounds"] > 2 and not s["read_ahead"], s
        if how == "single":
            assert s["thread"] == 0, s  # MPI.THREAD_SINGLE
        if how == "mpiio" and s["aggregator"]:
            assert s["file_calls"] == s["rounds"], s  # one collective Read_all per round


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_corruption_in_a_round_read_ahead_fails_every_rank(tmp_path, nprocs):
    proc = run_mpi(nprocs, [PROGRAM, "corrupt", str(tmp_path / "chk")], timeout=240)
    lines = proc.stdout.splitlines()
    corrupt = sorted(line for line in lines if line.startswith("CORRUPT"))
    assert len(corrupt) == nprocs and all(line.split()[2] == "True" for line in corrupt), proc.stdout
    assert len({line.split()[3] for line in corrupt}) == 1 and int(corrupt[0].split()[3]) > 1, corrupt
    assert sorted(line for line in lines if line.startswith("AFTER")) == [f"AFTER {r}" for r in range(nprocs)]
