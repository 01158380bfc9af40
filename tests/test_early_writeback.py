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


PIECE = 2560 << 10  # FLASH-IO's piece of one variable on one rank
PIECES = 12
PAGES = PIECES * PIECE // 4096


def range_writer(io: str, path: Path, writeback_bytes: int) -> rangeio.PosixRangeWriter | rangeio.MpiRangeWriter:
    """The native format's byte-range writer ``io`` of one process (``mpiio``: over MPI.COMM_SELF)."""
    from mpi4py import MPI

    return rangeio.open_range_writer(io, str(path), MPI.COMM_SELF, None, writeback_bytes)


def dirty_after_writing(path: Path, writeback_bytes: int, io: str = "posix") -> tuple[int, int, int]:
    """Write ``PIECES`` runs of 2.5 MiB at scattered offsets (FLASH-IO's pieces, holes between) through the
    range writer ``io``, without its sync: (pages dirty right after, pages of the file in the cache, write-backs
    started)."""
    path.write_bytes(b"")
    writer = range_writer(io, path, writeback_bytes)
    fd = os.open(path, os.O_RDONLY)
    try:
        data = np.full(PIECE, 7, np.uint8)
        runs = [(k * 2 * PIECE, [data]) for k in range(PIECES)]
        writer.write(runs)
        stat = cachestat(fd)
        return stat.dirty, stat.cache, writer.writebacks
    finally:
        os.close(fd)
        writer.sync()
        writer.close()


@pytest.mark.parametrize("io", ["posix", "mpiio"])
def test_written_pages_are_under_write_back_before_the_sync(tmp_path, io):
    unstarted = (4 << 20) // 4096 + 2  # at most the last 4 MiB and a partial page at each end of the span
    dirty_off, _, started_off = dirty_after_writing(tmp_path / "fsync_only", 0, io)
    assert started_off == 0
    if dirty_off == 0:  # tmpfs (a common /tmp): no write-back at all
        pytest.skip(f"{tmp_path}: the file system keeps no dirty pages (tmpfs?): nothing to start early")
    # (the kernel's flusher may have taken some pages by itself under memory pressure; not most of them)
    assert dirty_off > unstarted, f"without early write-back only {dirty_off} of {PAGES} pages are dirty"
    dirty, cached, started = dirty_after_writing(tmp_path / "early", 4 << 20, io)
    assert cached >= PAGES // 2, (cached, PAGES)  # (the file's pages are in the cache: the figures mean something)
    assert started >= PIECES * PIECE // (4 << 20) - 1, started  # one per 4 MiB written
    assert dirty <= unstarted, f"{dirty} of {PAGES} pages still dirty: the write-back was not started"


@pytest.mark.mpi
@pytest.mark.parametrize("io", ["posix", "mpiio"])
@pytest.mark.parametrize("setting,started", [("64K", True), ("0", False)])
def test_the_document_counts_the_write_backs_the_aggregators_started(tmp_path, setting, started, io):
    """CKPTIO_WRITEBACK_BYTES reaches every aggregator's writer (4 ranks, each writes its own region; both
    CKPTIO_WRITE_IO writers), the statistics record how many write-backs started, and the checkpoint restarts
    bit-identically."""
    path = tmp_path / "chk_000001"
    out = run_mpi(4, [PROGRAM, "write", str(path)], timeout=300,
                  env={"CKPTIO_WRITEBACK_BYTES": setting, "CKPTIO_WRITE_IO": io}).stdout
    agg = json.loads(next(line[5:] for line in out.splitlines() if line.startswith("JSON ")))["aggregation"]
    assert agg["io"] == io and len(agg["aggregators"]) == 4, agg
    if started:  # ranks 0, 2 and 3 write 96-224 KiB each (rank 1 no rows): at least one start each
        assert agg["writebacks"] >= 3, agg
    else:
        assert agg["writebacks"] == 0, agg
    for m in (3,):
        assert f"READ OK {m}" in run_mpi(m, [PROGRAM, "read", str(path)], timeout=300).stdout


