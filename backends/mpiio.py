"""Native backend: ckptio's own self-describing format written with MPI-IO (``backend="mpiio"``).

File layout (all integers little-endian)::

    offset 0      header, HEADER_SIZE bytes: magic b"\\x89CKPTIO\\n", u32 format version, u32 header size,
                  u64 header checksum (xxh3-64 of all HEADER_SIZE bytes with this field zeroed), zeros
    HEADER_SIZE   data: every rank's blocks in one region per rank (rank order), each block contiguous in
                  C order (or compressed), 8-byte aligned; a rank's region starts on a stripe boundary when
                  it is at least one stripe long, so no two ranks' large writes share a stripe (no lock
                  ping-pong on Lustre)
    index_offset  index: the metadata document (JSON, see ckptio.model.meta), with every block's file offset,
                  stored size, codec and checksum (format version 2: as the integer columns of
                  ckptio.model.block_table; version 1, still read: one JSON object per block)
    EOF - 64      trailer: magic b"CKPTEND\\0", u32 format version, u32 flags, u64 index offset,
                  u64 index length, u64 xxh3-64 of the index, u64 data end, 16 reserved bytes

The trailer is the completion mark: it is written last, by rank 0, after all data was written and synced.
A file without a valid trailer is incomplete; an index whose checksum does not match is corrupt.

Reading trusts nothing of the header before its magic and checksum are checked, so a flipped byte in the
version field is damage (:class:`CorruptCheckpointError`), not "a newer format". Files written before the header
checksum existed (the same format version 1: the field was zero padding, which older readers ignore, so both
directions stay compatible) have 0 there; for them the version is trusted only when the trailer, written
separately, states the same one. A checksum that happens to be 0 is treated the same way (a chance of 2**-64).

Where every byte goes is fixed by the placement before anything is written (``capabilities.placed_bytes``), so
by default ckptio does the collective buffering itself (:mod:`ckptio.engine.write_aggregate`, issue 29): every
rank describes its pieces (:meth:`NativeBackend.placed_pieces`), only the write aggregators create a handle, and
they write their file domains, the header, the index and the trailer through a byte-range writer
(:mod:`ckptio.backends.rangeio`: ``pwritev``, or ``MPI_File_write_at`` on their sub-communicator).
``CKPTIO_WRITE_IO=write_all`` keeps the MPI-IO path: one collective ``MPI_File_write_all`` per checkpoint, each
rank's file view an hindexed type over its blocks' file offsets, its memory type an hindexed type over its arrays'
addresses (no packing copy), MPI-IO's collective buffering (``romio_cb_write``, ``cb_nodes``) doing the file I/O.
Either way the engine reserves the header and every rank's region before the data (not the alignment holes),
and the index and trailer before they are written (:mod:`ckptio.engine.space`).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xxhash
from ckptio.backends import rangeio, rawio, writeback
from ckptio.backends.base import (
    Backend,
    BlockTable,
    BlockToWrite,
    Box,
    Capabilities,
    CheckpointDocument,
    CheckpointIOError,
    CorruptCheckpointError,
    CreateOptions,
    DocumentSlot,
    Extent,
    ExtentReader,
    ExtentTable,
    FormatVersionError,
    IncompleteCheckpointError,
    Placement,
    Step,
    VariablePlan,
    WrittenBlock,
    joined_columns,
    variables_of,
)
from ckptio.backends.rawio import SerialRawReader, transfer

from ckptio.coord.hints import COLLECTIVE_ONLY_HINTS, info_to_dict
from ckptio.model import meta as metamod
from ckptio.model.native_layout import BLOCK_ALIGN, HEADER_SIZE, place_blocks
from ckptio.model.native_layout import align as _align

MAGIC = b"\x89CKPTIO\n"
TRAILER_MAGIC = b"CKPTEND\x00"
FORMAT_VERSION = 2
_HEADER = struct.Struct("<8sIIQ")  # magic, format version, header size, header checksum (0: none, older files)
_TRAILER = struct.Struct("<8sIIQQQQ16s")
TRAILER_SIZE = _TRAILER.size  # 64


def rank_spans(rank: np.ndarray, offsets: np.ndarray, stored: np.ndarray, nprocs: int) -> np.ndarray:
    """Pure: every rank's ``[start, end)`` of the bytes it writes (nprocs x 2, int64; ``[0, 0)`` for none): its
    non-empty blocks, and for rank 0 the header from offset 0. Vectorized."""
    spans = np.zeros((nprocs, 2), np.int64)
    spans[:, 0] = np.iinfo(np.int64).max
    live = np.asarray(stored, np.int64) > 0
    np.minimum.at(spans[:, 0], rank[live], offsets[live])
    np.maximum.at(spans[:, 1], rank[live], offsets[live] + stored[live])
    if nprocs:
        spans[0] = (0, max(int(spans[0, 1]), HEADER_SIZE))
    none = spans[:, 0] > spans[:, 1]
    spans[none] = 0
    return spans


def header_checksum(header: bytes) -> int:
    """xxh3-64 of the ``HEADER_SIZE`` bytes ``header`` with the checksum field (bytes 16-24) zeroed."""
    return xxhash.xxh3_64_intdigest(header[:16] + bytes(8) + header[24:HEADER_SIZE])


def header_bytes(version: int = FORMAT_VERSION) -> bytes:
    """The header of a file (``version`` other than this ckptio's: tests of newer files)."""
    plain = _HEADER.pack(MAGIC, version, HEADER_SIZE, 0).ljust(HEADER_SIZE, b"\0")
    return _HEADER.pack(MAGIC, version, HEADER_SIZE, header_checksum(plain)).ljust(HEADER_SIZE, b"\0")


class _NativeWriteHandle:
    """The native format's :class:`~ckptio.backends.base.WriteHandle` (see there for who calls what).

    ``range_io`` None: one MPI file opened collectively by every rank; data, index and trailer each one collective
    write at offsets every rank knows from its placement share (the index offset is the end of the data, aligned;
    the trailer follows the index). ``range_io`` "posix"/"mpiio": a write aggregator's handle (only they open
    the file): its byte-range writer (:meth:`ranges`) writes the rounds of its domain for the engine, and the
    index and trailer on the rank that holds them."""

    def __init__(self, path: str, comm, info, share: Mapping[str, Any], range_io: str | None = None,
                 writeback_bytes: int = 0):
        from ckptio.coord.mpi import MPI

        self.path, self.share = path, share
        self._ranges = None
        self._own = writeback.OwnDescriptor(path)  # what sync() fsyncs without range_io (opened at the first sync)
        if range_io is None:
            self.fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_WRONLY,
                                    info if info is not None else MPI.INFO_NULL)
        else:
            self._ranges = rangeio.open_range_writer(range_io, path, comm, info, writeback_bytes)
            self.fh = getattr(self._ranges, "fh", None)
        self.index_offset = _align(share["data_end"], BLOCK_ALIGN)
        self._slot: DocumentSlot | None = None
        self._written: list[WrittenBlock] = []

    def define(self) -> None:
        """Nothing to define: the header is written with the data (by the rank whose share says so)."""

    def notes(self) -> list[str]:
        return []

    def reserved_ranges(self) -> list[tuple[int, int]]:
        """Before the data: the header and each rank's region, not the holes left for stripe alignment (nobody
        writes them); after :meth:`document_slot`: the index and the trailer."""
        if self._slot is not None:
            return [(self.index_offset, self.index_offset + self._slot.nbytes + TRAILER_SIZE)]
        return [(0, HEADER_SIZE), *((int(a), int(b)) for a, b in self.share["regions"])]

    def write(self, blocks: Sequence[BlockToWrite], tables: Any = None) -> list[Step]:
        """One step: one collective ``Write_all`` of this rank's blocks (and of the header, on the rank whose
        share holds it) through an hindexed file view (see :func:`~ckptio.backends.rawio.transfer`)."""
        placed, self._written = pieces_of(blocks, self.share)
        pieces = [(off, buf.nbytes) for off, buf in placed]
        buffers = [buf for _, buf in placed]
        return [("write data", lambda: transfer(self.fh, pieces, buffers, write=True))]

    def written(self) -> list[WrittenBlock]:
        return list(self._written)

    def ranges(self) -> rangeio.PosixRangeWriter | rangeio.MpiRangeWriter:
        if self._ranges is None:
            raise RuntimeError("a native handle created without range_io has no byte-range writer")
        return self._ranges

    def sync(self) -> None:
        """Local: the byte-range writer's sync, or this rank's own ``fsync`` (:class:`.writeback.OwnDescriptor`:
        not ``MPI_File_sync``, which Open MPI's OMPIO fails on one rank alone after a failed collective write)."""
        if self._ranges is not None:
            self._ranges.sync()
        else:
            self._own.sync()

    def storage_info(self) -> dict[str, dict[str, Any]]:
        return {}  # every block's place is in the block table

    def effective_hints(self) -> dict[str, str]:
        if self._ranges is not None:
            return self._ranges.hints()
        info = self.fh.Get_info()
        try:
            return info_to_dict(info)
        finally:
            info.Free()

    def document_slot(self, slot: DocumentSlot) -> None:
        """The index goes at the aligned end of the data, the trailer right after it: known on every rank."""
        from ckptio.coord.mpi import MPI

        self._slot = slot
        if self._ranges is None:
            self.fh.Set_view(0, MPI.BYTE, MPI.BYTE)

    def write_document(self, document: bytes | None) -> list[Step]:
        return [("write index", lambda: self._write_at(self.index_offset, document or b"", "index"))]

    def mark_complete(self, mark: bool) -> list[Step]:
        """The trailer, written last: it locates the index and carries its checksum."""
        assert self._slot is not None
        trailer = _TRAILER.pack(TRAILER_MAGIC, FORMAT_VERSION, 0, self.index_offset, self._slot.nbytes,
                                int(self._slot.checksum, 16), self.share["data_end"], b"") if mark else b""
        return [("write the completion mark",
                 lambda: self._write_at(self.index_offset + self._slot.nbytes, trailer, "completion mark"))]

    def _write_at(self, offset: int, payload: bytes, what: str) -> None:
        """Collective even when only one rank has bytes (the others write nothing): with
        ``romio_no_indep_rw=true`` (deferred open) only the aggregators have the file open, so independent
        writes are not allowed. With a byte-range writer: only the rank with bytes writes (independently)."""
        from ckptio.coord.mpi import MPI

        mine = np.frombuffer(payload, np.uint8)
        if self._ranges is not None:
            if mine.size:
                self._ranges.write([(offset, [mine])])
            return
        status = MPI.Status()
        self.fh.Write_at_all(offset, [mine, mine.size, MPI.BYTE], status)
        if status.Get_count(MPI.BYTE) != mine.size:
            raise CheckpointIOError(f"short write of the checkpoint {what} (file system full?)")

    def close(self) -> None:
        if self._ranges is not None:
            self._ranges.close()
            self.fh = None
            return
        fh, self.fh = self.fh, None
        try:
            fh.Close()
        finally:
            self._own.close()

    def abort(self) -> None:
        if self._ranges is not None:
            self._ranges.abort()
            self.fh = None
            return
        self._own.close()
        fh, self.fh = self.fh, None
        if fh is not None:
            try:
                fh.Close()
            except Exception:
                pass


