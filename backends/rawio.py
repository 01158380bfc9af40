"""Byte-range I/O shared by every backend: restart reads go around the format library.

Every format ckptio writes stores each variable (native: each block) as plain contiguous bytes at a known
file offset: the native format by construction, HDF5 because datasets are contiguous and unfiltered,
CDF-5 because non-record variables always are. So one reader serves all three: the aggregators open the
file with MPI-IO and read their extents with one file view and one ``Read_all`` per round
(:class:`RawExtentReader`); ``ckptio inspect --verify`` reads them with ``pread`` (:class:`SerialRawReader`).
:func:`decode_extent` turns the stored bytes into native-order arrays (``storage.file_dtype`` says how a
format stores them, e.g. big-endian in CDF files).

:func:`leading_axis_bands` describes a variable stored as ONE C-ordered array (HDF5 dataset, netCDF
variable) as extents for the read planner.

Which ranks call what: :func:`transfer` and :class:`RawExtentReader` (open, ``read``, ``close``) are collective
over the file's communicator; everything else is local. (Space reservation and the check that written data
landed are the engine's: :mod:`ckptio.engine.space`.)
"""

from __future__ import annotations

import ctypes
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from ckptio.backends.base import (
    Box,
    CheckpointIOError,
    Extent,
    ExtentReader,
    IncompleteCheckpointError,
    VariableRecord,
    variables_of,
)

from ckptio.coord.datatypes import address as _address
from ckptio.coord.datatypes import buffers_type, hindexed
from ckptio.model import codec as codecs
from ckptio.model import pagealign

_MAX_CHUNK = 1 << 30  # bytes per preadv call at most (and per MPI piece: see ckptio.coord.datatypes)


def file_ordered(pieces_file: Sequence[tuple[int, int]], buffers: Sequence[Any]) -> list[tuple[int, int, Any]]:
    """The non-empty ``(file offset, length, buffer)`` triples sorted by file offset (stable). Local.

    MPI requires a filetype's displacements to be monotonically nondecreasing (MPI-4.1 section 14.3);
    OMPIO accepts any order, ROMIO does not. The memory type lists the buffers in the same order, so each
    buffer still goes to (comes from) its own file range.
    """
    triples = [(off, n, b) for (off, n), b in zip(pieces_file, buffers, strict=True) if n > 0]
    triples.sort(key=lambda t: t[0])
    return triples


def transfer(fh, pieces_file: Sequence[tuple[int, int]], buffers: Sequence[Any], write: bool) -> int:
    """Collective over fh's communicator: move ``buffers[i]`` to/from file range ``pieces_file[i]``. A buffer
    may be a strided numpy view (a memory selection: its elements in C order, read in place through the memory
    type, see :mod:`ckptio.model.memsel`).

    One file view plus one ``*_all`` call, whatever the number of pieces; the pieces may come in any order
    (see :func:`file_ordered`). Both types are hindexed types of ``MPI_BYTE`` from :func:`hindexed` (no
    subarray inside an hindexed file view: ROMIO up to MPICH 4.0.3 flattens that shape wrongly, mpich issue
    7169). Returns bytes moved.
    """
    from ckptio.coord.mpi import MPI

    total = sum(n for _, n in pieces_file)
    nonempty = file_ordered(pieces_file, buffers)
    status = MPI.Status()
    if not nonempty:
        fh.Set_view(0, MPI.BYTE, MPI.BYTE)
        empty = np.empty(0, np.uint8)
        (fh.Write_all if write else fh.Read_all)([empty, 0, MPI.BYTE], status)
        return 0
    filetype = hindexed([n for _, n, _ in nonempty], [off for off, _, _ in nonempty])
    memtype = buffers_type([(n, b) for _, n, b in nonempty])
    try:
        fh.Set_view(0, MPI.BYTE, filetype)
        (fh.Write_all if write else fh.Read_all)([MPI.BOTTOM, 1, memtype], status)
    finally:
        filetype.Free()
        memtype.Free()
    moved = status.Get_count(MPI.BYTE)
    if moved != total:
        verb = "wrote" if write else "read"
        raise CheckpointIOError(f"MPI-IO {verb} {moved} of {total} bytes "
                                "(file system full or file truncated?)")
    return moved


