"""Byte-range writers: how a write aggregator puts its file domain into the file, for ckptio's own collective
buffering (:mod:`ckptio.engine.write_aggregate`). A *run* is a file offset and the contiguous byte arrays
written there one after the other (a round buffer's bytes, or the caller's own arrays), written in calls of at
most :func:`call_bytes` that end on page boundaries of the file.

* :class:`PosixRangeWriter` (``CKPTIO_WRITE_IO=posix``, the default): ``pwritev`` on the aggregator's own file
  descriptor, no MPI: ``independent``, so the engine writes round k in a helper thread while round k+1 is
  exchanged. Its calls write at most :data:`CALL_BYTES` (1 MiB) each, ending on page boundaries of the file, and
  after each ``CKPTIO_WRITEBACK_BYTES`` (4 MiB; at least 64 KiB) it starts the write-back of the whole pages written
  (:mod:`ckptio.backends.writeback`: ``sync_file_range``, Linux; nothing elsewhere): the final ``fsync`` waits for the
  tail only, where it would otherwise start writing the whole domain after the last copy into the page cache
  (FLASH-IO's checkpoint shape on 4 ranks of a 2-core VM, ext4: 157 -> 111 ms per checkpoint, 2 GiB 2.39 ->
  1.49 s; benchmarks/README.md). It changes no guarantee: durability still comes from the ``fsync`` of
  :meth:`sync`. Why 1 MiB calls: Linux sizes the page-cache folios a buffered write allocates by the write's
  length (large folios: XFS, and ext4 since 6.16), so a call over a whole aligned 2 MiB range asks for a 2 MiB
  folio. That order is the one a VM's free page reporting (virtio-balloon) hands back to the host
  (the likely mechanism; inferred from measurements, not traced in the kernel, and measured on this project's
  VM only: kernel 6.18, ext4, page_reporting_order 9). There, 4 MiB calls made 16 and 17 of 100 FLASH-IO-shaped
  checkpoints (two launches, 2 ranks) take 0.2-0.7 s instead of 0.05 s, all of it CPU inside ``pwritev``; 1 MiB
  calls none (two launches of 100). Plain ``pwritev`` into one shared file, without ckptio, split alike: 4 MiB
  calls 8 and 7 slow rounds of 100, 2 MiB 7, 64 MiB 9; 1.5 MiB, 1 MiB (twice) and 256 KiB none. A ``pwritev``
  costs a few microseconds here (not measured on Lustre or GPFS); the file systems' own requests (block layer
  requests, Lustre RPCs) are built from the dirty pages, not from the calls. A ``CKPTIO_WRITEBACK_BYTES`` below
  1 MiB makes the calls that small (:func:`call_bytes`);
* :class:`MpiRangeWriter` (``CKPTIO_WRITE_IO=mpiio``): the file opened by the aggregators' sub-communicator
  (``MPI_File_open``, collective over it), independent ``MPI_File_write_at`` calls with an hindexed memory type
  over each call's arrays (no packing); for file systems reached only through an MPI-IO driver. Where the path
  opens (a local or mounted file system, whose pages the kernel's page cache holds) its calls are cut and
  followed by write-back starts as the POSIX writer's; elsewhere one call per run of up to 1 GiB, no write-back.

Which ranks call what: opening, ``sync`` and ``close`` of an :class:`MpiRangeWriter` are collective over the
aggregators' communicator; everything else is local to one aggregator.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Sequence

import numpy as np
from ckptio.backends import writeback
from ckptio.backends.base import CheckpointIOError, Run

from ckptio.coord.datatypes import address as _address
from ckptio.coord.datatypes import buffers_type

_MAX_IOV = 512  # arrays per pwritev call (well under IOV_MAX, 1024 on Linux)
_MAX_CALL = 1 << 30  # bytes per call (Linux moves at most 0x7ffff000 per call; MPI counts are C ints)
CALL_BYTES = 1 << 20  # bytes per write call: the page cache's folios for it stay below 2 MiB (module docstring)
_PAGE = writeback.PAGE


def joined(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Consecutive uint8 arrays that follow one another in memory joined into one (fewer iovec entries, larger
    MPI writes). The joined array views the same memory: the caller keeps the originals alive. Local."""
    out: list[np.ndarray] = []
    for a in arrays:
        if not a.nbytes:
            continue
        if out and _address(a) == _address(out[-1]) + out[-1].nbytes:
            size = out[-1].nbytes + a.nbytes
            out[-1] = np.frombuffer((ctypes.c_char * size).from_address(_address(out[-1])), np.uint8)
        else:
            out.append(a)
    return out


