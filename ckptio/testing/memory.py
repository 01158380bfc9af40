"""The in-memory reference backend (``MemoryBackend``, name ``"memory"``): the storage contract of
:mod:`ckptio.backends.base` in its smallest, obviously correct form, for the contract suite
(:mod:`ckptio.testing.contract`) to run on in milliseconds, without MPI and without a file system.

Its "files" are byte arrays in a process-level store (:data:`FILES`) keyed by absolute path. Every write handle
of one path (one per rank the suite simulates) writes into the same array, as ranks write into one file. It takes
no communicator (``comm`` is ignored) and makes no collective call: each step is a local write, so the engine's
lockstep (every rank the same number of steps) is the only coordination it needs. Nothing is on disk, so no
other process can find such a checkpoint: the backend is NOT registered by default; a test registers it
(:func:`ckptio.backends.register`) or hands it to the suite directly.

Layout of a file (integers little-endian)::

    0             header: MAGIC, u32 format version, u32 catalog length, then the catalog: JSON, one
                  ``[name, dtype, shape]`` per variable (what the format knows of its variables by itself:
                  reading decodes with it, not with the metadata document)
    header end    data: every rank's blocks, rank 0's first, each rank's in declaration order, each block at
                  an 8-byte boundary (raw C-order elements, or compressed bytes)
    index_offset  the metadata document (:func:`ckptio.model.meta.dumps`), at the 8-aligned end of the data
    EOF - 32      the completion mark, written last: TRAILER_MAGIC, u64 index offset, u64 index length,
                  u64 xxh3-64 of the index

Who writes what: the placement gives rank 0 (also the planning rank) the header; every rank's share holds its
own blocks' offsets and where the data ends, nothing of any other rank's blocks.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xxhash

from ckptio.backends.base import (
    Backend,
    BlockToWrite,
    Capabilities,
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
)
from ckptio.model import codec as codecs
from ckptio.model import meta as metamod

MAGIC = b"\x89CKMEM\n\0"
TRAILER_MAGIC = b"CKMEMEND"
FORMAT_VERSION = 1
ALIGN = 8
_HEADER = struct.Struct("<8sII")  # magic, format version, catalog length
_TRAILER = struct.Struct("<8sQQQ")  # magic, index offset, index length, index checksum

#: The process's memory files: absolute path -> bytes.
FILES: dict[str, bytearray] = {}


def _key(path: str) -> str:
    return os.path.abspath(path)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _put(path: str, offset: int, payload: bytes) -> None:
    """Local: ``payload`` at ``offset`` of the memory file ``path`` (which grows, zero-filled, as a file would)."""
    f = FILES.get(path)
    if f is None:
        raise CheckpointIOError(f"{path}: the memory file was removed while being written")
    end = offset + len(payload)
    if len(f) < end:
        f.extend(bytes(end - len(f)))
    f[offset:end] = payload


def header_bytes(variables: Mapping[str, VariablePlan]) -> bytes:
    """The header of a file holding ``variables`` (the whole plan): magic, version and the catalog."""
    catalog = json.dumps([[name, var.dtype, list(var.shape)] for name, var in variables.items()]).encode()
    return _HEADER.pack(MAGIC, FORMAT_VERSION, len(catalog)) + catalog


def read_catalog(path: str, data: bytes) -> dict[str, np.dtype]:
    """Local: variable name -> stored dtype, from the header of the memory file ``data``."""
    if len(data) < _HEADER.size:
        raise IncompleteCheckpointError(f"{path}: {len(data)} bytes is too short for the header")
    magic, version, length = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptCheckpointError(f"{path}: the header magic is damaged ({magic!r})")
    if version > FORMAT_VERSION:
        raise FormatVersionError(f"{path}: memory format version {version} is newer than this one ({FORMAT_VERSION})")
    try:
        return {name: np.dtype(dtype) for name, dtype, _shape in json.loads(data[_HEADER.size:_HEADER.size + length])}
    except (ValueError, TypeError) as exc:
        raise CorruptCheckpointError(f"{path}: the header's catalog is damaged ({exc})") from None


class MemoryWriteHandle:
    """The memory format's :class:`~ckptio.backends.base.WriteHandle` (see there for who calls what): this rank's
    share of the placement says where its blocks go; the rank whose share holds the header writes it."""

    def __init__(self, path: str, share: Mapping[str, Any]):
        self.path, self.share = path, share
        self.index_offset = _align(share["data_end"])
        self._slot: DocumentSlot | None = None
        self._written: list[WrittenBlock] = []
        self.closed = False

    def define(self) -> None:
        """The header and its catalog, by the rank that holds them."""
        if self.share["header"] is not None:
            _put(self.path, 0, self.share["header"])

    def notes(self) -> list[str]:
        return []

    def reserved_ranges(self) -> list[tuple[int, int]]:
        """The header and the data (whole: no holes but the alignment padding); after :meth:`document_slot`, the
        document and the completion mark."""
        if self._slot is not None:
            return [(self.index_offset, self.index_offset + self._slot.nbytes + _TRAILER.size)]
        return [(0, self.share["data_end"])]

    def write(self, blocks: Sequence[BlockToWrite], tables: Any = None) -> list[Step]:
        """One step: this rank's blocks at their placed offsets (a strided view is gathered into C order)."""
        offsets = self.share["offsets"]
        self._written = [WrittenBlock(offsets[b.local_index], int(b.data.nbytes), b.codec) for b in blocks]

        def write() -> None:
            for block, written in zip(blocks, self._written, strict=True):
                _put(self.path, written.file_offset, np.ascontiguousarray(block.data).tobytes())

        return [("write the blocks", write)]

    def written(self) -> list[WrittenBlock]:
        return list(self._written)

    def sync(self) -> None:
        """Nothing to flush: the bytes are in the store once written."""

    def storage_info(self) -> dict[str, dict[str, Any]]:
        return {}  # every block's place is in the block table

    def effective_hints(self) -> dict[str, str]:
        return {}

    def document_slot(self, slot: DocumentSlot) -> None:
        """The document goes at the aligned end of the data, the completion mark right after it."""
        self._slot = slot

    def write_document(self, document: bytes | None) -> list[Step]:
        def write() -> None:
            if document is not None:
                if self._slot is None or len(document) != self._slot.nbytes:
                    raise CheckpointIOError(f"{self.path}: a document of {len(document)} bytes for its slot "
                                            f"({self._slot})")
                _put(self.path, self.index_offset, document)

        return [("write the metadata document", write)]

    def mark_complete(self, mark: bool) -> list[Step]:
        """The trailer, written last: it locates the document and carries its checksum."""
        def write() -> None:
            if mark:
                assert self._slot is not None
                trailer = _TRAILER.pack(TRAILER_MAGIC, self.index_offset, self._slot.nbytes,
                                        int(self._slot.checksum, 16))
                _put(self.path, self.index_offset + self._slot.nbytes, trailer)

        return [("write the completion mark", write)]

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        """The file is discarded: emptied (as the engine truncates a failed temporary file)."""
        self.closed = True
        f = FILES.get(self.path)
        if f is not None:
            del f[:]


