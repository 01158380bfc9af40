"""A variable of the write plan as columns (:class:`VariablePlan`, one row per block), the few blocks a rank
writes itself as objects (:class:`BlockPlan`), and every variable's blocks joined into one set of columns
(:func:`joined_columns`). Pure: no MPI. :mod:`ckptio.model.plan` makes them from the gathered declarations."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ckptio.model.joined_blocks import concatenated_ranges
from ckptio.model.layout import Box, itemsize_of


@dataclass
class BlockPlan:
    """One declared block: who wrote it, where it sits in the global array (a row of a :class:`VariablePlan`,
    made for the few blocks a rank writes itself)."""

    rank: int
    local_index: int  # position among this rank's declarations (all variables)
    box: Box
    stored_nbytes: int | None = None  # bytes in the file when different from the raw size (compression)
    codec: str | None = None
    checksum: str | None = None  # of the block's elements in C order, declared dtype


def _i64(values: Any = (), shape: tuple[int, ...] | None = None) -> np.ndarray:
    a = np.asarray(values, np.int64)
    return a.reshape(shape) if shape is not None else a


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


_NO_I64 = _read_only(np.zeros(0, np.int64))
_NO_U64 = _read_only(np.zeros(0, np.uint64))
_NO_BOXES = [_read_only(np.zeros((0, nd), np.int64)) for nd in range(33)]  # (0, ndim) per ndim; 32 is numpy's most


def _no_boxes(nd: int) -> np.ndarray:
    return _NO_BOXES[nd] if nd < len(_NO_BOXES) else _read_only(np.zeros((0, nd), np.int64))


@dataclass(eq=False)
class VariablePlan:
    """One variable of a write plan. Its blocks are columns, one row per block, in rank order and each rank's in
    declaration order: every rank's blocks on the coordinator (rank 0), only this rank's elsewhere (``nblocks``
    then counts every rank's). Columns, not an object per block: rank 0 plans 2.4 million blocks at 100,000 ranks.

    ``rank``, ``local_index`` (position among the rank's declarations), ``offset`` and ``size`` (``(n, ndim)``,
    the block's box), ``stored_nbytes`` (-1: the raw size), ``codec`` (index into ``codecs``, -1: none),
    ``checksum`` (``uint64``, 0: none)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    kind: str
    rank: np.ndarray = field(default_factory=_i64)
    local_index: np.ndarray = field(default_factory=_i64)
    offset: np.ndarray | None = None
    size: np.ndarray | None = None
    stored_nbytes: np.ndarray = field(default_factory=_i64)
    codec: np.ndarray = field(default_factory=_i64)
    codecs: list[str] = field(default_factory=list)
    checksum: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    nblocks: int | None = None  # every rank's blocks, when the columns hold only this rank's (see own_plan)
    _given: list[BlockPlan] | None = field(default=None, repr=False)  # the BlockPlans of from_blocks, kept

    def __post_init__(self) -> None:
        nd = len(self.shape)
        if self.offset is None:
            self.offset = np.zeros((len(self.rank), nd), np.int64)
        if self.size is None:
            self.size = np.zeros((len(self.rank), nd), np.int64)

    @classmethod
    def from_blocks(cls, name: str, dtype: str, shape: Sequence[int], kind: str, blocks: Sequence[BlockPlan],
                    nblocks: int | None = None) -> VariablePlan:
        """A plan of a few blocks given one by one (a rank's own blocks; tests)."""
        n, nd = len(blocks), len(shape)
        codecs = sorted({b.codec for b in blocks if b.codec is not None})
        plan = cls(name, dtype, tuple(shape), kind, _i64([b.rank for b in blocks]),
                   _i64([b.local_index for b in blocks]), _i64([b.box.offset for b in blocks], (n, nd)),
                   _i64([b.box.shape for b in blocks], (n, nd)),
                   _i64([-1 if b.stored_nbytes is None else b.stored_nbytes for b in blocks]),
                   _i64([-1 if b.codec is None else codecs.index(b.codec) for b in blocks]), codecs,
                   np.array([int(b.checksum, 16) if b.checksum else 0 for b in blocks], np.uint64), nblocks)
        plan._given = list(blocks)
        return plan

    @classmethod
    def none_here(cls, name: str, dtype: str, shape: Sequence[int], kind: str, nblocks: int) -> VariablePlan:
        """A variable this rank holds no block of: empty columns, ``nblocks`` every rank's. Every rank holds a plan
        of each of the job's variables, most of them empty when thousands of small variables are spread over the
        ranks, so this shares read-only empty columns instead of building six arrays per variable."""
        shape = tuple(shape)
        nd = len(shape)
        plan = cls(name, dtype, shape, kind, _NO_I64, _NO_I64, _no_boxes(nd), _no_boxes(nd), _NO_I64, _NO_I64, [],
                   _NO_U64, nblocks)
        plan._given = []
        return plan

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * itemsize_of(self.dtype)

    @property
    def total_blocks(self) -> int:
        """The number of blocks of all ranks (the columns may hold only this rank's)."""
        return len(self.rank) if self.nblocks is None else self.nblocks

    def stored_sizes(self) -> np.ndarray:
        """Each block's bytes in the file: ``stored_nbytes``, or the raw size where that is -1."""
        raw = self.size.prod(axis=1) * itemsize_of(self.dtype)
        return np.where(self.stored_nbytes >= 0, self.stored_nbytes, raw)

    def blocks_of(self, rank: int) -> list[BlockPlan]:
        """The blocks of ``rank`` as :class:`BlockPlan` objects (a rank's own few; O(blocks of the variable))."""
        if self._given is not None:
            return [b for b in self._given if b.rank == rank]
        return self._block_plans(np.flatnonzero(self.rank == rank))

    @property
    def blocks(self) -> list[BlockPlan]:
        """Every block of the columns as a :class:`BlockPlan` (small plans and tests only)."""
        if self._given is not None:
            return list(self._given)
        return self._block_plans(np.arange(len(self.rank)))

    def _block_plans(self, rows: np.ndarray) -> list[BlockPlan]:
        names = [None, *self.codecs]
        return [BlockPlan(int(self.rank[i]), int(self.local_index[i]),
                          Box(tuple(self.offset[i].tolist()), tuple(self.size[i].tolist())),
                          None if self.stored_nbytes[i] < 0 else int(self.stored_nbytes[i]),
                          names[int(self.codec[i]) + 1],
                          f"{int(self.checksum[i]):016x}") for i in rows.tolist()]


@dataclass(frozen=True)
class PlanColumns:
    """Every variable's blocks of a write plan as one set of columns, variables in the plan's order (each one's
    blocks in its order): what the placement and the index phase compute over all blocks of a checkpoint at once
    instead of per variable (10,000 small variables of one block each: a few numpy calls, not 10,000 of each).
    Rows ``starts[i]:starts[i] + counts[i]`` are variable ``i``'s. ``offset``/``size`` are padded to ``ndim``
    columns (the most dimensions of any variable: offset 0, extent 1 beyond a variable's own), as
    :class:`~ckptio.model.joined_blocks.JoinedBlocks` has them."""

    counts: np.ndarray  # int64 [V]: blocks per variable (the columns the plan holds: every rank's on rank 0)
    starts: np.ndarray  # int64 [V]: each variable's first row
    rank: np.ndarray  # int64 [N]
    local_index: np.ndarray  # int64 [N]
    stored: np.ndarray  # int64 [N]: each block's bytes in the file (VariablePlan.stored_sizes)
    ndims: np.ndarray  # int64 [V]: each variable's number of dimensions
    offset: np.ndarray  # int64 [N, ndim]
    size: np.ndarray  # int64 [N, ndim]
    checksum: np.ndarray  # uint64 [N]

    @property
    def ndim(self) -> int:
        return int(self.offset.shape[1])


class PlannedVariables(dict[str, VariablePlan]):
    """The planning rank's write plan: name -> :class:`VariablePlan`, sorted by name (what
    :func:`ckptio.model.plan.plan_packed` returns), with its :class:`PlanColumns` made once, when first asked for
    (the placement and the index phase both compute over them). Any change of the mapping (a plan set, added or
    removed) drops the columns, which are then made again; a plan's own arrays are not changed after planning."""

    def columns(self) -> PlanColumns:
        """Local: :func:`joined_columns` of this plan, made on the first call and kept (read-only arrays) until
        the mapping changes."""
        kept = self.__dict__.get("_columns")
        if kept is None:
            kept = _joined(self)
            for column in vars(kept).values():
                column.setflags(write=False)
            self.__dict__["_columns"] = kept
        return kept

    def _changed(self) -> None:
        self.__dict__.pop("_columns", None)

    def __setitem__(self, name: str, plan: VariablePlan) -> None:
        self._changed()
        super().__setitem__(name, plan)

    def __delitem__(self, name: str) -> None:
        self._changed()
        super().__delitem__(name)

    def __ior__(self, other: Any) -> PlannedVariables:
        self._changed()
        return super().__ior__(other)

    def clear(self) -> None:
        self._changed()
        super().clear()

    def pop(self, *args: Any) -> Any:
        self._changed()
        return super().pop(*args)

    def popitem(self) -> tuple[str, VariablePlan]:
        self._changed()
        return super().popitem()

    def setdefault(self, name: str, plan: Any = None) -> Any:
        self._changed()
        return super().setdefault(name, plan)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._changed()
        super().update(*args, **kwargs)


def joined_columns(variables: Mapping[str, VariablePlan]) -> PlanColumns:
    """Local, pure: :class:`PlanColumns` of ``variables``; ``stored`` as each plan's :meth:`VariablePlan.stored_sizes`
    (the raw sizes computed for all variables of one number of dimensions at once). A :class:`PlannedVariables`
    gives the columns it already made (read-only)."""
    if isinstance(variables, PlannedVariables):
        return variables.columns()
    return _joined(variables)


def _joined(variables: Mapping[str, VariablePlan]) -> PlanColumns:
    plans = list(variables.values())
    nvars = len(plans)
    counts = np.fromiter((len(v.rank) for v in plans), np.int64, nvars)
    starts = np.zeros(nvars, np.int64)
    if nvars:
        np.cumsum(counts[:-1], out=starts[1:])

    def cat(key: str, dtype: Any = np.int64) -> np.ndarray:
        if not plans:
            return _NO_U64 if dtype is np.uint64 else _NO_I64
        return np.concatenate([getattr(v, key) for v in plans]).astype(dtype, copy=False)

    rank, local, stored, checksum = cat("rank"), cat("local_index"), cat("stored_nbytes"), cat("checksum", np.uint64)
    raw = np.repeat(np.fromiter((itemsize_of(v.dtype) for v in plans), np.int64, nvars), counts)
    ndims = np.fromiter((len(v.shape) for v in plans), np.int64, nvars)
    ndim = int(ndims.max()) if nvars else 0
    total = len(rank)
    offset, size = np.zeros((total, ndim), np.int64), np.ones((total, ndim), np.int64)
    for nd in np.unique(ndims[counts > 0]).tolist():  # (a scalar's one element: the itemsize alone)
        if nd:
            group = np.flatnonzero((ndims == nd) & (counts > 0))
            rows = concatenated_ranges(starts[group], counts[group])
            sizes = np.concatenate([plans[i].size for i in group.tolist()])
            offset[rows, :nd] = np.concatenate([plans[i].offset for i in group.tolist()])
            size[rows, :nd] = sizes
            raw[rows] *= sizes.prod(axis=1)
    return PlanColumns(counts, starts, rank, local, np.where(stored >= 0, stored, raw), ndims, offset, size, checksum)