def pieces_of(blocks: Sequence[BlockToWrite], share: Mapping[str, Any]
              ) -> tuple[list[tuple[int, np.ndarray]], list[WrittenBlock]]:
    """Local: a rank's ``(file offset, array)`` pieces (the header first on the rank whose share holds it, then
    its blocks at their placed offsets) and what each block becomes."""
    offsets = share["offsets"]
    pieces: list[tuple[int, np.ndarray]] = []
    if share.get("header"):
        pieces.append((0, np.frombuffer(header_bytes(), dtype=np.uint8)))
    written = []
    for block in blocks:
        off = offsets[block.local_index]
        buf = block.data if isinstance(block.data, np.ndarray) else np.frombuffer(block.data, dtype=np.uint8)
        pieces.append((off, buf))
        written.append(WrittenBlock(off, buf.nbytes, block.codec))
    return pieces, written


class NativeBackend(Backend):
    name = "mpiio"
    format_version = FORMAT_VERSION
    capabilities = Capabilities(compression=True, segments=True, readable_by=("ckptio",), placed_bytes=True)
    extra_hints = COLLECTIVE_ONLY_HINTS  # every access is collective: ROMIO may open on the aggregators only

    signature = MAGIC

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        return head.startswith(MAGIC)

    @classmethod
    def damaged_evidence(cls, f, size: int) -> str | None:
        """The completion mark (trailer) at the end of the file, locating an index inside the file."""
        if size < HEADER_SIZE + TRAILER_SIZE:
            return None
        f.seek(size - TRAILER_SIZE)
        magic, _version, _flags, ioff, ilen, _hash, _end, _ = _TRAILER.unpack(f.read(TRAILER_SIZE))
        if magic == TRAILER_MAGIC and ioff + ilen + TRAILER_SIZE == size:
            return "its completion mark (the native trailer) at the end of the file is intact"
        return None

    def place(self, variables: Mapping[str, VariablePlan], stripe_unit: int, nprocs: int) -> Placement:
        """Rank-major placement: rank 0's blocks, then rank 1's, ... (see the module docstring), from the plan's
        columns (:func:`place_blocks`). Each rank's share: the file offsets of its own blocks by local index and
        where the data ends; the planning rank's: also every region (it reserves them); rank 0's: the header."""
        columns = joined_columns(variables)  # (all variables' blocks at once: no numpy step per variable)
        rank, local, stored = columns.rank, columns.local_index, columns.stored
        offsets, end, regions = place_blocks(rank, local, stored, stripe_unit)
        in_order = offsets[np.lexsort((local, rank))].tolist()  # a rank's local indices are 0..k-1
        by_rank: list[list[int]] = []
        start = 0
        for count in np.bincount(rank, minlength=nprocs).tolist():
            by_rank.append(in_order[start:start + count])
            start += count
        shares = [{"offsets": by_rank[r], "data_end": end, "header": r == 0} for r in range(nprocs)]
        return Placement({**shares[0], "regions": regions}, shares, rank_spans(rank, offsets, stored, nprocs))

    def create(self, path: str, comm, info, variables: Mapping[str, VariablePlan], placement: Mapping[str, Any],
               options: CreateOptions) -> _NativeWriteHandle:
        return _NativeWriteHandle(path, comm, info, placement, options.range_io, options.writeback_bytes)

    def placed_pieces(self, blocks: Sequence[BlockToWrite], share: Mapping[str, Any]
                      ) -> tuple[list[tuple[int, np.ndarray]], list[WrittenBlock]]:
        return pieces_of(blocks, share)

    def read_document(self, path: str) -> dict[str, Any]:
        index, index_offset = self._framed_index(path)
        meta = metamod.loads_stored(index, path, "index")
        check_block_table(path, meta, HEADER_SIZE, index_offset)
        return meta

    def stored_document(self, path: str) -> bytes:
        """The index as stored, after the checks of the header, the trailer and the index's checksum."""
        return self._framed_index(path)[0]

    @staticmethod
    def _framed_index(path: str) -> tuple[bytes, int]:
        """Serial: the index's bytes and offset, after checking the header, the trailer (the completion mark)
        and the index's checksum; the errors :meth:`read_document` documents."""
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                head = f.read(HEADER_SIZE)
                if size < HEADER_SIZE + TRAILER_SIZE:
                    raise IncompleteCheckpointError(f"{path}: {size} bytes is too short to be a complete checkpoint "
                                                    "(truncated or never committed)")
                magic, version, header_size, stored_sum = _HEADER.unpack_from(head)
                if magic != MAGIC:
                    raise CorruptCheckpointError(f"{path}: header magic is damaged ({magic!r})")
                if stored_sum and stored_sum != header_checksum(head):
                    raise CorruptCheckpointError(f"{path}: header checksum mismatch (the header is damaged)")
                f.seek(size - TRAILER_SIZE)
                tmagic, tversion, _flags, ioff, ilen, ihash, data_end, _ = _TRAILER.unpack(f.read(TRAILER_SIZE))
                # a header without checksum (older files) states its version credibly only with the trailer's
                if (stored_sum or tversion == version) and version > FORMAT_VERSION:
                    raise FormatVersionError(f"{path}: native format version {version} is newer than this ckptio "
                                             f"supports (version {FORMAT_VERSION})")
                if version < 1 or header_size != HEADER_SIZE:
                    raise CorruptCheckpointError(f"{path}: header is damaged (version {version}, size {header_size})")
                if tmagic != TRAILER_MAGIC:
                    raise IncompleteCheckpointError(f"{path}: no completion mark (trailer missing): the checkpoint "
                                                    "was not committed or the file is truncated")
                if tversion != version:
                    raise CorruptCheckpointError(f"{path}: trailer version {tversion} differs from header {version}")
                if ioff + ilen + TRAILER_SIZE != size or ioff < HEADER_SIZE or data_end > ioff:
                    raise CorruptCheckpointError(f"{path}: trailer is damaged (index at {ioff}+{ilen}, file {size} "
                                                 "bytes)")
                f.seek(ioff)
                index = f.read(ilen)
        except OSError as exc:
            if isinstance(exc, IncompleteCheckpointError):
                raise
            raise CheckpointIOError(f"{path}: cannot read checkpoint: {exc.strerror or exc}") from None
        if xxhash.xxh3_64_intdigest(index) != ihash:
            raise CorruptCheckpointError(f"{path}: index checksum mismatch (the index is damaged)")
        return index, ioff

    def extents(self, meta: Mapping[str, Any]) -> list[Extent]:
        out = []
        for name, var in variables_of(meta).items():
            for b in var.block_table().blocks():
                box = Box(b.offset, b.shape)
                if box.size == 0:
                    continue
                out.append(Extent(name, box, int(b.file_offset), b.stored_nbytes, ((b.index, box, b.checksum),), None,
                                  b.codec))
        out.sort(key=lambda e: e.file_offset)
        return out

    def extent_table(self, meta: Mapping[str, Any]) -> ExtentTable:
        return ExtentTable.of_blocks(meta)

    def open_extents(self, path: str, comm, info, meta: Mapping[str, Any]) -> ExtentReader:
        return rawio.open_extents(path, comm, info, meta)

    def serial_extents(self, path: str, meta: Mapping[str, Any]) -> ExtentReader:
        return SerialRawReader(path, meta)