class MemoryExtentReader(ExtentReader):
    """Reads extents of a memory file (local: the same object serves the aggregators and one process). Decodes
    with the file's own catalog; returns new arrays (valid as long as the caller keeps them)."""

    def __init__(self, path: str):
        self.path = _key(path)
        data = FILES.get(self.path)
        if data is None:
            raise CheckpointIOError(f"{path}: no such memory file")
        self.dtypes = read_catalog(path, bytes(data))

    def read(self, extents: Sequence[Extent], slot: int = 0) -> tuple[list[np.ndarray], int]:
        data = FILES.get(self.path, bytearray())
        out = []
        for e in extents:
            raw = bytes(data[e.file_offset:e.file_offset + e.nbytes])
            if len(raw) != e.nbytes:
                raise IncompleteCheckpointError(f"{self.path}: the file ends inside variable {e.var!r} (at byte "
                                                f"{len(data)}, the extent at {e.file_offset} has {e.nbytes} bytes)")
            dtype = self.dtypes[e.var]
            if e.codec is not None:
                arr = codecs.decompress(raw, e.codec, dtype, e.box.size, f"variable {e.var!r} at {e.file_offset}")
            else:
                arr = np.frombuffer(bytearray(raw), dtype)
            arr = arr.reshape(e.box.shape)
            out.append(arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("=")))
        return out, len(extents)

    def close(self) -> None:
        pass


