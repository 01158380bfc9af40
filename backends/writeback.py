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


def fsync_or_raise(fd: int, path: str) -> None:
    """Local: ``fsync(fd)``, a failure raised as CheckpointIOError naming ``path`` (for the engine's agreement)."""
    from ckptio.errors import CheckpointIOError

    try:
        os.fsync(fd)
    except OSError as exc:
        raise CheckpointIOError(f"{path}: fsync failed: {os.strerror(exc.errno or 0)}") from None


def refuse_past_file_size_limit(fd: int, path: str) -> None:
    """Local: CheckpointIOError when this process's file size limit (the soft ``RLIMIT_FSIZE``, ``ulimit -f``) is
    below the size of the open file ``fd``: what it wrote past the limit was refused or cut short (see
    :class:`OwnDescriptor`)."""
    import resource

    from ckptio.errors import CheckpointIOError

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit == resource.RLIM_INFINITY:
        return
    size = os.fstat(fd).st_size
    if size > limit:
        raise CheckpointIOError(f"{path}: this rank may write no file past {limit:,} bytes (its file size limit, "
                                f"ulimit -f) and the file is {size:,} bytes: the MPI-IO library may have written "
                                "less than it was given here (a write that crosses the limit is cut short without "
                                "an error)")


class OwnDescriptor:
    """Local: a read-only descriptor of a file a library handle writes (MPI-IO, HDF5, PnetCDF), opened at the
    first sync (the engine's data sync, before the library closes the file) and kept until the close, and its
    ``fsync``: how each rank makes what it wrote through the library durable without the library's collective sync.

    Why not ``MPI_File_sync`` (``H5Fflush``, ``ncmpi_sync``): Open MPI's OMPIO does not free a collective write
    request that failed (``MPI_Wait`` keeps an errored request), so after a write error on one client it stays in
    the process's list of pending requests for good, and every later ``MPI_File_sync`` of ANY file returns at once on
    that rank, before its barrier, while the other ranks wait in it (Open MPI 4.1.4; after such an error the next
    PnetCDF or HDF5 checkpoint hung: ``tests/faults/test_one_client_write_error.py``). An ``fsync`` has no
    collective inside, and its failure is raised on its rank for the engine's agreement.
    Why kept from the first sync to the close: an ``fsync`` reports the write-back errors that happened since its
    descriptor was opened, even those another descriptor reported first (Linux 4.16 and later), so a failure of
    what the library's close writes (HDF5's metadata) still comes back here after that close.
    :meth:`sync` raises CheckpointIOError (inside the engine's agreed phase: every rank learns of it) where the
    file cannot be opened or the ``fsync`` fails; nothing here ever calls the library's sync instead. It also
    raises where this process may write no file as large as this one (its file size limit, ``ulimit -f``): a
    write that crosses the limit is cut short by the kernel without an error, and OMPIO counts it as done (an
    outside trial: an HDF5 checkpoint committed with 2 KiB of one block missing, on 5 ranks, one of them limited to
    4 KiB less than the file), so the library may have lost some of this rank's writes without a word."""

    def __init__(self, path: str):
        self.path = path
        self.fd: int | None = None

    def sync(self) -> None:
        """This process's writes to the file durable, whichever of its descriptors wrote them."""
        from ckptio.errors import CheckpointIOError

        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError as exc:
                raise CheckpointIOError(f"{self.path}: cannot open it to sync this rank's writes: "
                                        f"{os.strerror(exc.errno or 0)}") from None
        fsync_or_raise(self.fd, self.path)
        refuse_past_file_size_limit(self.fd, self.path)

    def after(self, close_library: Callable[[], object]) -> None:
        """The library's close (collective), then this rank's ``fsync`` of what that close wrote, then this
        descriptor closed (also when either raised)."""
        try:
            close_library()
            self.sync()
        finally:
            self.close()

    def close(self) -> None:
        """Idempotent; an error closing a read-only descriptor is not raised (its ``fsync`` reported any)."""
        fd, self.fd = self.fd, None
        close_quietly(fd)


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
