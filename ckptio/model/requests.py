"""Request checking, for every reader (file or stage): a ``read``/``read_many`` call's requests and ``out``
arrays against the variables a checkpoint holds. Pure: no MPI, no files; every function is local and raises
:class:`ckptio.ReadRequestError` naming the variable and the problem. The readers run it inside an agreed phase
(``coord.run``), so a bad request on one rank is the same error on every rank before anything is read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ckptio.errors import ReadRequestError
from ckptio.model.layout import Box, NotIntegers, integer_list, normalize_request
from ckptio.model.plan import SEGMENT, Request


@dataclass(frozen=True)
class VariableInfo:
    """What a checkpoint holds under one name."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    kind: str
    nblocks: int
    nbytes: int
    dims: tuple[str, ...] = ()  # the axes' names (declared with write(dims=), else <name>_d0, ...)
    attrs: Mapping[str, Any] = field(default_factory=dict)  # the variable's own attributes

    @classmethod
    def made(cls, name: str, shape: tuple[int, ...], dtype: np.dtype, kind: str, nblocks: int, nbytes: int,
             dims: tuple[str, ...], attrs: Mapping[str, Any]) -> VariableInfo:
        """Every field given, set as the constructor would without a frozen dataclass's ``object.__setattr__``
        per field (a reader of 10,000 small variables makes one per variable it reads)."""
        info = object.__new__(cls)
        info.__dict__.update(name=name, shape=shape, dtype=dtype, kind=kind, nblocks=nblocks, nbytes=nbytes,
                             dims=dims, attrs=attrs)
        return info


def _coordinates(name: str, what: str, values: object, ndim: int) -> tuple[int, ...] | None:
    """A read's ``offset`` or ``shape`` as ``ndim`` non-negative integers (None stays None), or a
    ReadRequestError naming the variable and the problem (floats are never truncated, booleans are not
    numbers here)."""
    if values is None:
        return None
    if (type(values) is tuple or type(values) is list) and len(values) == ndim and all(
            type(v) is int and v >= 0 for v in values):  # plain non-negative ints: the usual request
        return tuple(values)
    try:
        out = integer_list(values)
    except NotIntegers as exc:
        if exc.whole:
            raise ReadRequestError(f"variable {name!r}: {what} {values!r} must be a sequence of {ndim} integers") \
                from None
        raise ReadRequestError(f"variable {name!r}: {what} {_show(values)} holds {exc.value!r} "
                               f"({type(exc.value).__name__}), not an integer") from None
    if any(v < 0 for v in out):
        raise ReadRequestError(f"variable {name!r}: {what} {_show(values)} is negative")
    if len(out) != ndim:
        raise ReadRequestError(f"variable {name!r}: {what} {_show(values)} has {len(out)} value(s), but the "
                               f"variable has {ndim} dimension(s)")
    return tuple(out)


def _describe_out(out: object) -> str:
    return (f"an array of shape {list(out.shape)}" if isinstance(out, np.ndarray) else
            f"{len(out)} item(s)" if isinstance(out, Sequence) and not isinstance(out, str | bytes) else
            type(out).__name__)


def _check_out(path: str, name: str, var: VariableInfo, shape: tuple[int, ...], out: np.ndarray) -> None:
    """Local: ``out`` can receive the request (its shape, the variable's dtype in native byte order, writable),
    or a ReadRequestError naming what is wrong."""
    where = f"variable {name!r} of {path}: out="
    if tuple(out.shape) != tuple(shape):
        raise ReadRequestError(f"{where} has shape {list(out.shape)}, but the request's shape is {list(shape)}")
    if out.dtype != var.dtype or not out.dtype.isnative:
        raise ReadRequestError(f"{where} has dtype {out.dtype.str}, but the variable's dtype is {var.dtype.str} "
                               "(no conversion on read: pass an array of the variable's dtype)")
    if not out.flags.writeable:
        raise ReadRequestError(f"{where} is read-only")
    if _overlaps_itself(out):
        raise ReadRequestError(f"{where} is a view whose elements overlap in memory (strides "
                               f"{list(out.strides)} for shape {list(out.shape)}: a stride-0 view from "
                               "np.broadcast_to or as_strided?); every element must have its own memory: pass "
                               "a fresh array (ckptio.empty) or a view of distinct elements")


def _overlaps_itself(a: np.ndarray) -> bool:
    """Local: True unless ``a``'s elements provably occupy distinct memory (issue 23: a stride-0 ``out`` was
    accepted and filled with whichever value landed last). Axes of length 1 do not count; the others, sorted by
    absolute stride, must each step past everything the smaller ones span. Views that interleave without
    sharing (exotic ``as_strided`` layouts) are refused too: ckptio cannot cheaply prove them disjoint."""
    if a.size <= 1:
        return False
    span = a.itemsize
    for stride, n in sorted((abs(st), n) for st, n in zip(a.strides, a.shape, strict=True) if n > 1):
        if stride < span:
            return True
        span = stride * (n - 1) + span
    return False