class RawExtentReader(ExtentReader):
    """The aggregators' view of a checkpoint file (any format): one file view + one ``Read_all`` per round.

    Opening, :meth:`read` and :meth:`close` are collective over ``comm`` (the aggregators' sub-communicator).
    """

    def __init__(self, path: str, comm, info, meta: Mapping[str, Any]):
        from ckptio.coord.mpi import MPI

        self.variables = variables_of(meta)
        # the engine resolved the hints for ckptio's own restart aggregators (ckptio.coord.hints.read_hints)
        self.fh = MPI.File.Open(comm, path, MPI.MODE_RDONLY, info if info is not None else MPI.INFO_NULL)
        self._buffers: dict[int, np.ndarray] = {}

    def read(self, extents: Sequence[Extent], slot: int = 0) -> tuple[list[np.ndarray], int]:
        total = sum(e.nbytes for e in extents)
        buf = aligned_scratch(self._buffers, slot, total)
        views, pos = [], 0
        for e in extents:
            views.append(buf[pos:pos + e.nbytes])
            pos += e.nbytes
        transfer(self.fh, [(e.file_offset, e.nbytes) for e in extents], views, write=False)
        return [decode_extent(self.variables[e.var], e, v) for e, v in zip(extents, views, strict=True)], 1

    def close(self) -> None:
        if self.fh is not None:
            self.fh.Close()
            self.fh = None


def aligned_scratch(buffers: dict[int, np.ndarray], slot: int, nbytes: int) -> np.ndarray:
    """``nbytes`` of the reusable, 4096-aligned buffer ``slot`` (grown when too small; the pages of a reused
    buffer are already mapped, so reading into it costs no page faults). Local."""
    buf = buffers.get(slot)
    if buf is None or buf.nbytes < nbytes:
        buf = buffers[slot] = pagealign.page_aligned_bytes(nbytes)
    return buf[:nbytes]


def open_extents(path: str, comm, info, meta: Mapping[str, Any]) -> ExtentReader:
    """The reader every backend's restart uses (see ``Backend.open_extents``). ``comm`` None (the engine's default,
    ``CKPTIO_READ_IO=posix``): :class:`PosixExtentReader`, opened by each aggregator on its own: ckptio's
    aggregation already happened (each aggregator owns contiguous, stripe-aligned file domains), so a second
    two-phase layer inside MPI-IO would only add copies. A communicator (``CKPTIO_READ_IO=mpiio``, file systems that
    need MPI-IO's own driver, e.g. without a POSIX mount): :class:`RawExtentReader`, collective over it."""
    if comm is None:
        return PosixExtentReader(path, meta)
    return RawExtentReader(path, comm, info, meta)


def _bytes_at(addr: int, nbytes: int) -> np.ndarray:
    """A uint8 array over ``nbytes`` of existing memory at ``addr`` (consecutive views of one live buffer)."""
    return np.frombuffer((ctypes.c_char * nbytes).from_address(addr), np.uint8)


_MAX_IOV = 512  # arrays per preadv call (well under IOV_MAX, 1024 on Linux)


def _joined(memory: list[np.ndarray]) -> list[np.ndarray]:
    """Consecutive uint8 arrays that follow one another in memory joined into one (fewer iovec entries)."""
    out: list[np.ndarray] = []
    for m in memory:
        if not m.nbytes:
            continue
        if out and _address(m) == _address(out[-1]) + out[-1].nbytes:
            out[-1] = _bytes_at(_address(out[-1]), out[-1].nbytes + m.nbytes)
        else:
            out.append(m)
    return out


def _staging_positions(extents: Sequence[Extent], whole: Sequence[bool]) -> list[int | None]:
    """Where each extent not read whole into the caller's memory goes in the page-aligned read buffer: one after
    the other, except that a large extent not continuing the previous one in the file starts where its bytes
    sit STAGING_SHIFT bytes off their page offset in the file, so that neither the copy from the page cache nor
    the one on to the destination (the exchange's, or a local one) runs at a slow page shift (see
    :mod:`ckptio.model.pagealign`; at most 4 KiB of slack per extent of at least 64 KiB)."""
    positions: list[int | None] = []
    pos, follows = 0, None  # follows: the file offset that continues the previous buffered extent
    for e, w in zip(extents, whole, strict=True):
        if w:
            positions.append(None)
            continue
        if e.file_offset != follows and e.nbytes >= pagealign.MIN_ALIGNED_BYTES:
            pos = pagealign.staging_position(pos, e.file_offset)
        positions.append(pos)
        pos, follows = pos + e.nbytes, e.file_offset + e.nbytes
    return positions


