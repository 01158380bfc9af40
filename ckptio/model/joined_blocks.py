"""Every variable's blocks of a checkpoint as one set of columns (:class:`JoinedBlocks`): what code over all blocks
of a checkpoint uses instead of a loop over its variables (thousands of small variables of one block each). Pure:
no MPI, no files. The per-variable tables are :class:`ckptio.model.block_table.BlockTable`; the stored encoding is
in that module too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # (block_table imports this module)
    from ckptio.model.block_table import BlockTable


def concatenated_ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + c)`` for every (s, c), vectorized (int64)."""
    counts = np.asarray(counts, np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(counts)
    idx = np.arange(total, dtype=np.int64) - np.repeat(ends - counts, counts)
    return np.repeat(np.asarray(starts, np.int64), counts) + idx


@dataclass(frozen=True)
class JoinedBlocks:
    """The block tables of several variables as one set of columns, rows variable by variable (each variable's
    blocks in their order): what code over all blocks of a checkpoint uses instead of a loop over its variables
    (thousands of small variables of one block each). ``lo``/``shape`` are padded to ``ndim`` columns (offset 0,
    extent 1 beyond a variable's own dimensions); ``codec`` stays per table (ids into each table's ``codecs``)."""

    counts: np.ndarray  # int64 [V]: blocks per variable
    starts: np.ndarray  # int64 [V]: each variable's first row
    var: np.ndarray  # int32 [N]: the variable (position in the tables given) of each row
    block: np.ndarray  # int64 [N]: each row's index in its variable's table
    lo: np.ndarray  # int64 [N, ndim]
    shape: np.ndarray  # int64 [N, ndim]
    rank: np.ndarray  # int64 [N]
    checksum: np.ndarray  # uint64 [N]
    file_offset: np.ndarray  # int64 [N]
    stored_nbytes: np.ndarray  # int64 [N]
    codec: np.ndarray  # int64 [N], -1 for none: ids into codecs_of[var[i]]

    @classmethod
    def of(cls, tables: Sequence[BlockTable], ndims: Sequence[int], ndim: int) -> JoinedBlocks:
        """``tables[i]`` (a :class:`~ckptio.model.block_table.BlockTable`) of a variable of ``ndims[i]``
        dimensions, joined; ``ndim`` >= every ``ndims[i]``. One concatenation per column and per number of
        dimensions, whatever the number of variables."""
        counts = np.array([len(t) for t in tables], np.int64)
        total = int(counts.sum()) if len(counts) else 0
        starts = np.zeros(len(tables), np.int64)
        if len(tables):
            np.cumsum(counts[:-1], out=starts[1:])
        nonempty = np.flatnonzero(counts)
        lo, shape = np.zeros((total, ndim), np.int64), np.ones((total, ndim), np.int64)
        dims = np.asarray(ndims, np.int64)[nonempty]
        for d in np.unique(dims).tolist():  # the variables of each number of dimensions at once
            if d:
                group = nonempty[dims == d]
                rows = concatenated_ranges(starts[group], counts[group])
                lo[rows, :d] = np.concatenate([tables[i].offset for i in group.tolist()])
                shape[rows, :d] = np.concatenate([tables[i].shape for i in group.tolist()])

        def column(key: str, dtype) -> np.ndarray:
            parts = [getattr(tables[i], key) for i in nonempty.tolist()]
            return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)

        return cls.of_columns(counts, lo, shape, column("rank", np.int64), column("checksum", np.uint64),
                              column("file_offset", np.int64), column("stored_nbytes", np.int64),
                              column("codec", np.int64))

    @classmethod
    def of_columns(cls, counts: np.ndarray, lo: np.ndarray, shape: np.ndarray, rank: np.ndarray,
                   checksum: np.ndarray, file_offset: np.ndarray, stored_nbytes: np.ndarray,
                   codec: np.ndarray) -> JoinedBlocks:
        """Trusted columns already joined (int64, ``checksum`` uint64, ``lo``/``shape`` padded ``(N, ndim)``),
        ``counts`` the blocks of each variable: the row bookkeeping added, nothing copied. For the code that has
        the joined columns before any per-variable table (the write side's index, the decoder)."""
        counts = np.asarray(counts, np.int64)
        starts = np.zeros(len(counts), np.int64)
        if len(counts):
            np.cumsum(counts[:-1], out=starts[1:])
        return cls(counts, starts, np.repeat(np.arange(len(counts), dtype=np.int32), counts),
                   np.arange(len(rank), dtype=np.int64) - np.repeat(starts, counts), lo, shape, rank, checksum,
                   file_offset, stored_nbytes, codec)

    @classmethod
    def from_flat(cls, counts: np.ndarray, ndims: np.ndarray, ndim: int, rank: np.ndarray, offset: np.ndarray,
                  shape: np.ndarray, checksum: np.ndarray, file_offset: np.ndarray, stored_nbytes: np.ndarray,
                  codec: np.ndarray) -> JoinedBlocks:
        """:meth:`of_columns` of the stored form's columns (:mod:`ckptio.model.block_table`'s encoding), where
        ``offset`` and ``shape`` hold each block's own ``ndims[var]`` values one after another (flat, ragged):
        padded to ``ndim`` (>= every ``ndims``) in two numpy steps."""
        counts = np.asarray(counts, np.int64)
        lo, extent = np.zeros((len(rank), ndim), np.int64), np.ones((len(rank), ndim), np.int64)
        own = own_dimensions(np.repeat(np.asarray(ndims, np.int64), counts), ndim)
        lo[own], extent[own] = offset, shape
        return cls.of_columns(counts, lo, extent, rank, checksum, file_offset, stored_nbytes, codec)


def own_dimensions(row_ndims: np.ndarray, ndim: int) -> np.ndarray:
    """The ``(N, ndim)`` mask of each row's own dimensions (its first ``row_ndims[i]`` columns): in C order the
    positions of a ragged flat list of per-row values in the padded matrix."""
    return np.arange(ndim, dtype=np.int64)[None, :] < np.asarray(row_ndims, np.int64)[:, None]
