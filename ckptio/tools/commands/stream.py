"""Streaming a checkpoint's data in one process with bounded memory, every block checksum verified.

:class:`Source` reads a variable extent by extent in file order (``Backend.extents`` and the backend's serial
extent reader, the one ``inspect --verify`` uses: no MPI job), splitting an extent larger than ``limit`` bytes
along its first axis into contiguous parts, so at most about ``limit`` bytes are held at a time (a compressed
block is decompressed whole: its size is the floor). Every writer block is hashed as its parts go by
(``meta.StreamingChecksum``: a block's share of consecutive leading-axis parts is consecutive in its C order) and
a mismatch raises :class:`~ckptio.CorruptCheckpointError` when the block's last part has been read. Unlike
``Reader.read`` of a sub-box (which reads every stored block it touches whole, to verify it), each byte is read
once. Local: one process.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ckptio.errors import CorruptCheckpointError
from ckptio.model import meta as metamod
from ckptio.model.document import CheckpointDocument, VariableRecord
from ckptio.model.layout import Box, split_leading_axis
from ckptio.model.plan import Extent
from ckptio.tools.commands.common import CHUNK_BYTES, checkpoint_backend


class Source:
    """One checkpoint opened for streaming (metadata read at once, data file opened on the first read)."""

    def __init__(self, path: str):
        self.backend = checkpoint_backend(path)
        self.path = path
        self.meta: CheckpointDocument = self.backend.read_document(path)
        self._extents: dict[str, list[Extent]] = defaultdict(list)
        for extent in self.backend.extents(self.meta):
            self._extents[extent.var].append(extent)
        self._reader: Any = None
        self.bytes_read = 0

    # ------------------------------------------------------------------------------------------ metadata
    @property
    def variables(self) -> Mapping[str, VariableRecord]:
        return self.meta.variables

    @property
    def attrs(self) -> Mapping[str, Any]:
        return self.meta.attrs

    def dtype(self, name: str) -> np.dtype:
        """The variable's dtype in native byte order (what reads return)."""
        return np.dtype(self.variables[name].dtype).newbyteorder("=")

    def shape(self, name: str) -> tuple[int, ...]:
        return self.variables[name].shape

    def piece_boxes(self, name: str, limit: int = CHUNK_BYTES) -> list[Box]:
        """Pure: the boxes :meth:`pieces` yields, in order (no data read)."""
        return [part.box for extent in self._extents[name] for part in self._parts(name, extent, limit)]

    # ---------------------------------------------------------------------------------------------- data
    def pieces(self, name: str, limit: int = CHUNK_BYTES) -> Iterator[tuple[Box, np.ndarray]]:
        """(box, values) covering variable ``name`` once, in file order, each at most ``limit`` bytes (at least
        one row of an extent; a compressed block whole). Raises CorruptCheckpointError (naming the block and
        its writer rank) after the last part of a block whose checksum does not match."""
        var = self.variables[name]
        declared = np.dtype(var.dtype)
        for extent in self._extents[name]:
            hashes = {index: (box, expected, metamod.StreamingChecksum()) for index, box, expected in extent.verify}
            for part in self._parts(name, extent, limit):
                (arr,), _ = self._open().read([part])
                self.bytes_read += part.nbytes
                for box, _expected, digest in hashes.values():
                    common = box.intersect(part.box)
                    if common is not None:
                        digest.update(np.ascontiguousarray(arr[common.relative_to(part.box)], dtype=declared))
                yield part.box, arr
            for index, (_box, expected, digest) in hashes.items():
                if digest.hexdigest() != expected:
                    rank = int(var.block_table().rank[index])
                    raise CorruptCheckpointError(f"{self.path}: variable {name!r} block {index} (written by rank "
                                                 f"{rank}): checksum mismatch (stored {expected}, computed "
                                                 f"{digest.hexdigest()})")

    def read_all(self, name: str, out: np.ndarray) -> None:
        """Fill ``out`` (the variable's shape; an array or a numpy.memmap) with the whole variable."""
        whole = Box((0,) * out.ndim, out.shape)
        for box, arr in self.pieces(name):
            out[box.relative_to(whole)] = arr

    def _parts(self, name: str, extent: Extent, limit: int) -> list[Extent]:
        itemsize = self.dtype(name).itemsize
        if extent.codec is not None or extent.nbytes <= limit:
            return [extent]
        out, pos = [], extent.file_offset
        for box in split_leading_axis(extent.box, max(1, limit // itemsize)):
            nbytes = box.size * itemsize
            out.append(Extent(extent.var, box, pos, nbytes))
            pos += nbytes
        return out

    def _open(self):
        if self._reader is None:
            self._reader = self.backend.serial_extents(self.path, self.meta)
        return self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def nbytes_of(shape: tuple[int, ...], dtype: np.dtype) -> int:
    return math.prod(shape) * dtype.itemsize
