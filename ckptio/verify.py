"""Serial verification of a whole checkpoint (``ckptio inspect --verify``): read every stored block and check
every checksum. Runs in one process, with no MPI job needed for the native format."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import meta as metamod
from .errors import CheckpointError
from .model.document import CheckpointDocument, as_document
from .plan import Extent

if TYPE_CHECKING:  # (an annotation only: backends/rawio.py imports this module)
    from .backends import Backend


@dataclass
class Problem:
    variable: str
    block: int | None
    rank: int | None
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"variable": self.variable, "block": self.block, "rank": self.rank, "message": self.message}

    def __str__(self) -> str:
        where = f"variable {self.variable!r}"
        if self.block is not None:
            where += f" block {self.block} (written by rank {self.rank})"
        return f"{where}: {self.message}"


def verify_blocks(backend: Backend, path: str, meta: CheckpointDocument | Mapping[str, Any],
                  max_bytes: int = 256 << 20, extents: Sequence[Extent] | None = None) -> list[Problem]:
    """Read every extent (or only ``extents``, some of ``backend.extents(meta)``) and compare the checksum of
    every writer block it holds. Local, serial. Returns the problems. ``meta``: the checkpoint's document (the
    write side's dict form too, until it builds a CheckpointDocument)."""
    doc = as_document(meta)
    problems: list[Problem] = []
    reader = backend.serial_extent_reader(path, meta)
    try:
        for extent in backend.extents(meta) if extents is None else extents:
            var = doc.variables[extent.var]
            declared = np.dtype(var.dtype)
            writers = var.block_table().rank
            try:
                (arr,), _ = reader.read([extent])
            except CheckpointError as exc:
                for index, _box, _ in extent.verify or ((None, None, None),):
                    rank = int(writers[index]) if index is not None else None
                    problems.append(Problem(extent.var, index, rank, str(exc)))
                continue
            for index, box, expected in extent.verify:
                sub = np.ascontiguousarray(arr[box.relative_to(extent.box)], dtype=declared)
                digest = metamod.checksum(sub)
                if digest != expected:
                    problems.append(Problem(extent.var, index, int(writers[index]),
                                            f"checksum mismatch (stored {expected}, computed {digest})"))
    finally:
        reader.close()
    return problems
