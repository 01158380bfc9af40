"""The declare phase's records: what every rank sends the planning rank about the blocks it declared. Pure data: no
MPI, no files.

A block's declaration (:func:`declaration`: one local ``write()`` call, checked) stays the small JSON-able dict it
was (the staged writer stores it in its manifest); :func:`prepared` adds what the prepare step computed.
:class:`Declared` is one rank's whole message of the declare phase, typed; :meth:`Declared.of` also takes the dict
the staged close (:mod:`ckptio.tiers.staging`) sends for the same check.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio.errors import DeclarationError
from ckptio.model.layout import NotIntegers, check_dtype, check_name, integer_list
from ckptio.model.plan import ARRAY, SEGMENT


def prepared(decl: Mapping[str, Any], checksum: str, stored_nbytes: int | None = None,
             codec: str | None = None) -> dict[str, Any]:
    """Local: the declaration ``decl`` with the prepare step's checksum of the block's C-order bytes and, when it
    was compressed, its stored size and codec (``"zstd:3"``): what :func:`ckptio.model.plan.pack_declarations`
    and :func:`ckptio.model.rank_plan.own_plan` read."""
    out = {**decl, "checksum": checksum}
    if codec is not None:
        out.update(stored_nbytes=int(stored_nbytes or 0), codec=codec)
    return out


@dataclass(frozen=True)
class Declared:
    """One rank's message of the declare phase: its packed declarations
    (:func:`ckptio.model.plan.pack_declarations`), the checkpoint attributes it was given, its variables' dims and
    attrs (:func:`ckptio.model.varmeta.pack`), its node (``MPI_Get_processor_name``; empty where unknown), why the
    checkpoint's directory cannot be used (the planning rank's check; None: it can), the seconds its prepare
    step took and why its MPI-IO would corrupt collective writes through a format library
    (``coord.hints.collective_write_hazard``; None: it would not)."""

    decls: Any
    attrs: Mapping[str, Any]
    described: Any
    prepare_seconds: float
    dir_problem: str | None = None
    host: str = ""
    transfer_hazard: str | None = None

    @classmethod
    def of(cls, value: Declared | Mapping[str, Any]) -> Declared:
        """``value`` as a :class:`Declared`: itself, or the staged close's dict of the same fields (which has no
        ``host``)."""
        if isinstance(value, Declared):
            return value
        return cls(value["decls"], value["attrs"], value["described"], value["prepare_seconds"],
                   value.get("dir_problem"), value.get("host", ""), value.get("transfer_hazard"))


@dataclass(frozen=True)
class RankShare:
    """What the planning rank sends each rank after the declare phase: the start rows of its segments, its share of
    the backend's placement and, with ckptio's own collective buffering, its write domain (else None)."""

    segments: Any
    placement: Mapping[str, Any] | None  # None: the share every rank has, broadcast once (Placement.same_for_all)
    write_domain: Any = None


def declaration(name: str, array: np.ndarray, offset: Sequence[int] | None, global_shape: Sequence[int] | None,
                rank: int) -> dict[str, Any]:
    """Validate one local ``write()`` call and describe it as a small JSON-able dict. Local, no MPI."""
    check_name(name)
    if not isinstance(array, np.ndarray):
        raise DeclarationError(f"variable {name!r} on rank {rank}: expected a numpy array, got {type(array).__name__}")
    check_dtype(name, array.dtype)
    # Any strides: a view (the interior of a halo'd array) is written in place, see ckptio.model.memsel.
    if offset is None and global_shape is None:
        if array.ndim == 0:
            raise DeclarationError(
                f"variable {name!r} on rank {rank}: a per-rank segment (no offset/global_shape) needs at least "
                f"one dimension (its rows, laid end to end in rank order), got a 0-d array (write a scalar as an "
                f"array block with an empty offset and global shape)"
            )
        return {"name": name, "dtype": array.dtype.str, "kind": SEGMENT, "length": int(array.shape[0]),
                "trailing": [int(n) for n in array.shape[1:]]}
    if offset is None or global_shape is None:
        raise DeclarationError(f"variable {name!r} on rank {rank}: give both offset and global_shape, or neither")
    offset = _declared_ints(name, rank, "offset", offset)
    gshape = _declared_ints(name, rank, "global_shape", global_shape)
    if len(offset) != array.ndim or len(gshape) != array.ndim:
        raise DeclarationError(
            f"variable {name!r} on rank {rank}: array has {array.ndim} dimensions but offset has {len(offset)} "
            f"and global_shape {len(gshape)}"
        )
    if any(g < 0 for g in gshape):
        raise DeclarationError(f"variable {name!r} on rank {rank}: negative global shape {list(gshape)}")
    return {"name": name, "dtype": array.dtype.str, "kind": ARRAY, "global_shape": list(gshape),
            "offset": list(offset), "shape": list(array.shape)}


_INT64_MAX = 2**63 - 1


def _declared_ints(name: str, rank: int, what: str, values: object) -> tuple[int, ...]:
    """Local: a write's ``offset`` or ``global_shape`` as Python ints, or a DeclarationError naming the variable,
    the rank and the problem: a value that is not an integer (``8.0``, ``True``, ``"8"``: never truncated) or
    that the file formats cannot hold (above 2**63 - 1; sizes and offsets are int64 in every backend)."""
    if (type(values) is tuple or type(values) is list) and all(
            type(v) is int and -_INT64_MAX <= v <= _INT64_MAX for v in values):  # plain ints: the usual call
        out = list(values)
    else:
        out = _general_ints(name, rank, what, values)
    if what == "global_shape" and math.prod(out) > _INT64_MAX:
        raise DeclarationError(f"variable {name!r} on rank {rank}: global_shape={_shown(values)} has "
                               f"{math.prod(out)} elements, more than a checkpoint can hold (2**63 - 1)")
    return tuple(out)


def _general_ints(name: str, rank: int, what: str, values: object) -> list[int]:
    """:func:`_declared_ints` of any sequence: numpy integers accepted, anything else named."""
    try:
        out = integer_list(values)
    except NotIntegers as exc:
        if exc.whole:
            raise DeclarationError(f"variable {name!r} on rank {rank}: {what}={values!r} must be a sequence of "
                                   "integers") from None
        raise DeclarationError(f"variable {name!r} on rank {rank}: {what}={_shown(values)} holds {exc.value!r} "
                               f"({type(exc.value).__name__}), not an integer") from None
    big = next((v for v in out if abs(v) > _INT64_MAX), None)
    if big is not None:
        raise DeclarationError(f"variable {name!r} on rank {rank}: {what}={_shown(values)} holds {big}, more than "
                               "the largest size or offset a checkpoint can hold (2**63 - 1)")
    return out


def _shown(values: object) -> str:
    return repr(list(values)) if isinstance(values, np.ndarray) else repr(values)
