"""What each rank holds of a checkpoint's write plan (issue 29): the coordinator's headers and segment starts
for every rank, and each rank's own plan rebuilt from them and its own declarations. Pure: no MPI.

The coordinator (:func:`ckptio.model.plan.plan_packed`) holds every rank's blocks; every other rank receives the
headers of all variables (O(variables), :func:`plan_headers`) and its own segments' first rows
(:func:`segment_starts`), and rebuilds the rows of its own blocks (:func:`own_plan`, :func:`own_boxes`): what a rank
holds is O(its blocks + variables), not O(ranks).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ckptio.model.layout import Box
from ckptio.model.plan import ARRAY, SEGMENT, segment_box
from ckptio.model.variable_plan import BlockPlan, VariablePlan


def plan_headers(variables: Mapping[str, VariablePlan]) -> dict[str, tuple[str, tuple[int, ...], str, int]]:
    """Coordinator: what every rank needs to know of every variable (dtype, global shape, kind, number of blocks
    of all ranks): O(variables), whatever the number of ranks."""
    return {name: (v.dtype, tuple(v.shape), v.kind, v.total_blocks) for name, v in variables.items()}


def segment_starts(variables: Mapping[str, VariablePlan], nprocs: int) -> list[dict[int, int]]:
    """Coordinator: for every rank, ``{local index: first row}`` of its per-rank segments (the offsets the
    exclusive scan of :func:`plan_write` gave them; the rest of a rank's blocks it declared itself)."""
    out: list[dict[int, int]] = [{} for _ in range(nprocs)]
    for v in variables.values():
        if v.kind == SEGMENT:
            for r, i, o in zip(v.rank.tolist(), v.local_index.tolist(), v.offset[:, 0].tolist(), strict=True):
                out[r][i] = o
    return out


def own_boxes(declarations: Sequence[Mapping[str, Any]], segment_offsets: Mapping[int, int]) -> list[Box]:
    """Local, any rank: where each of its declarations lies in its variable's global array, in declaration order:
    an array block where it was declared, a per-rank segment at the first row the planning rank gave it
    (:func:`segment_starts`, by local index)."""
    return [Box(tuple(d["offset"]), tuple(d["shape"])) if d["kind"] == ARRAY else
            segment_box(segment_offsets[i], d["length"], d["trailing"]) for i, d in enumerate(declarations)]


def own_plan(headers: Mapping[str, tuple[str, Sequence[int], str, int]], declarations: Sequence[Mapping[str, Any]],
             rank: int, segment_offsets: Mapping[int, int]) -> OwnPlan:
    """Local, on every rank but the coordinator: the plan of this rank's own blocks, rebuilt from its own
    declarations and what the coordinator sent (:func:`plan_headers`, this rank's :func:`segment_starts`). The
    same rows :func:`plan_write` made for this rank, without any other rank's (``nblocks`` counts them), so
    what a rank holds of the write plan is O(its blocks + variables), not O(ranks). Each variable's plan is made
    when first looked up (:class:`OwnPlan`)."""
    return OwnPlan(headers, declarations, rank, segment_offsets)


class OwnPlan(Mapping):
    """Local: :func:`own_plan`'s read-only mapping, name -> :class:`VariablePlan`, in the headers' order. A
    variable's plan is built when first looked up and kept: a backend that defines every variable in the file
    (HDF5, PnetCDF) builds them all, the native format (whose bytes ckptio places) none of the thousands of small
    variables other ranks hold."""

    def __init__(self, headers: Mapping[str, tuple[str, Sequence[int], str, int]],
                 declarations: Sequence[Mapping[str, Any]], rank: int, segment_offsets: Mapping[int, int]):
        self._headers, self._declarations = headers, declarations
        self._rank, self._segment_offsets = rank, segment_offsets
        self._rows: dict[str, list[int]] = {}  # name -> the local indices of this rank's blocks of it
        for i, d in enumerate(declarations):
            self._rows.setdefault(d["name"], []).append(i)
        self._made: dict[str, VariablePlan] = {}

    def __getitem__(self, name: str) -> VariablePlan:
        plan = self._made.get(name)
        if plan is None:
            dtype, shape, kind, n = self._headers[name]  # KeyError for a variable of no rank
            rows = self._rows.get(name)
            if rows:
                decls = self._declarations
                blocks = [BlockPlan(self._rank, i, box, decls[i].get("stored_nbytes"), decls[i].get("codec"),
                                    decls[i].get("checksum"))
                          for i, box in zip(rows, self._boxes(rows), strict=True)]
                plan = VariablePlan.from_blocks(name, dtype, shape, kind, blocks, n)
            else:
                plan = VariablePlan.none_here(name, dtype, shape, kind, n)
            self._made[name] = plan
        return plan

    def _boxes(self, rows: list[int]) -> list[Box]:
        decls = self._declarations
        return [Box(tuple(decls[i]["offset"]), tuple(decls[i]["shape"])) if decls[i]["kind"] == ARRAY else
                segment_box(self._segment_offsets[i], decls[i]["length"], decls[i]["trailing"]) for i in rows]

    def __contains__(self, name: object) -> bool:
        return name in self._headers

    def __iter__(self) -> Iterator[str]:
        return iter(self._headers)

    def __len__(self) -> int:
        return len(self._headers)
