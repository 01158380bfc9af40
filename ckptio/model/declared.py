"""The declare phase's records: what every rank sends the planning rank about the blocks it declared. Pure data: no
MPI, no files.

A block's declaration (:func:`ckptio.model.plan.declaration`) stays the small JSON-able dict it was (the staged
writer stores it in its manifest); :func:`prepared` adds what the prepare step computed. :class:`Declared` is one
rank's whole message of the declare phase, typed; :meth:`Declared.of` also takes the dict the staged close
(:mod:`ckptio.tiers.staging`) sends for the same check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def prepared(decl: Mapping[str, Any], checksum: str, stored_nbytes: int | None = None,
             codec: str | None = None) -> dict[str, Any]:
    """Local: the declaration ``decl`` with the prepare step's checksum of the block's C-order bytes and, when it
    was compressed, its stored size and codec (``"zstd:3"``): what :func:`ckptio.model.plan.pack_declarations`
    and :func:`ckptio.model.plan.own_plan` read."""
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