class _RecordingFile:
    """An MPI file handle that records each ``Write_at``'s (offset, bytes written); everything else passes."""

    def __init__(self, fh, seen: list[tuple[int, int, int]]):
        self._fh, self._seen = fh, seen

    def Write_at(self, offset, buf, status):  # mpi4py's name
        from mpi4py import MPI

        self._fh.Write_at(offset, buf, status)
        self._seen.append((int(offset), status.Get_count(MPI.BYTE), 0))

    def __getattr__(self, name):
        return getattr(self._fh, name)


@pytest.mark.parametrize("io", ["posix", "mpiio"])
@pytest.mark.parametrize("writeback", [0, 64 << 10, 1536 << 10, 4 << 20])
def test_every_byte_lands_where_it_belongs_whatever_the_calls(tmp_path, monkeypatch, writeback, io):
    """Calls of at most ``rangeio.call_bytes`` (1 MiB, or a smaller write-back setting) that end on page
    boundaries of the file (or at a run's end, or at the iovec limit), whatever the write-back setting: runs at
    odd offsets, views larger than a call, many small views; the file holds exactly what was written, and the
    write-back is started in whole pages, at least once per setting plus one call (0: never)."""
    from ckptio.backends import writeback as writeback_mod

    rng = np.random.default_rng(7)
    path = tmp_path / "ranges"
    size = 32 << 20  # (more than the runs can take)
    path.write_bytes(b"")
    expected = np.zeros(size, np.uint8)
    runs, at = [], 3
    for n_views in (1, 40, 3, 1, 700):  # one big view; many small ones (more than one iovec batch)
        arrays = [rng.integers(0, 255, int(rng.integers(1, 3 << 20 if n_views < 10 else 2000)), np.uint8)
                  for _ in range(n_views)]
        runs.append((at, arrays))
        for a in arrays:
            expected[at:at + a.nbytes] = a
            at += a.nbytes
        at += 4097  # a hole, so the next run starts off a page boundary
    run_ends = {off + sum(a.nbytes for a in arrays) for off, arrays in runs}
    calls_seen: list[tuple[int, int, int]] = []  # (offset, bytes, iovecs: 0 for MPI-IO) of every write call
    if io == "posix":
        real = os.pwritev

        def recording(fd, buffers, offset, *flags):
            put = real(fd, buffers, offset, *flags)
            calls_seen.append((offset, sum(len(memoryview(b).cast("B")) for b in buffers), len(buffers)))
            return put

        monkeypatch.setattr(rangeio.os, "pwritev", recording)
    starts: list[tuple[int, int]] = []
    real_start = writeback_mod.start

    def recording_start(fd, offset, nbytes):
        starts.append((offset, nbytes))
        return real_start(fd, offset, nbytes)

    monkeypatch.setattr(writeback_mod, "start", recording_start)
    writer = range_writer(io, path, writeback)
    if io == "mpiio":
        writer.fh = _RecordingFile(writer.fh, calls_seen)
    try:
        calls = writer.write(runs)
        writer.sync()
        started = writer.writebacks
    finally:
        writer.close()
    got = np.fromfile(path, np.uint8)
    assert np.array_equal(got, expected[:got.size]) and got.size == at - 4097
    total = sum(a.nbytes for _, arrays in runs for a in arrays)
    every = writeback_mod.every_bytes(writeback, rangeio._MAX_CALL)
    cap = rangeio.call_bytes(every)
    assert cap == (min(every, 1 << 20) if every else 1 << 20)
    assert len(calls_seen) == calls and sum(n for _, n, _ in calls_seen) == total
    assert max(n for _, n, _ in calls_seen) == cap, "some call takes a whole cap (3 MiB arrays)"
    for offset, nbytes, iovecs in calls_seen:  # a call ends on a page, at its run's end, or at the iovec limit
        assert 0 < nbytes <= cap, (offset, nbytes)
        assert ((offset + nbytes) % rangeio._PAGE == 0 or offset + nbytes in run_ends
                or iovecs == rangeio._MAX_IOV), (offset, nbytes, iovecs)
    assert started == len(starts)
    if not writeback:
        assert starts == []
    elif writeback_mod.AVAILABLE:
        assert all(o % rangeio._PAGE == 0 and n > 0 and n % rangeio._PAGE == 0 for o, n in starts), starts
        assert total // (every + cap) <= started <= total // every, (started, total, every, cap)