def _blocks_in_data_region(blocks: BlockTable, itemsize: int, data_start: int, data_end: int) -> bool:
    """True if every block (of a validated document) lies in the data region and stores exactly its bytes
    unless compressed: :func:`check_block_table`'s loop as numpy (False: not proven; the loop names the
    problem)."""
    raw = blocks.shape.prod(axis=1) * itemsize if blocks.ndim else np.full(len(blocks), itemsize, np.int64)
    offsets, stored, plain = blocks.file_offset, blocks.stored_nbytes, blocks.codec < 0
    inside = (raw == 0) | ((offsets >= data_start) & (stored <= data_end - offsets))
    return bool(inside.all() and (~plain | (stored == raw)).all())


def _all_blocks_in_data_region(meta: CheckpointDocument, data_start: int, data_end: int) -> bool:
    """:func:`_blocks_in_data_region` for every variable at once (the joined block tables): True when the whole
    document is proven; False sends :func:`check_block_table` through its variables to name the problem."""
    try:
        j = meta.joined_blocks()
        itemsizes = np.array([np.dtype(v.dtype).itemsize for v in meta.variables.values()], np.int64)
    except (KeyError, TypeError, ValueError):
        return False
    raw = j.shape.prod(axis=1) * itemsizes[j.var]  # (padded extents are 1: a scalar's one element)
    inside = (raw == 0) | ((j.file_offset >= data_start) & (j.stored_nbytes <= data_end - j.file_offset))
    return bool(inside.all() and ((j.codec >= 0) | (j.stored_nbytes == raw)).all())