class PosixExtentReader(ExtentReader):
    """An aggregator's independent reader: large ``preadv`` calls into two reusable aligned buffers.

    Extents that follow one another in the file are read by one call (up to 1 GiB each), so an aggregator
    reads its file domain in as few, as large, requests as its rounds allow. No MPI: :attr:`independent`,
    so the restart reads round k+1 in a helper thread while round k is exchanged. Opening is local (every
    aggregator opens on its own; the caller agrees on failures)."""

    independent = True

    def __init__(self, path: str, meta: Mapping[str, Any]):
        self.variables = variables_of(meta)
        self.path = path
        self.fd: int | None = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self._buffers: dict[int, np.ndarray] = {}

    def read(self, extents: Sequence[Extent], slot: int = 0,
             into: Sequence[Sequence[tuple[int, np.ndarray]] | None] | None = None) -> tuple[list[np.ndarray], int]:
        """As :meth:`ExtentReader.read`; ``into``: per extent, None or the stretches of it to read straight into
        the caller's final memory: ``(byte offset in the extent, contiguous writable uint8 array)``, in order, not
        overlapping. An extent that is one such stretch whole is returned as that memory; any other extent is
        returned as its place in the slot's buffer, where the bytes read elsewhere are left unwritten (one
        ``preadv`` scatters the file's bytes into the buffer and the caller's memory)."""
        targets = list(into) if into is not None else [None] * len(extents)
        whole = [t is not None and len(t) == 1 and t[0][0] == 0 and t[0][1].nbytes == e.nbytes
                 for e, t in zip(extents, targets, strict=True)]
        positions = _staging_positions(extents, whole)
        buf = aligned_scratch(self._buffers, slot, max((p + e.nbytes for p, e in zip(positions, extents, strict=True)
                                                        if p is not None), default=0))
        views: list[np.ndarray] = []
        memory: list[list[np.ndarray]] = []  # per extent, where its bytes go, in file order
        for e, t, w, pos in zip(extents, targets, whole, positions, strict=True):
            if w:
                views.append(t[0][1])
                memory.append([t[0][1]])
                continue
            view = buf[pos:pos + e.nbytes]
            segments, at = [], 0
            for off, dst in t or ():
                if off > at:
                    segments.append(view[at:off])
                segments.append(dst)
                at = off + dst.nbytes
            if at < e.nbytes:
                segments.append(view[at:])
            views.append(view)
            memory.append(segments)
        calls = 0
        # stretches: consecutive extents adjacent in the file, read by one scattering call each
        i = 0
        while i < len(extents):
            j, end = i + 1, extents[i].file_offset + extents[i].nbytes
            while j < len(extents) and extents[j].file_offset == end:
                end += extents[j].nbytes
                j += 1
            calls += self._preadv(_joined([m for k in range(i, j) for m in memory[k]]), extents[i].file_offset)
            i = j
        return [decode_extent(self.variables[e.var], e, v) for e, v in zip(extents, views, strict=True)], calls

    def _preadv(self, memory: list[np.ndarray], offset: int) -> int:
        """Fill the ``memory`` arrays, in order, from file ``offset`` on (short reads continued, at most
        ``_MAX_IOV`` arrays and ``_MAX_CHUNK`` bytes per call); returns the number of calls."""
        views = [memoryview(m).cast("B") for m in memory if m.nbytes]
        calls, done, k, skip = 0, 0, 0, 0  # views[k][skip:] is the next memory to fill
        while k < len(views):
            batch, room = [], _MAX_CHUNK
            for v in views[k:k + _MAX_IOV]:
                v = v[skip:] if not batch else v
                batch.append(v[:room])
                room -= len(batch[-1])
                if not room:
                    break
            got = os.preadv(self.fd, batch, offset + done)
            calls += 1
            if got == 0:
                missing = sum(len(v) for v in views[k:]) - skip
                raise IncompleteCheckpointError(f"{self.path}: file ends at byte {offset + done}, inside the data "
                                                f"({missing} bytes missing at offset {offset + done})")
            done += got
            while got:
                left = len(views[k]) - skip
                if got >= left:
                    got -= left
                    k, skip = k + 1, 0
                else:
                    skip, got = skip + got, 0
        return calls

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class SerialRawReader(ExtentReader):
    """One process reading extents with pread (``ckptio inspect --verify``): no MPI needed."""

    # an extent's stored bytes are the file's own bytes at its offset: a verification may read many extents at
    # once straight from the file (ckptio.engine.verify_scan) and leave only the others (compressed, foreign
    # byte order) to this reader
    file_bytes = True

    def __init__(self, path: str, meta: Mapping[str, Any]):
        self.variables = variables_of(meta)
        self.fd = os.open(path, os.O_RDONLY)

    def read(self, extents: Sequence[Extent], slot: int = 0) -> tuple[list[np.ndarray], int]:
        out = []
        for e in extents:
            data = os.pread(self.fd, e.nbytes, e.file_offset)
            if len(data) != e.nbytes:
                raise IncompleteCheckpointError(f"variable {e.var!r}: file ends inside the data at offset "
                                                f"{e.file_offset}")
            out.append(decode_extent(self.variables[e.var], e, np.frombuffer(data, np.uint8)))
        return out, len(extents)

    def close(self) -> None:
        os.close(self.fd)


