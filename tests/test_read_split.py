"""Split reads: an aggregator reads its own pieces of a part that also holds other ranks' pieces straight into
its output arrays (one scattering ``preadv`` into the read buffer and the outputs), and every block's checksum is
still verified, streamed across the buffer and the outputs in file order, also for blocks split across rounds."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ckptio.backends import rawio
from mpi_helpers import BACKENDS, PROGRAMS, run_mpi

from ckptio.model.document import VariableRecord
from ckptio.model.layout import Box
from ckptio.model.plan import Extent

PROGRAM = str(PROGRAMS / "read_split.py")  # the MPI program of these tests


def _stats(stdout: str) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in stdout.splitlines() if line.startswith("STATS ")]


@pytest.mark.mpi
@pytest.mark.parametrize("backend", [b for b in BACKENDS if b in ("mpiio", "hdf5")])
@pytest.mark.parametrize("buffer", ["1M", "24K"])  # 24K: a block split across rounds and ranks
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_an_aggregator_reads_its_whole_share_straight_into_its_output(tmp_path, backend, buffer, nprocs):
    """The one aggregator's own rows end inside a block whose other rows go to another rank: all of its own
    bytes still go straight into its output (before: only parts that were exactly one of its pieces)."""
    proc = run_mpi(nprocs, [PROGRAM, "split", str(tmp_path / "chk"), backend, buffer, "none"], timeout=300)
    stats = {s["rank"]: s for s in _stats(proc.stdout)}
    assert sorted(stats) == list(range(nprocs)), proc.stdout + proc.stderr
    assert stats[0]["direct_bytes"] == stats[0]["own"], stats[0]
    assert stats[0]["bytes_sent"] == sum(s["own"] for s in stats.values()) - stats[0]["own"], stats[0]
    assert all(s["direct_bytes"] == 0 for r, s in stats.items() if r), stats


@pytest.mark.mpi
@pytest.mark.parametrize("backend", [b for b in BACKENDS if b in ("mpiio", "hdf5")])
@pytest.mark.parametrize("buffer", ["1M", "24K"])
@pytest.mark.parametrize("where", ["own", "other"])
def test_corruption_in_a_split_part_fails_every_rank(tmp_path, backend, buffer, where):
    """A flipped byte in the rows read straight into the aggregator's output, or in the rows of the same block
    that went through the buffer to another rank: a CorruptCheckpointError naming the variable on every rank."""
    proc = run_mpi(2, [PROGRAM, "split", str(tmp_path / "chk"), backend, buffer, where], timeout=300)
    lines = sorted(line for line in proc.stdout.splitlines() if line.startswith(("CORRUPT", "STATS")))
    assert lines == ["CORRUPT 0 True", "CORRUPT 1 True"], proc.stdout + proc.stderr


def test_scattering_read_fills_buffer_and_stretches_in_file_order(tmp_path, monkeypatch):
    """``PosixExtentReader.read`` with stretches: more arrays than one ``preadv`` takes (batches), short reads
    continued mid-array, adjacent extents read together; the extent's bytes outside its stretches are in the
    returned buffer view, the stretches' bytes in the caller's arrays."""
    data = np.random.default_rng(5).integers(0, 256, 3 * 4096, dtype=np.uint8)
    path = tmp_path / "f.bin"
    path.write_bytes(b"\0" * 100 + data.tobytes())
    meta = {"variables": {"v": VariableRecord("|u1", (3 * 4096,), "array", None, 3)}}
    extents = [Extent("v", Box((i * 4096,), (4096,)), 100 + i * 4096, 4096) for i in range(3)]
    # extent 0: 700 stretches of 3 bytes every 5 bytes; extent 1: none; extent 2: read whole into one array
    stretches0 = [(5 * k, np.zeros(3, np.uint8)) for k in range(700)]
    whole = np.zeros(4096, np.uint8)
    calls: list[int] = []
    real = rawio.os.preadv

    def short_preadv(fd, buffers, offset):  # at most 1000 bytes per call: continued mid-array
        calls.append(len(buffers))
        room, cut = 1000, []
        for b in buffers:
            if room <= 0:
                break
            cut.append(b[:room])
            room -= len(cut[-1])
        return real(fd, cut, offset)

    monkeypatch.setattr(rawio.os, "preadv", short_preadv)
    reader = rawio.PosixExtentReader(str(path), meta)
    try:
        arrays, ncalls = reader.read(extents, slot=0, into=[stretches0, None, [(0, whole)]])
    finally:
        reader.close()
    assert ncalls == len(calls) and max(calls) <= rawio._MAX_IOV and ncalls >= 3 * 4096 // 1000
    assert arrays[2] is whole or np.shares_memory(arrays[2], whole)
    assert np.array_equal(whole, data[2 * 4096:])
    assert np.array_equal(arrays[1], data[4096:2 * 4096])
    for off, dst in stretches0:
        assert np.array_equal(dst, data[off:off + 3]), off
    gaps = np.ones(4096, bool)
    for off, _ in stretches0:
        gaps[off:off + 3] = False
    assert np.array_equal(arrays[0][gaps], data[:4096][gaps])
