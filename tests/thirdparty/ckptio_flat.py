"""A fourth file format, written the way a third party adds one to ckptio: this one module, plus one entry point in
the group ``ckptio.backends`` of the package that ships it (``flat = "ckptio_flat:FlatBackend"``), and nothing
changed in ckptio. tests/test_contract.py installs it so (a ``*.dist-info`` with that entry point on the path)
and runs the storage contract suite and the engine's write and N-to-M restart on it.

The format, ``backend="flat"`` (integers little-endian)::

    0             header, 64 bytes: MAGIC, u32 format version, zeros
    64            data: every rank's blocks, rank 0's first, each rank's in declaration order, each at an
                  8-byte boundary (C-order elements)
    index_offset  the metadata document (JSON, :func:`ckptio.model.meta.dumps`), at the 8-aligned end of the data
    EOF - 32      the completion mark, written last: TRAILER_MAGIC, u64 index offset, u64 index length,
                  u64 xxh3-64 of the document

Every rank writes its own blocks with ``os.pwrite`` at the offsets its share of the placement gives (no MPI: a
file system every rank sees is enough); the rank whose share says so writes the header, and the rank the engine
chooses writes the document and the mark. Restart reads go through ckptio's own byte-range readers.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xxhash
from ckptio.backends import rawio
from ckptio.backends.base import (
    Backend,
    BlockToWrite,
    Capabilities,
    CreateOptions,
    DocumentSlot,
    ExtentReader,
    Placement,
    Step,
    WrittenBlock,
)

from ckptio.errors import CheckpointIOError, CorruptCheckpointError, FormatVersionError, IncompleteCheckpointError
from ckptio.model import extent_table
from ckptio.model import meta as metamod
from ckptio.model.plan import Extent
from ckptio.model.variable_plan import VariablePlan

MAGIC = b"FLATCKPT"
TRAILER_MAGIC = b"FLATDONE"
VERSION = 1
HEADER_SIZE = 64
_TRAILER = struct.Struct("<8sQQQ")


def _align(n: int) -> int:
    return (n + 7) // 8 * 8


def _pwrite(fd: int, payload: bytes, offset: int) -> None:
    view = memoryview(payload)
    while view:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


class FlatWriteHandle:
    """One rank's open file: its share of the placement says where its blocks go."""

    def __init__(self, path: str, share: Mapping[str, Any]):
        self.path, self.share = path, share
        self.fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        if share["header"]:  # the rank that writes the header starts from an empty file
            os.ftruncate(self.fd, 0)
        self.index_offset = _align(share["data_end"])
        self.slot: DocumentSlot | None = None
        self._written: list[WrittenBlock] = []

    def define(self) -> None:
        if self.share["header"]:
            _pwrite(self.fd, struct.pack("<8sI", MAGIC, VERSION).ljust(HEADER_SIZE, b"\0"), 0)

    def notes(self) -> list[str]:
        return []

    def reserved_ranges(self) -> list[tuple[int, int]]:
        if self.slot is not None:
            return [(self.index_offset, self.index_offset + self.slot.nbytes + _TRAILER.size)]
        return [(0, self.share["data_end"])]

    def write(self, blocks: Sequence[BlockToWrite], tables: Any = None) -> list[Step]:
        offsets = self.share["offsets"]
        self._written = [WrittenBlock(offsets[b.local_index], int(b.data.nbytes), b.codec) for b in blocks]

        def write() -> None:
            for b, w in zip(blocks, self._written, strict=True):
                _pwrite(self.fd, np.ascontiguousarray(b.data).tobytes(), w.file_offset)

        return [("write the blocks", write)]

    def written(self) -> list[WrittenBlock]:
        return list(self._written)

    def sync(self) -> None:
        os.fsync(self.fd)

    def storage_info(self) -> dict[str, dict[str, Any]]:
        return {}

    def effective_hints(self) -> dict[str, str]:
        return {}

    def document_slot(self, slot: DocumentSlot) -> None:
        self.slot = slot

    def write_document(self, document: bytes | None) -> list[Step]:
        return [("write the document", lambda: document is None or _pwrite(self.fd, document, self.index_offset))]

    def mark_complete(self, mark: bool) -> list[Step]:
        def write() -> None:
            if mark:
                trailer = _TRAILER.pack(TRAILER_MAGIC, self.index_offset, self.slot.nbytes, int(self.slot.checksum, 16))
                _pwrite(self.fd, trailer, self.index_offset + self.slot.nbytes)

        return [("write the completion mark", write)]

    def close(self) -> None:
        fd, self.fd = self.fd, None
        os.close(fd)

    def abort(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


class FlatBackend(Backend):
    name = "flat"
    format_version = VERSION
    capabilities = Capabilities(compression=False, segments=True, readable_by=("ckptio with ckptio-flat",))
    signature = MAGIC

    def place(self, variables: Mapping[str, VariablePlan], stripe_unit: int, nprocs: int) -> Placement:
        """Rank-major: each rank's blocks in declaration order after the previous rank's."""
        rows = sorted((r, i, n) for v in variables.values()
                      for r, i, n in zip(v.rank.tolist(), v.local_index.tolist(), v.stored_sizes().tolist(),
                                         strict=True))
        offsets: list[list[int]] = [[] for _ in range(nprocs)]
        pos = HEADER_SIZE
        for rank, _local_index, nbytes in rows:
            offsets[rank].append(pos)
            pos = _align(pos + nbytes)
        shares = [{"offsets": offsets[r], "data_end": pos, "header": r == 0} for r in range(nprocs)]
        return Placement(shares[0], shares)

    def create(self, path: str, comm, info, variables: Mapping[str, VariablePlan], placement: Mapping[str, Any],
               options: CreateOptions) -> FlatWriteHandle:
        return FlatWriteHandle(path, placement)

    def read_document(self, path: str) -> dict[str, Any]:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise CheckpointIOError(f"{path}: cannot read checkpoint: {exc.strerror or exc}") from None
        if len(data) < HEADER_SIZE + _TRAILER.size:
            raise IncompleteCheckpointError(f"{path}: {len(data)} bytes is too short for a complete checkpoint")
        magic, version = struct.unpack_from("<8sI", data)
        if magic != MAGIC:
            raise CorruptCheckpointError(f"{path}: the header is damaged")
        if version > VERSION:
            raise FormatVersionError(f"{path}: flat format version {version} is newer than {VERSION}")
        tmagic, ioff, ilen, ihash = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
        if tmagic != TRAILER_MAGIC:
            raise IncompleteCheckpointError(f"{path}: no completion mark: not committed, or truncated")
        if ioff + ilen + _TRAILER.size != len(data) or xxhash.xxh3_64_intdigest(data[ioff:ioff + ilen]) != ihash:
            raise CorruptCheckpointError(f"{path}: the document or its completion mark is damaged")
        try:
            return metamod.loads(data[ioff:ioff + ilen])
        except ValueError as exc:
            raise CorruptCheckpointError(f"{path}: the document is not valid ({exc})") from None

    def extents(self, meta: Mapping[str, Any]) -> list[Extent]:
        table = self.extent_table(meta)
        return [table.extent(i) for i in range(len(table))]

    def extent_table(self, meta: Mapping[str, Any]) -> extent_table.ExtentTable:
        return extent_table.from_blocks(meta)

    def open_extents(self, path: str, comm, info, meta: Mapping[str, Any]) -> ExtentReader:
        return rawio.PosixExtentReader(path, meta)

    def serial_extents(self, path: str, meta: Mapping[str, Any]) -> ExtentReader:
        return rawio.SerialRawReader(path, meta)