def check_block_table(path: str, meta: CheckpointDocument, data_start: int, data_end: int) -> None:
    """The native format's own checks of a document that passed :func:`ckptio.model.meta.validate` (types, tiling):
    every block lies in the data region and stores exactly its bytes unless compressed, so a damaged index
    fails here and not deep in a read."""
    if meta.backend != NativeBackend.name:
        raise CorruptCheckpointError(f"{path}: metadata says backend {meta.backend!r}, file is in the native format")
    if _all_blocks_in_data_region(meta, data_start, data_end):
        return
    name = None  # the variable being checked, for the message
    try:
        for name in meta.variables:
            var = meta.variables[name]
            itemsize = np.dtype(var.dtype).itemsize
            ndim = len(var.shape)
            blocks = var.block_table()
            if _blocks_in_data_region(blocks, itemsize, data_start, data_end):
                continue
            for b in blocks.blocks():  # something is wrong: find and name it
                i, raw = b.index, b.size * itemsize
                if raw and b.file_offset is None:
                    raise ValueError(f"block {i} has no file offset")
                off, n = b.file_offset or 0, b.stored_nbytes
                if len(b.offset) != ndim or len(b.shape) != ndim:
                    raise ValueError(f"block {i} has the wrong number of dimensions")
                if raw and (off < data_start or off + n > data_end):
                    raise ValueError(f"block {i} lies outside the data region")
                if b.codec is None and n != raw:
                    raise ValueError(f"block {i} stores {n} bytes for {raw} bytes of data")
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptCheckpointError(f"{path}: block table is inconsistent: variable {name!r}: {exc}") from None
