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

Which ranks call what: :func:`transfer` and :class:`RawExtentReader` (open, ``read``, ``close``) are
collective over the file's communicator; everything else is local.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ckptio import codec as codecs
from ckptio.errors import CheckpointIOError, IncompleteCheckpointError
from ckptio.layout import Box
from ckptio.plan import Extent

from .base import ExtentReader

_MAX_CHUNK = 1 << 30  # MPI counts are C ints: describe larger blocks as several 1 GiB pieces


def hindexed(lengths: Sequence[int], displacements: Sequence[int]):
    """A committed MPI hindexed byte type; pieces above 1 GiB are split (int counts)."""
    from mpi4py import MPI

    lens: list[int] = []
    disps: list[int] = []
    for n, d in zip(lengths, displacements, strict=True):
        while n > _MAX_CHUNK:
            lens.append(_MAX_CHUNK)
            disps.append(d)
            n -= _MAX_CHUNK
            d += _MAX_CHUNK
        if n:
            lens.append(n)
            disps.append(d)
    return MPI.BYTE.Create_hindexed(lens, disps).Commit()


def transfer(fh, pieces_file: Sequence[tuple[int, int]], buffers: Sequence[Any], write: bool) -> int:
    """Collective over fh's communicator: move ``buffers[i]`` to/from file range ``pieces_file[i]``.

    One file view plus one ``*_all`` call, whatever the number of pieces. Returns bytes moved.
    """
    from mpi4py import MPI

    total = sum(n for _, n in pieces_file)
    nonempty = [(off, n, b) for (off, n), b in zip(pieces_file, buffers, strict=True) if n > 0]
    status = MPI.Status()
    if not nonempty:
        fh.Set_view(0, MPI.BYTE, MPI.BYTE)
        empty = np.empty(0, np.uint8)
        (fh.Write_all if write else fh.Read_all)([empty, 0, MPI.BYTE], status)
        return 0
    filetype = hindexed([n for _, n, _ in nonempty], [off for off, _, _ in nonempty])
    memtype = hindexed([n for _, n, _ in nonempty], [MPI.Get_address(b) for _, _, b in nonempty])
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
        from mpi4py import MPI

        self.meta = meta
        self.fh = MPI.File.Open(comm, path, MPI.MODE_RDONLY, info if info is not None else MPI.INFO_NULL)
        self._buffer = np.empty(0, np.uint8)

    def _scratch(self, nbytes: int) -> np.ndarray:
        if self._buffer.nbytes < nbytes:
            raw = np.empty(nbytes + 4096, np.uint8)  # 4096-aligned view for O_DIRECT-friendly buffers
            start = (-raw.ctypes.data) % 4096
            self._buffer = raw[start:start + nbytes]
        return self._buffer[:nbytes]

    def read(self, extents: Sequence[Extent]) -> tuple[list[np.ndarray], int]:
        total = sum(e.nbytes for e in extents)
        buf = self._scratch(total)
        views, pos = [], 0
        for e in extents:
            views.append(buf[pos:pos + e.nbytes])
            pos += e.nbytes
        transfer(self.fh, [(e.file_offset, e.nbytes) for e in extents], views, write=False)
        return [decode_extent(self.meta, e, v) for e, v in zip(extents, views, strict=True)], 1

    def close(self) -> None:
        if self.fh is not None:
            self.fh.Close()
            self.fh = None


class SerialRawReader(ExtentReader):
    """One process reading extents with pread (``ckptio inspect --verify``): no MPI needed."""

    def __init__(self, path: str, meta: Mapping[str, Any]):
        self.meta = meta
        self.fd = os.open(path, os.O_RDONLY)

    def read(self, extents: Sequence[Extent]) -> tuple[list[np.ndarray], int]:
        out = []
        for e in extents:
            data = os.pread(self.fd, e.nbytes, e.file_offset)
            if len(data) != e.nbytes:
                raise IncompleteCheckpointError(f"variable {e.var!r}: file ends inside the data at offset "
                                                f"{e.file_offset}")
            out.append(decode_extent(self.meta, e, np.frombuffer(data, np.uint8)))
        return out, len(extents)

    def close(self) -> None:
        os.close(self.fd)


def decode_extent(meta: Mapping[str, Any], extent: Extent, raw: np.ndarray) -> np.ndarray:
    """Stored bytes of an extent -> array of its box shape in native byte order."""
    var = meta["variables"][extent.var]
    dtype = np.dtype(var.get("storage", {}).get("file_dtype", var["dtype"]))  # e.g. big-endian in CDF files
    if extent.codec is not None:
        where = f"variable {extent.var!r} at offset {extent.file_offset}"
        arr = codecs.decompress(raw, extent.codec, dtype, extent.box.size, where)
    else:
        arr = raw.view(dtype)
    arr = arr.reshape(extent.box.shape)
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
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
    for name, var in meta["variables"].items():
        shape = tuple(int(s) for s in var["shape"])
        offset = var.get("storage", {}).get("file_offset")
        if math.prod(shape) == 0 or offset is None:
            continue
        itemsize = np.dtype(var["dtype"]).itemsize
        blocks = [(i, Box(tuple(b["offset"]), tuple(b["shape"])), b["checksum"])
                  for i, b in enumerate(var["blocks"]) if math.prod(b["shape"]) > 0]
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
