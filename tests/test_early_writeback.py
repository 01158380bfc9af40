"""The write aggregators start the write-back of what they wrote as they go (``CKPTIO_WRITEBACK_BYTES``, default
4 MiB: ``sync_file_range(SYNC_FILE_RANGE_WRITE)`` in :class:`ckptio.backends.rangeio.PosixRangeWriter`), so the
final ``fsync`` waits for the tail only (benchmarks/README.md: FLASH-IO's shape on 4 ranks, 150 -> 110 ms).

What the page cache holds of a file is read from the kernel itself (``cachestat(2)``, Linux 6.5+: dirty pages
and pages under write-back of one file), not from ckptio's own counters; the plumbing from the setting to the
document's statistics is checked under mpirun."""

from __future__ import annotations

import ctypes
import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest
from ckptio.backends import rangeio
from mpi_helpers import run_mpi

PROGRAM = str(Path(__file__).resolve().parent / "programs" / "write_aggregation.py")
_NR_CACHESTAT = 451  # x86_64 and arm64 (the generic table)


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("cache", "dirty", "writeback", "evicted", "recently_evicted")]


def cachestat(fd: int) -> _Stat:
    """The page cache's figures for the whole file ``fd`` (pages), or pytest.skip where the kernel has none."""
    libc = ctypes.CDLL(None, use_errno=True)
    stat, whole = _Stat(), _Range(0, 0)
    if libc.syscall(_NR_CACHESTAT, fd, ctypes.byref(whole), ctypes.byref(stat), 0) != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EPERM):
            pytest.skip(f"no cachestat(2) on this kernel ({os.strerror(err)}): the page cache cannot be read")
        raise OSError(err, os.strerror(err))
    return stat


def dirty_after_writing(path: Path, writeback_bytes: int, nbytes: int = 32 << 20) -> tuple[int, int, int]:
    """Write ``nbytes`` as 2.5 MiB runs at scattered offsets (FLASH-IO's pieces) through a PosixRangeWriter,
    without its sync: (pages dirty right after, pages of the file in the cache, write-backs started)."""
    path.write_bytes(b"")
    writer = rangeio.PosixRangeWriter(str(path), writeback_bytes)
    try:
        piece = 2560 << 10
        data = np.full(piece, 7, np.uint8)
        runs = [(k * 2 * piece, [data]) for k in range(nbytes // piece)]  # every other piece: holes between
        writer.write(runs)
        stat = cachestat(writer.fd)
        return stat.dirty, stat.cache, writer.writebacks
    finally:
        writer.sync()
        writer.close()


def test_written_pages_are_under_write_back_before_the_sync(tmp_path):
    pages = (32 << 20) // 4096
    dirty, cached, started = dirty_after_writing(tmp_path / "early", 4 << 20)
    assert cached >= pages * 0.9, (cached, pages)  # (the file's pages are in the cache: the figures mean something)
    assert started >= 6, started  # one per 4 MiB: 32 MiB in 2.5 MiB runs
    assert dirty <= (4 << 20) // 4096 + 1, f"{dirty} of {pages} pages still dirty: the write-back was not started"
    dirty_off, _, started_off = dirty_after_writing(tmp_path / "fsync_only", 0)
    assert started_off == 0
    assert dirty_off >= pages // 2, f"without early write-back {dirty_off} of {pages} pages are dirty"


@pytest.mark.mpi
@pytest.mark.parametrize("setting,started", [("64K", True), ("0", False)])
def test_the_document_counts_the_write_backs_the_aggregators_started(tmp_path, setting, started):
    """CKPTIO_WRITEBACK_BYTES reaches every aggregator's writer (4 ranks, each writes its own region), the
    statistics record how many write-backs started, and the checkpoint restarts bit-identically."""
    path = tmp_path / "chk_000001"
    out = run_mpi(4, [PROGRAM, "write", str(path)], timeout=300, env={"CKPTIO_WRITEBACK_BYTES": setting}).stdout
    agg = json.loads(next(line[5:] for line in out.splitlines() if line.startswith("JSON ")))["aggregation"]
    assert agg["io"] == "posix" and len(agg["aggregators"]) == 4, agg
    if started:  # ranks 0, 2 and 3 write 96-224 KiB each (rank 1 no rows): at least one start each
        assert agg["writebacks"] >= 3, agg
    else:
        assert agg["writebacks"] == 0, agg
    for m in (3,):
        assert f"READ OK {m}" in run_mpi(m, [PROGRAM, "read", str(path)], timeout=300).stdout