def decode_extent(var: VariableRecord, extent: Extent, raw: np.ndarray) -> np.ndarray:
    """Stored bytes of an extent of variable ``var`` -> array of its box shape in native byte order (a foreign byte
    order is swapped in place when ``raw`` is writable, as the read buffer is: no second array). Local."""
    dtype = np.dtype(var.file_dtype)  # e.g. big-endian in CDF files
    if extent.codec is not None:
        where = extent.label or f"variable {extent.var!r} at offset {extent.file_offset}"
        arr = codecs.decompress(raw, extent.codec, dtype, extent.box.size, where)
    else:
        arr = raw.view(dtype)
    arr = arr.reshape(extent.box.shape)
    if not arr.dtype.isnative:  # e.g. CDF's big-endian: swapped where it lies (the read buffer) when it may be
        native = arr.dtype.newbyteorder("=")
        arr = arr.byteswap(inplace=True).view(native) if arr.flags.writeable else arr.astype(native)
    return arr


def leading_axis_bands(meta: Mapping[str, Any]) -> list[Extent]:
    """Pure: extents of variables each stored as one C-ordered array at ``storage.file_offset``.

    A rectangular block is contiguous in such an array only if it spans every axis but the first, so the
    unit of reading is a *band*: the full-width rows ``[r0, r1)`` of the global array, contiguous at
    ``file_offset + r0 * row_bytes``. Writer blocks whose leading-axis intervals overlap (connected
    components) share a band; every band lists the writer blocks it holds (all of them lie wholly inside it)
    so the aggregator that reads it verifies their checksums. A 1-D decomposition along the first axis gives
    one band per block; a decomposition along other axes gives one band for the whole variable (the planner
    splits large bands further, without verification of the split parts). Zero-size variables and blocks have
    no extents; a 0-d variable is one extent.
    """
    out: list[Extent] = []
    for name, var in variables_of(meta).items():
        shape = var.shape
        offset = var.file_offset
        if math.prod(shape) == 0 or offset is None:
            continue
        itemsize = np.dtype(var.dtype).itemsize
        blocks = [(b.index, Box(b.offset, b.shape), b.checksum) for b in var.block_table().blocks() if b.size > 0]
        if not shape:  # a scalar: one element, one block
            out.append(Extent(name, Box((), ()), int(offset), itemsize, tuple(blocks)))
            continue
        row_bytes = math.prod(shape[1:]) * itemsize
        blocks.sort(key=lambda b: b[1].offset[0])
        band: list[tuple[int, Box, str]] = []
        r0 = r1 = 0
        for block in [*blocks, None]:
            if block is not None and band and block[1].offset[0] < r1:
                band.append(block)
                r1 = max(r1, block[1].end[0])
                continue
            if band:
                out.append(Extent(name, Box((r0, *[0] * (len(shape) - 1)), (r1 - r0, *shape[1:])),
                                  int(offset) + r0 * row_bytes, (r1 - r0) * row_bytes, tuple(band)))
            if block is not None:
                band, r0, r1 = [block], block[1].offset[0], block[1].end[0]
    out.sort(key=lambda e: e.file_offset)
    return out
