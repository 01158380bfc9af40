"""Hyperslab math and declaration validation. Pure: no MPI, no files.

A *box* is a hyperslab of a global N-d array given by its offset and shape. Every rank declares boxes
(blocks) it owns; :func:`validate_variable` checks, for one variable and all ranks at once, that the
declarations agree (dtype, global shape, kind), that blocks lie inside the global shape, do not overlap and
cover it completely. Messages name the variable and the ranks involved.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import add as _add

import numpy as np

from ckptio.errors import DeclarationError, ReadRequestError

MAX_NAME_LENGTH = 128
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.+-]*$")
SUPPORTED_DTYPE_KINDS = "biufc"  # bool, signed, unsigned, float, complex


@dataclass(frozen=True, init=False)
class Box:
    """A hyperslab ``[offset, offset + shape)`` of an N-d index space."""

    offset: tuple[int, ...]
    shape: tuple[int, ...]
    # derived once at construction (the planner calls intersect() per extent and request: ~10^5 times for
    # 10,000 variables; functools.cached_property takes a lock on every access in Python 3.11)
    end: tuple[int, ...] = field(init=False, repr=False, compare=False)
    size: int = field(init=False, repr=False, compare=False)

    def __init__(self, offset: tuple[int, ...], shape: tuple[int, ...]):
        # the fields set directly, not through a frozen dataclass's object.__setattr__ per field (a read of
        # 10,000 small variables makes tens of thousands of boxes)
        if len(offset) != len(shape):
            raise ValueError(f"a box of offset {list(offset)} and shape {list(shape)}: not the same dimensions")
        self.__dict__.update(offset=offset, shape=shape, end=tuple(map(_add, offset, shape)), size=math.prod(shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def intersect(self, other: Box) -> Box | None:
        """The common part of two boxes, or None when they do not meet (or one is empty)."""
        if len(self.offset) != len(other.offset):
            raise ValueError(f"boxes of {len(self.offset)} and {len(other.offset)} dimensions")
        lo = tuple(map(max, self.offset, other.offset))
        hi = tuple(map(min, self.end, other.end))
        if any(h <= lo_ for lo_, h in zip(lo, hi, strict=True)):
            return None
        return Box(lo, tuple(h - lo_ for lo_, h in zip(lo, hi, strict=True)))

    def within(self, shape: Sequence[int]) -> bool:
        return len(shape) == self.ndim and all(
            o >= 0 and s >= 0 and o + s <= g for o, s, g in zip(self.offset, self.shape, shape, strict=True)
        )

    def relative_to(self, outer: Box) -> tuple[slice, ...]:
        """Index expression selecting this box inside an array that holds ``outer``."""
        return tuple(
            slice(o - oo, o - oo + s) for o, oo, s in zip(self.offset, outer.offset, self.shape, strict=True)
        )

    def to_json(self) -> dict:
        return {"offset": list(self.offset), "shape": list(self.shape)}


class NotIntegers(TypeError):
    """:func:`integer_list`'s refusal: ``value`` is the first element that is not an integer, or (``whole``) the
    argument itself when it is no sequence."""

    def __init__(self, value: object, whole: bool):
        super().__init__(value)
        self.value, self.whole = value, whole


def integer_list(values: object) -> list[int]:
    """Local: a sequence of Python or numpy integers as Python ints; NotIntegers for a string, a non-sequence, or
    an element that is a bool or not an integer (a float is never truncated). What a write's offset and global shape
    and a read's offset and shape share; each caller adds its own ranges and names the problem its own way."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise NotIntegers(values, whole=True)
    out = []
    for v in values:
        if isinstance(v, bool | np.bool_) or not isinstance(v, int | np.integer):
            raise NotIntegers(v, whole=False)
        out.append(int(v))
    return out


_ITEMSIZES: dict[str, int] = {}


def itemsize_of(dtype: str) -> int:
    """The bytes of one element of the dtype string ``dtype`` (one parse per distinct string: a document of 10,000
    variables asks for it per variable, several times)."""
    found = _ITEMSIZES.get(dtype)
    if found is None:
        found = _ITEMSIZES[dtype] = np.dtype(dtype).itemsize
    return found