def _space_error(path: str, exc: OSError, nbytes: int, offset: int) -> CheckpointIOError:
    why = os.strerror(exc.errno) if exc.errno else str(exc)
    more = ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        more = f" (no space left for the checkpoint on the file system of {os.path.dirname(os.path.abspath(path))})"
    return CheckpointIOError(f"{path}: writing {nbytes:,} bytes at offset {offset:,} failed: {why}{more}")


class PosixRangeWriter:
    """An aggregator's independent writer: ``pwritev`` of each run, short writes continued. No MPI (a helper
    thread may write while the calling thread exchanges). Opening is local (the file exists: the planning rank
    created it with its layout, :mod:`ckptio.engine.fslayout`)."""

    independent = True

    def __init__(self, path: str, writeback_bytes: int = 0):
        self.path = path
        self.fd: int | None = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        self.writeback_bytes = writeback.every_bytes(writeback_bytes, _MAX_CALL)
        self._spans = writeback.Spans(self.writeback_bytes)
        self.call_bytes = call_bytes(self.writeback_bytes)

    @property
    def writebacks(self) -> int:
        """Write-backs started (``sync_file_range`` calls that succeeded)."""
        return self._spans.started

    def write(self, runs: Sequence[Run]) -> int:
        """Local: every run's arrays at its file offset; the number of ``pwritev`` calls. CheckpointIOError
        naming the file, the offset and the cause (no space left, quota) when one fails."""
        calls = 0
        for offset, arrays in runs:
            calls += self._pwritev(joined(arrays), int(offset))
        return calls

    def _pwritev(self, arrays: list[np.ndarray], offset: int) -> int:
        views = [memoryview(a).cast("B") for a in arrays if a.nbytes]
        calls, done, k, skip = 0, 0, 0, 0  # views[k][skip:] is the next memory to write
        while k < len(views):
            room = self.call_bytes - (offset + done) % _PAGE  # at most call_bytes, ending on a page boundary
            batch = []
            for v in views[k:k + _MAX_IOV]:
                v = v[skip:] if not batch else v
                batch.append(v[:room])
                room -= len(batch[-1])
                if not room:
                    break
            try:
                put = os.pwritev(self.fd, batch, offset + done)
            except OSError as exc:
                raise _space_error(self.path, exc, sum(len(b) for b in batch), offset + done) from None
            calls += 1
            if put == 0:
                raise _space_error(self.path, OSError(errno.ENOSPC, "short write"), sum(len(b) for b in batch),
                                   offset + done)
            self._spans.written(self.fd, offset + done, put)
            done += put
            while put:
                left = len(views[k]) - skip
                if put >= left:
                    put -= left
                    k, skip = k + 1, 0
                else:
                    skip, put = skip + put, 0
        return calls

    def sync(self) -> None:
        """Local: this aggregator's writes are durable (``fsync``)."""
        writeback.fsync_or_raise(self.fd, self.path)

    def hints(self) -> dict[str, str]:
        """No MPI-IO file: no hints took effect."""
        return {}

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def abort(self) -> None:
        try:
            self.close()
        except OSError:
            pass