def checked_requests(path: str, requests: object, out: object, variables: Mapping[str, VariableInfo],
                     own_segment: Callable[[str], Box], skipped: Mapping[str, str] | None = None
                     ) -> tuple[list[Request], list[np.ndarray | None]]:
    """Local, any reader (file or stage): a ``read_many`` call's requests and ``out`` arrays checked against the
    variables (ReadRequestError naming the problem otherwise): each request is ``(name, offset, shape)``; no
    offset/shape on a per-rank segment variable is ``own_segment(name)``; ``skipped``: variables of a plain file
    ckptio cannot read, with why."""
    if isinstance(requests, str | bytes) or not isinstance(requests, Sequence):
        raise ReadRequestError(f"read_many of {path}: expected a list of (name, offset, shape), "
                               f"got {type(requests).__name__}")
    if out is None:
        given: list[Any] = [None] * len(requests)
    elif isinstance(out, np.ndarray) or not isinstance(out, Sequence) or len(out) != len(requests):
        raise ReadRequestError(f"read_many of {path}: out= must be a list of one array (or None) per "
                               f"request ({len(requests)}), got {_describe_out(out)}")
    else:
        given = list(out)
    found = []
    for r, o in zip(requests, given, strict=True):
        if o is None and type(r) is tuple and len(r) == 3:  # the usual request: (name, offset, shape) of ints
            plain = _plain_request(r, variables)
            if plain is not None:
                found.append(plain)
                continue
        if isinstance(r, str | bytes) or not isinstance(r, Sequence) or len(r) != 3:
            raise ReadRequestError(f"read_many of {path}: each request must be (name, offset, shape), got {r!r}")
        found.append(_checked_request(path, *r, o, variables, own_segment, skipped or {}))
    _check_disjoint(path, requests, given)
    return found, given


def _check_disjoint(path: str, requests: Sequence[Any], given: Sequence[np.ndarray | None]) -> None:
    """ReadRequestError when two ``out`` arrays of one call share memory: the read fills them concurrently (an
    aggregator's checksums are streamed across its outputs), so the result would be undefined. Candidates by
    byte bounds (sorted: O(n log n)), then numpy's exact test (interleaved strided views that share no element
    are fine; a pair too hard to decide counts as overlapping). Local."""
    spans = sorted((*np.lib.array_utils.byte_bounds(o), i) for i, o in enumerate(given) if o is not None and o.size)
    active: list[tuple[int, int]] = []  # (end, index) of earlier arrays whose bounds reach past this start
    for lo, hi, i in spans:
        active = [(end, j) for end, j in active if end > lo]
        for _, j in active:
            try:
                shared = np.shares_memory(given[j], given[i], max_work=10**6)
            except np.exceptions.TooHardError:
                shared = True
            if shared:
                raise ReadRequestError(f"read_many of {path}: out= arrays {j} ({requests[j][0]!r}) and {i} "
                                       f"({requests[i][0]!r}) share memory; give each request its own array")
        active.append((hi, i))


def _plain_request(r: tuple, variables: Mapping[str, VariableInfo]) -> Request | None:
    """Local: the Request of ``r`` = ``(name, offset, shape)`` when it is the usual one, a variable's name and two
    tuples of non-negative Python ints inside its shape (no ``out``), else None: :func:`_checked_request` then
    decides, and names any problem. The same Request as that path makes, in one step (a restart of 10,000 small
    variables checks 10,000 requests per rank)."""
    name, offset, shape = r
    if type(name) is not str or type(offset) is not tuple or type(shape) is not tuple:
        return None
    var = variables.get(name)
    if var is None:
        return None
    extent = var.shape
    if not len(offset) == len(shape) == len(extent) or not all(
            type(o) is int and type(n) is int and 0 <= o and 0 <= n and o + n <= g
            for o, n, g in zip(offset, shape, extent, strict=True)):
        return None
    return Request.made(name, Box(offset, shape))


def _checked_request(path: str, name: object, offset: object, shape: object, out: object,
                     variables: Mapping[str, VariableInfo], own_segment: Callable[[str], Box],
                     skipped: Mapping[str, str]) -> Request:
    if not isinstance(name, str) or name not in variables:
        why = skipped.get(name) if isinstance(name, str) else None
        if why is not None:  # a plain HDF5/netCDF file's variable ckptio cannot read as raw bytes
            raise ReadRequestError(f"variable {name!r} of {path} cannot be read by ckptio: it is {why}")
        raise ReadRequestError(f"variable {name!r} is not in checkpoint {path} (it has: {some_names(variables)})")
    var = variables[name]
    if out is not None and not isinstance(out, np.ndarray):
        raise ReadRequestError(f"variable {name!r} of {path}: out= must be a numpy array, got {type(out).__name__}")
    off = _coordinates(name, "offset", offset, len(var.shape))
    shp = _coordinates(name, "shape", shape, len(var.shape))
    if var.kind == SEGMENT and off is None and shp is None:
        request = Request(name, own_segment(name))
    else:
        if shp is None and out is not None:
            shp = _coordinates(name, "out.shape", out.shape, len(var.shape))
        request = Request(name, normalize_request(name, var.shape, off, shp))
    if out is not None:
        _check_out(path, name, var, request.box.shape, out)
    return request


def _show(values: object) -> str:
    return repr(list(values)) if isinstance(values, np.ndarray) else repr(values)


def some_names(names, shown: int = 20) -> str:
    """``a, b, c`` for a message: the first ``shown`` names in order, then how many more (10,000 variables must
    not make a 100 KB error message on every rank)."""
    ordered = sorted(names)
    if not ordered:
        return "no variables"
    more = f", ... ({len(ordered) - shown} more)" if len(ordered) > shown else ""
    return ", ".join(ordered[:shown]) + more