def check_name(name: object) -> str:
    """Validate a variable or attribute name (portable to HDF5 and netCDF); return it."""
    if not isinstance(name, str) or not name:
        raise DeclarationError(f"variable name must be a non-empty string, got {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise DeclarationError(f"variable name {name[:40]!r}... is {len(name)} characters (max {MAX_NAME_LENGTH})")
    if not _NAME_RE.match(name):
        raise DeclarationError(
            f"variable name {name!r} is not allowed: use ASCII letters, digits and the characters _ . + -, "
            "starting with a letter or _ (no ',', '/', spaces, other characters or control characters)"
        )
    if name.lower().startswith("ckptio"):
        raise DeclarationError(f"variable name {name!r} is reserved (names starting with 'ckptio')")
    return name


def check_dtype(name: str, dtype: np.dtype) -> np.dtype:
    """Reject dtypes that have no portable fixed-size representation (object, strings, structured)."""
    if dtype.kind not in SUPPORTED_DTYPE_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise DeclarationError(
            f"variable {name!r}: dtype {dtype} is not supported (supported: bool, signed/unsigned integers, "
            "floating point and complex numbers)"
        )
    return dtype


def block_order_key(box: Box) -> tuple[int, ...]:
    return box.offset


def find_overlap(boxes: Sequence[tuple[int, Box]]) -> tuple[int, int] | None:
    """Return the indices of two overlapping non-empty boxes, or None. Sweep along axis 0: O(n log n + k)."""
    items = [(b.offset[0] if b.ndim else 0, i) for i, (_, b) in enumerate(boxes) if b.size > 0]
    items.sort()
    active: list[int] = []
    for start, i in items:
        bi = boxes[i][1]
        still: list[int] = []
        for j in active:
            bj = boxes[j][1]
            if bj.ndim == 0 or bj.end[0] > start:
                still.append(j)
                if bi.intersect(bj) is not None:
                    return (j, i)
        still.append(i)
        active = still
    return None


def tiles_exactly(rank: np.ndarray, lo: np.ndarray, size: np.ndarray, shape: tuple[int, ...], nprocs: int,
                  segments: bool) -> bool:
    """Pure: the ranks are in ``[0, nprocs)`` and the boxes (``lo``, ``size``: int64 arrays of shape (n, ndim))
    lie inside ``shape``, are disjoint and cover it (segments: rows end to end in rank order, whole along the
    trailing axes); vectorized for many blocks, on Python ints for a few. False means "not proven" (the
    block-by-block checks then name the problem); it never raises on well-typed arrays."""
    n = len(rank)
    if n == 1:  # one block (a small variable: thousands of them per checkpoint): it must be the whole array
        return 0 <= int(rank[0]) < nprocs and not any(lo[0].tolist()) and size[0].tolist() == list(shape)
    if 2 <= n <= _FEW_BLOCKS:
        return _few_tile_exactly(rank.tolist(), lo.tolist(), size.tolist(), tuple(shape), nprocs, segments)
    return _many_tile_exactly(rank, lo, size, shape, nprocs, segments)


def _many_tile_exactly(rank: np.ndarray, lo: np.ndarray, size: np.ndarray, shape: tuple[int, ...], nprocs: int,
                       segments: bool) -> bool:
    """Pure: :func:`tiles_exactly` vectorized (any number of blocks; what it calls for more than a few)."""
    n, nd = len(rank), len(shape)
    gshape = np.array(shape, np.int64)
    if ((rank < 0) | (rank >= nprocs)).any() or (lo < 0).any() or (size < 0).any():
        return False
    if (size > gshape).any() or (lo > gshape - size).any():  # outside the global shape (no overflow)
        return False
    if segments:  # rows end to end in rank order, whole along the trailing axes
        if nd == 0 or (lo[:, 1:] != 0).any() or (size[:, 1:] != gshape[1:]).any():
            return False
        ends = lo[:, 0] + size[:, 0]
        return bool((n == 0 and shape[0] == 0) or (n > 0 and (np.diff(rank) > 0).all()
                    and lo[0, 0] == 0 and (lo[1:, 0] == ends[:-1]).all() and ends[-1] == shape[0]))
    count = size.prod(axis=1) if nd else np.ones(n, np.int64)
    nonempty = np.flatnonzero(count > 0)
    if nd == 0:
        overlap = len(nonempty) > 1
    else:
        order = nonempty[np.argsort(lo[nonempty, 0], kind="stable")]
        starts, ends = lo[order, 0], lo[order, 0] + size[order, 0]
        disjoint_rows = len(order) < 2 or bool((starts[1:] >= np.maximum.accumulate(ends)[:-1]).all())
        overlap = not disjoint_rows and find_overlap(
            [(0, Box(tuple(lo[i].tolist()), tuple(size[i].tolist()))) for i in range(n)]) is not None
    return not overlap and int(count.sum()) == math.prod(shape)


_FEW_BLOCKS = 16  # up to this many blocks, tiles_exactly checks on Python ints (numpy's cost per call dominates)


def _few_tile_exactly(rank: list[int], lo: list[list[int]], size: list[list[int]], shape: tuple[int, ...],
                      nprocs: int, segments: bool) -> bool:
    """Pure: :func:`tiles_exactly` for a few blocks (at least 2), the same checks on Python ints: a variable that
    each of a few ranks writes one part of (24 variables of 2-16 ranks: ~20 us each in numpy, ~5 here)."""
    n = len(rank)
    for r, o, s in zip(rank, lo, size, strict=True):
        if not 0 <= r < nprocs:
            return False
        for a, b, g in zip(o, s, shape, strict=True):
            if a < 0 or b < 0 or b > g or a > g - b:  # outside the global shape
                return False
    if segments:  # rows end to end in rank order, whole along the trailing axes
        if not shape or any(any(o[1:]) or tuple(s[1:]) != shape[1:] for o, s in zip(lo, size, strict=True)):
            return False
        return (all(rank[k] < rank[k + 1] for k in range(n - 1)) and lo[0][0] == 0
                and all(lo[k + 1][0] == lo[k][0] + size[k][0] for k in range(n - 1))
                and lo[-1][0] + size[-1][0] == shape[0])
    count = [math.prod(s) for s in size]
    nonempty = [k for k in range(n) if count[k] > 0]
    if not shape:
        overlap = len(nonempty) > 1
    else:
        reach, disjoint_rows = None, True
        for k in sorted(nonempty, key=lambda k: lo[k][0]):
            if reach is not None and lo[k][0] < reach:
                disjoint_rows = False
                break
            end = lo[k][0] + size[k][0]
            reach = end if reach is None else max(reach, end)
        overlap = not disjoint_rows and find_overlap(
            [(0, Box(tuple(lo[i]), tuple(size[i]))) for i in range(n)]) is not None
    return not overlap and sum(count) == math.prod(shape)


def validate_variable(name: str, global_shape: Sequence[int], blocks: Sequence[tuple[int, Box]]) -> None:
    """Check blocks ``[(rank, box), ...]`` of one variable: inside the shape, disjoint, covering it.

    Raises :class:`DeclarationError` naming the variable and the ranks. Vectorized first (183,000 blocks: a
    fraction of a second); the block-by-block checks below run only to name a problem.
    """
    shape = tuple(global_shape)
    n, nd = len(blocks), len(shape)
    if all(box.ndim == nd for _, box in blocks):
        rank = np.fromiter((r for r, _ in blocks), np.int64, n)
        lo = np.array([box.offset for _, box in blocks], np.int64).reshape(n, nd)
        size = np.array([box.shape for _, box in blocks], np.int64).reshape(n, nd)
        if tiles_exactly(rank, lo, size, shape, int(rank.max(initial=0)) + 1, False):
            return
    for rank, box in blocks:
        if not box.within(shape):
            raise DeclarationError(
                f"variable {name!r}: block at offset {list(box.offset)} with shape {list(box.shape)} from rank "
                f"{rank} lies outside the global shape {list(shape)}"
            )
    pair = find_overlap(blocks)
    if pair is not None:
        (ra, ba), (rb, bb) = blocks[pair[0]], blocks[pair[1]]
        common = ba.intersect(bb)
        assert common is not None
        raise DeclarationError(
            f"variable {name!r}: block of rank {ra} (offset {list(ba.offset)}, shape {list(ba.shape)}) overlaps "
            f"block of rank {rb} (offset {list(bb.offset)}, shape {list(bb.shape)}) in the elements at offset "
            f"{list(common.offset)}, shape {list(common.shape)}: every element must be written by exactly one rank "
            "(a node- or face-centred field whose neighbours share a face writes that face once: see "
            "docs/tutorial/rank-count.md, 'Staggered fields')"
        )
    covered = sum(b.size for _, b in blocks)
    total = math.prod(shape)
    if covered != total:
        hole = first_uncovered_point(shape, [b for _, b in blocks])
        raise DeclarationError(
            f"variable {name!r}: blocks cover {covered} of {total} elements of the global shape {list(shape)}; "
            f"element {list(hole) if hole is not None else '?'} is written by no rank"
            + (_block_before(hole, blocks) if hole is not None else "")
        )


def _block_before(point: tuple[int, ...], blocks: Sequence[tuple[int, Box]]) -> str:
    """For a hole's message: the block that ends right before ``point`` along one axis (the one that may be
    short: a rank that computed its extent differently), as "; it lies right past the block of rank ...", or ""
    (none: the hole is at the start of an axis, or no block borders it)."""
    for rank, box in blocks:
        if box.size == 0:
            continue
        for axis in range(len(point)):
            if point[axis] == box.end[axis] and all(box.offset[k] <= point[k] < box.end[k]
                                                    for k in range(len(point)) if k != axis):
                return (f"; it lies right past the block of rank {rank} (offset {list(box.offset)}, shape "
                        f"{list(box.shape)}) along axis {axis}: is that block short, or the next one late?")
    return ""


def first_uncovered_point(shape: Sequence[int], boxes: Iterable[Box]) -> tuple[int, ...] | None:
    """Find one index not covered by any box (for error messages). Cost grows with the number of boxes only."""
    boxes = [b for b in boxes if b.size > 0]
    candidates = {tuple(0 for _ in shape)}
    for b in boxes:
        for axis in range(len(shape)):
            p = list(b.offset)
            p[axis] = b.end[axis]
            candidates.add(tuple(p))
    for point in sorted(candidates):
        if all(0 <= c < g for c, g in zip(point, shape, strict=True)) and not any(
            all(o <= c < e for c, o, e in zip(point, b.offset, b.end, strict=True)) for b in boxes
        ):
            return point
    return None


def normalize_request(
    name: str, global_shape: Sequence[int], offset: Sequence[int] | None, shape: Sequence[int] | None
) -> Box:
    """Turn a user's read request into a Box, checking it lies inside the variable."""
    if type(offset) is tuple and type(shape) is tuple and len(offset) == len(shape) == len(global_shape) and all(
            type(o) is int and type(n) is int and 0 <= o and 0 <= n and o + n <= g
            for o, n, g in zip(offset, shape, global_shape, strict=True)):  # (the usual request: no conversions)
        return Box(offset, shape)
    gshape = tuple(int(g) for g in global_shape)
    off = tuple(0 for _ in gshape) if offset is None else tuple(int(o) for o in offset)
    if shape is None:
        shp = tuple(g - o for g, o in zip(gshape, off, strict=False))
    else:
        shp = tuple(int(s) for s in shape)
    box = Box(off, shp)
    if len(off) != len(gshape) or len(shp) != len(gshape) or not box.within(gshape):
        raise ReadRequestError(
            f"variable {name!r}: requested hyperslab offset {list(off)} shape {list(shp)} is outside the global "
            f"shape {list(gshape)}"
        )
    return box


def split_leading_axis(box: Box, max_elements: int) -> list[Box]:
    """Split a box along its first axis into pieces of at most ``max_elements`` (at least one row each).

    Each piece of a C-ordered box is a contiguous byte range of that box.
    """
    if box.ndim == 0 or box.size <= max_elements or box.shape[0] <= 1:
        return [box]
    row = box.size // box.shape[0]
    rows = max(1, max_elements // max(row, 1))
    pieces = []
    for start in range(0, box.shape[0], rows):
        n = min(rows, box.shape[0] - start)
        pieces.append(Box((box.offset[0] + start, *box.offset[1:]), (n, *box.shape[1:])))
    return pieces