class MpiRangeWriter:
    """The aggregators' MPI-IO file: opened collectively by their sub-communicator (``comm``), written with
    independent ``MPI_File_write_at`` calls (memory described by an hindexed type: no packing). Where the path
    opens as a file of the kernel's, the calls are cut as :class:`PosixRangeWriter`'s (:func:`call_bytes`, ending on
    page boundaries) and the aggregator starts the write-back of the whole pages it wrote every
    ``writeback_bytes``, through a read-only descriptor of its own; where it does not (a file system only an
    MPI-IO driver reaches), one call per run of up to 1 GiB and no write-back."""

    independent = False  # MPI calls: made in the engine's calling thread

    def __init__(self, path: str, comm, info, writeback_bytes: int = 0):
        from ckptio.coord.mpi import MPI

        self.path = path
        own = info.Dup() if info is not None and info != MPI.INFO_NULL else MPI.Info.Create()
        try:
            own.Set("romio_no_indep_rw", "false")  # every aggregator writes on its own (independent writes)
            self.fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_WRONLY, own)
        finally:
            own.Free()
        # a file the kernel opens (its page cache holds the pages): calls cut and write-back started as the POSIX
        # writer's; else (a file system only the MPI-IO driver reaches) calls of up to 1 GiB and no write-back
        self._fd = writeback.open_quietly(path)
        every = writeback.every_bytes(writeback_bytes, _MAX_CALL) if self._fd is not None else 0
        self._call = call_bytes(every) if self._fd is not None else _MAX_CALL
        self._spans = writeback.Spans(every)

    @property
    def writebacks(self) -> int:
        """Write-backs started (``sync_file_range`` calls that succeeded)."""
        return self._spans.started

    def write(self, runs: Sequence[Run]) -> int:
        """Local: each run with ``MPI_File_write_at`` in pieces (:func:`call_bytes`, or 1 GiB: C int counts, where
        the path is not a kernel file); the number of calls.
        CheckpointIOError when the library wrote less than asked or failed."""
        from ckptio.coord.mpi import MPI

        calls = 0
        for offset, arrays in runs:
            for at, chunk in _chunks(int(offset), joined(arrays), self._call):
                n = sum(a.nbytes for a in chunk)
                status = MPI.Status()
                try:
                    if len(chunk) == 1:
                        self.fh.Write_at(at, [chunk[0], n, MPI.BYTE], status)
                    else:
                        memtype = buffers_type([(a.nbytes, a) for a in chunk])
                        try:
                            self.fh.Write_at(at, [MPI.BOTTOM, 1, memtype], status)
                        finally:
                            memtype.Free()
                except MPI.Exception as exc:
                    raise CheckpointIOError(f"{self.path}: MPI_File_write_at of {n:,} bytes at offset {at:,} "
                                            f"failed: {exc.Get_error_string()}") from None
                calls += 1
                if status.Get_count(MPI.BYTE) != n:
                    raise CheckpointIOError(f"{self.path}: MPI-IO wrote {status.Get_count(MPI.BYTE):,} of {n:,} "
                                            f"bytes at offset {at:,} "
                                            "(file system full, quota exceeded, or a file size limit: ulimit -f?)")
                if self._fd is not None:
                    self._spans.written(self._fd, at, n)
        return calls

    def sync(self) -> None:
        """Local where the kernel opens the file: ``fsync`` of this aggregator's read-only descriptor (opened before
        its writes), not ``MPI_File_sync``, which Open MPI's OMPIO fails on one rank alone once any collective
        write of the process failed there (:class:`.writeback.OwnDescriptor`). Elsewhere (a file system only the
        MPI-IO driver reaches) collective over the aggregators: ``MPI_File_sync``."""
        if self._fd is None:
            self.fh.Sync()
        else:
            writeback.fsync_or_raise(self._fd, self.path)

    def hints(self) -> dict[str, str]:
        from ckptio.coord.hints import info_to_dict

        info = self.fh.Get_info()
        try:
            return info_to_dict(info)
        finally:
            info.Free()

    def close(self) -> None:
        """Collective over the aggregators (the MPI file first: nothing local may keep a rank out of it)."""
        fh, self.fh = self.fh, None
        try:
            if fh is not None:
                fh.Close()
        finally:
            fd, self._fd = self._fd, None
            writeback.close_quietly(fd)

    def abort(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def call_bytes(writeback_every: int) -> int:
    """The most bytes one write call of a kernel file takes: :data:`CALL_BYTES`, or the write-back interval where
    that is smaller (a setting below 1 MiB keeps its meaning: a write-back started every that many bytes)."""
    return min(CALL_BYTES, writeback_every) if writeback_every else CALL_BYTES


def _chunks(offset: int, arrays: list[np.ndarray], call: int = _MAX_CALL) -> list[tuple[int, list[np.ndarray]]]:
    """The arrays of one run regrouped into consecutive chunks of at most ``call`` bytes (whole pages) that end on
    page boundaries of the file (an array split where a chunk ends), each with its file offset. Local."""
    out: list[tuple[int, list[np.ndarray]]] = []
    current: list[np.ndarray] = []
    at = offset
    room = call - at % _PAGE
    for a in arrays:
        while a.nbytes:
            take = a[:room]
            current.append(take)
            room -= take.nbytes
            a = a[take.nbytes:]
            if not room:
                out.append((at, current))
                at += sum(c.nbytes for c in current)
                current, room = [], call - at % _PAGE
    if current:
        out.append((at, current))
    return out


def open_range_writer(io: str, path: str, comm, info, writeback_bytes: int = 0
                      ) -> PosixRangeWriter | MpiRangeWriter:
    """The range writer ``io`` selects (``"posix"``: local; ``"mpiio"``: collective over ``comm``, the
    aggregators), each starting the write-back every ``writeback_bytes``."""
    if io == "posix":
        return PosixRangeWriter(path, writeback_bytes)
    if io == "mpiio":
        return MpiRangeWriter(path, comm, info, writeback_bytes)
    raise ValueError(f"unknown byte-range I/O {io!r} (expected posix or mpiio)")