class MemoryBackend(Backend):
    """The reference implementation of the storage contract (see the module docstring)."""

    name = "memory"
    format_version = FORMAT_VERSION
    capabilities = Capabilities(compression=True, segments=True, readable_by=("ckptio, in the process that wrote it",))
    signature = MAGIC
    handle_class: type[MemoryWriteHandle] = MemoryWriteHandle

    def place(self, variables: Mapping[str, VariablePlan], stripe_unit: int, nprocs: int) -> Placement:
        """Rank-major, as the native format: rank 0's blocks, then rank 1's, ..., each rank's in declaration
        order, after the header. Each rank's share: its blocks' offsets by local index and the data's end."""
        header = header_bytes(variables)
        rows = sorted((r, i, n) for var in variables.values() for r, i, n in
                      zip(var.rank.tolist(), var.local_index.tolist(), var.stored_sizes().tolist(), strict=True))
        offsets: list[list[int]] = [[] for _ in range(nprocs)]
        pos = _align(len(header))
        for rank, local_index, nbytes in rows:
            assert local_index == len(offsets[rank]), "a rank's local indices are 0, 1, ... in declaration order"
            offsets[rank].append(pos)
            pos = _align(pos + nbytes)
        shares = [{"offsets": offsets[r], "data_end": pos, "header": header if r == 0 else None}
                  for r in range(nprocs)]
        return Placement(shares[0], shares)

    def create(self, path: str, comm, info, variables: Mapping[str, VariablePlan], placement: Mapping[str, Any],
               options: CreateOptions) -> MemoryWriteHandle:
        """The file exists once every rank created it; the rank that writes the header empties it (as
        ``O_TRUNC``: nothing is written before every rank created it)."""
        f = FILES.setdefault(_key(path), bytearray())
        if placement["header"] is not None:
            del f[:]
        return self.handle_class(_key(path), placement)

    def read_document(self, path: str) -> dict[str, Any]:
        index = self._framed_document(path)
        return metamod.loads_stored(index, path, "the metadata document")

    def stored_document(self, path: str) -> bytes:
        return self._framed_document(path)

    @staticmethod
    def _framed_document(path: str) -> bytes:
        """The document's bytes, after checking the header, the completion mark and the document's checksum."""
        data = FILES.get(_key(path))
        if data is None:
            raise CheckpointIOError(f"{path}: no such memory file")
        data = bytes(data)
        read_catalog(path, data)  # the header: magic, version
        if len(data) < _HEADER.size + _TRAILER.size:
            raise IncompleteCheckpointError(f"{path}: {len(data)} bytes is too short to be a complete checkpoint")
        magic, ioff, ilen, ihash = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
        if magic != TRAILER_MAGIC:
            raise IncompleteCheckpointError(f"{path}: no completion mark: the checkpoint was not committed or the "
                                            "file is truncated")
        if ioff + ilen + _TRAILER.size != len(data):
            raise CorruptCheckpointError(f"{path}: the completion mark is damaged (document at {ioff}+{ilen}, file "
                                         f"{len(data)} bytes)")
        index = data[ioff:ioff + ilen]
        if xxhash.xxh3_64_intdigest(index) != ihash:
            raise CorruptCheckpointError(f"{path}: the metadata document's checksum does not match (damaged)")
        return index

    def extents(self, meta: Mapping[str, Any]) -> list[Extent]:
        """Every non-empty block is one extent at its file offset (as the native format)."""
        table = self.extent_table(meta)
        return [table.extent(i) for i in range(len(table))]

    def extent_table(self, meta: Mapping[str, Any]) -> ExtentTable:
        return ExtentTable.of_blocks(meta)

    def open_extents(self, path: str, comm, info, meta: Mapping[str, Any]) -> ExtentReader:
        return MemoryExtentReader(path)

    def serial_extents(self, path: str, meta: Mapping[str, Any]) -> ExtentReader:
        return MemoryExtentReader(path)


class MemoryFiles:
    """Raw access to the memory files for the contract suite (its :class:`~ckptio.testing.contract.Files`)."""

    def read(self, path: str) -> bytes:
        data = FILES.get(_key(path))
        if data is None:
            raise FileNotFoundError(path)
        return bytes(data)

    def write(self, path: str, data: bytes) -> None:
        FILES[_key(path)] = bytearray(data)


__all__ = ["FILES", "MemoryBackend", "MemoryExtentReader", "MemoryFiles", "MemoryWriteHandle"]
