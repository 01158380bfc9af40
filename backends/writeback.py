"""Starting the write-back of what was written, before the ``fsync`` that makes it durable.

``sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE)`` (Linux; the os module has no wrapper, so through
ctypes) hands the range's dirty pages to the storage and returns without waiting: the storage works while the
writer copies its next bytes into the page cache, and the final ``fsync`` waits for the tail only. It is a
scheduling hint and changes no guarantee: a failure of it is not raised (the ``fsync`` reports any error of the
writes), and where there is no such call (another system) nothing starts early.

* :class:`ckptio.backends.rangeio.PosixRangeWriter` and :class:`~ckptio.backends.rangeio.MpiRangeWriter` (the
  native format's write aggregators) start the whole pages they wrote once ``CKPTIO_WRITEBACK_BYTES`` are
  written (:class:`Spans`; at the end of the call that reaches it: their calls take at most 1 MiB, or the
  setting where it is smaller, :func:`ckptio.backends.rangeio.call_bytes`);
* :class:`FileWriteback`: for files a format library writes (HDF5, PnetCDF: their own MPI-IO handles), the
  engine starts the write-back of the whole file on each rank that writes it after each of the library's data
  steps (:mod:`ckptio.engine.write`), through a read-only descriptor of its own.

Everything here is local to one process.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Callable

_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start write-out of the range's dirty pages, do not wait for it
PAGE = 4096
MIN_BYTES = 64 << 10  # CKPTIO_WRITEBACK_BYTES below this is raised to it (a call per page would crawl)


def _libc_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """Linux's ``sync_file_range(2)``, or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


_sync_file_range = _libc_sync_file_range()
AVAILABLE = _sync_file_range is not None


def start(fd: int, offset: int, nbytes: int) -> bool:
    """Local: start the write-back of ``nbytes`` at ``offset`` of ``fd`` (``nbytes`` 0: to the end of the file);
    whether it was started (False where there is no such call, or it failed: the ``fsync`` will say why)."""
    return AVAILABLE and _sync_file_range(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE) == 0


def open_quietly(path: str) -> int | None:
    """Local: a read-only descriptor of ``path`` of this process's own (for the write-back and the ``fsync`` of a
    file another handle writes), or None where the path does not open as a file (a file system only an MPI-IO
    driver reaches): then nothing is started early, and nothing raised."""
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


def close_quietly(fd: int | None) -> None:
    """Local: close a descriptor :func:`open_quietly` gave (None: nothing); an error closing it is not raised (it
    was only read from, or only used to start write-backs and sync: the ``fsync`` reported any write error)."""
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def every_bytes(setting: int, largest: int) -> int:
    """The bytes between two write-back starts for the setting ``CKPTIO_WRITEBACK_BYTES`` (0: none, and none
    where the system has no ``sync_file_range``): at least :data:`MIN_BYTES`, at most ``largest`` (the range
    writers pass their 1 GiB limit), whole pages."""
    if not setting or not AVAILABLE:
        return 0
    return min(max(setting, MIN_BYTES), largest) // PAGE * PAGE


class Spans:
    """What one writer wrote since it last started the write-back, started in whole pages once ``every`` bytes
    (:func:`every_bytes`; 0: never) are written: the span from the first to the last byte written since the last
    start, one call whatever the runs (pages of it already under write-back are left as they are). Local."""

    def __init__(self, every: int):
        self.every = every
        self.started = 0  # write-backs started (sync_file_range calls that succeeded)
        self._span: tuple[int, int] | None = None
        self._pending = 0

    def written(self, fd: int, offset: int, nbytes: int) -> None:
        """``nbytes`` at ``offset`` of ``fd``'s file are in the page cache. Never raises: an error of the
        write-back itself reaches the writer's ``fsync``, which reports it."""
        if not self.every:
            return
        lo, end = (offset, offset + nbytes) if self._span is None else (min(self._span[0], offset),
                                                                        max(self._span[1], offset + nbytes))
        self._span, self._pending = (lo, end), self._pending + nbytes
        if self._pending >= self.every:
            # whole pages only: a page this writer wrote part of may still get its other part (another run)
            first, stop = -(-lo // PAGE) * PAGE, end // PAGE * PAGE
            if stop > first:
                self.started += start(fd, first, stop - first)
            self._span, self._pending = None, 0


def fsync_file(path: str) -> bool:
    """Local: make what this node's page cache holds of ``path`` durable with an ``fsync`` of a read-only
    descriptor of its own, whoever wrote it (a format library's MPI-IO handle): no collective inside, so a
    write error that reached some ranks only cannot leave the others waiting in the library's ``MPI_File_sync``
    (Open MPI's OMPIO returns from it on the failing rank before its barrier). False where the path does not open
    as a file (a file system only an MPI-IO driver reaches) or the system refuses ``fsync`` on such a descriptor:
    the caller then syncs through the library. Raises OSError where the ``fsync`` reports a failed write."""
    fd = open_quietly(path)
    if fd is None:
        return False
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno in (errno.EBADF, errno.EINVAL, errno.EROFS):
            return False
        raise
    finally:
        os.close(fd)
    return True


def sync_own_writes(path: str, library_sync: Callable[[], object]) -> None:
    """Local where the path opens as a file: what this rank's library handle wrote of ``path`` made durable with
    :func:`fsync_file`, not the library's collective sync. Open MPI's OMPIO keeps a collective write's request
    that failed on one rank in its list of pending requests for good (``MPI_Wait`` does not free a request
    that failed), and from then on its ``MPI_File_sync`` of ANY file returns at once on that rank, before its
    barrier, while the other ranks wait in it: after a write error on one client, every later checkpoint of a
    format library that synced through MPI-IO hung (found by ``tests/test_pnetcdf_groups.py``, Open MPI
    4.1.4). Only where the path does not open as a file (a file system only an MPI-IO driver reaches; the
    same on every rank) is ``library_sync`` called instead, collective like the library's sync it is.
    Raises CheckpointIOError where the ``fsync`` reports a failed write."""
    from ckptio.errors import CheckpointIOError

    try:
        if fsync_file(path):
            return
    except OSError as exc:
        raise CheckpointIOError(f"{path}: fsync failed: {os.strerror(exc.errno or 0)}") from None
    library_sync()


class FileWriteback:
    """The write-back of a file another library writes, started whole each time :meth:`start` is called: on a
    read-only descriptor of its own, opened at the first call (a file that cannot be opened: nothing is started,
    nothing raised). ``enabled`` False (``CKPTIO_WRITEBACK_BYTES=0``): nothing at all."""

    def __init__(self, path: str, enabled: bool = True):
        self.path = path
        self.enabled = enabled and AVAILABLE
        self.started = 0  # write-backs started
        self._fd: int | None = None

    def start(self) -> None:
        """Local: start the write-back of every dirty page of the file (this node's page cache)."""
        if not self.enabled:
            return
        if self._fd is None:
            self._fd = open_quietly(self.path)
            if self._fd is None:
                self.enabled = False
                return
        self.started += start(self._fd, 0, 0)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        close_quietly(fd)