def test_mpiio_on_a_file_the_kernel_cannot_open_writes_each_run_in_one_call(tmp_path, monkeypatch):
    """A path only the MPI-IO driver reaches (here: the read-only open made to fail): no write-back, and each
    run in one ``MPI_File_write_at`` (the page-cache reason for 1 MiB calls does not apply)."""
    from ckptio.backends import writeback as writeback_mod

    monkeypatch.setattr(writeback_mod, "open_quietly", lambda path: None)
    path = tmp_path / "driver_only"
    path.write_bytes(b"")
    arrays = [np.full(3 << 20, 5, np.uint8), np.full(2 << 20, 6, np.uint8)]
    runs = [(0, arrays[:1]), ((3 << 20) + 4096, arrays[1:])]
    seen: list[tuple[int, int, int]] = []
    writer = range_writer("mpiio", path, 4 << 20)
    writer.fh = _RecordingFile(writer.fh, seen)
    try:
        calls = writer.write(runs)
        writer.sync()
    finally:
        writer.close()
    assert calls == 2 and [(o, n) for o, n, _ in seen] == [(0, 3 << 20), ((3 << 20) + 4096, 2 << 20)], seen
    assert writer.writebacks == 0
    got = np.fromfile(path, np.uint8)
    assert (got[:3 << 20] == 5).all() and (got[(3 << 20) + 4096:] == 6).all() and got.size == (5 << 20) + 4096


def test_a_file_a_library_wrote_is_started_whole(tmp_path):
    """FileWriteback (for HDF5 and PnetCDF files, written through the library's own handle): every dirty page
    of the file is handed to the storage, through a read-only descriptor of its own."""
    from ckptio.backends.writeback import FileWriteback

    path = tmp_path / "library_file"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, np.full(PIECES * PIECE, 3, np.uint8).tobytes())
        if cachestat(fd).dirty == 0:
            pytest.skip(f"{tmp_path}: the file system keeps no dirty pages (tmpfs?)")
        FileWriteback(str(path), enabled=False).start()
        assert cachestat(fd).dirty > PAGES // 2, "disabled, it started nothing"
        started = FileWriteback(str(path))
        started.start()
        started.close()
        assert started.started == 1 and cachestat(fd).dirty == 0
    finally:
        os.close(fd)


@pytest.mark.parametrize("backend", ["hdf5", "pnetcdf"])
@pytest.mark.parametrize("setting", ["4M", "0"])
def test_the_engine_starts_the_write_back_after_each_library_step(tmp_path, monkeypatch, backend, setting):
    """In one process (MPI.COMM_SELF): the writes of three 4 MiB variables are three data steps (HDF5: one
    H5Dwrite each; PnetCDF: one wait_all per group of at least CKPTIO_WRITEBACK_BYTES, tests/test_pnetcdf_groups.py),
    each followed by the start of the file's write-back; CKPTIO_WRITEBACK_BYTES=0: none."""
    from ckptio.backends import available_backends
    from ckptio.backends.writeback import FileWriteback
    from mpi4py import MPI

    import ckptio

    if backend not in available_backends():
        pytest.fail(f"backend {backend} is not available")
    monkeypatch.setenv("CKPTIO_WRITEBACK_BYTES", setting)
    done: list[int] = []
    original = FileWriteback.close
    monkeypatch.setattr(FileWriteback, "close", lambda self: (done.append(self.started), original(self)))
    with ckptio.create(tmp_path / "chk_000001", MPI.COMM_SELF, backend=backend) as ck:
        for name in ("a", "b", "c"):
            ck.write(name, np.arange(1 << 19, dtype=np.float64), offset=(0,), global_shape=(1 << 19,))
    assert len(done) == 1, done
    if setting == "0":
        assert done == [0]
    else:
        assert done[0] >= 3, done
    with ckptio.open(tmp_path / "chk_000001", MPI.COMM_SELF) as ck:
        assert np.array_equal(ck.read("c"), np.arange(1 << 19, dtype=np.float64))
