"""The write plan and the vocabulary of the read side. Pure: a plan is a function of the gathered declarations
and the hints, so the planner can be tested for 10,000 simulated ranks without MPI.

Write plan
    :func:`plan_write` takes every rank's declarations (gathered on one coordinator rank) and returns the
    validated variables with their block tables; per-rank segments (rows along the first axis, the same
    trailing shape on every rank) get their offsets from an exclusive prefix sum of the row counts.

Read side
    The stored data is described as *extents* (:class:`Extent`): contiguous byte ranges of the file that hold
    a C-ordered box of one variable (a native-format block, or a leading-axis band of an HDF5/netCDF dataset);
    a rank asks for hyperslabs (:class:`Request`); :func:`choose_aggregators` picks the ranks that open the
    file. The restart plan itself is distributed and columnar: :mod:`ckptio.extent_table` holds the extents as
    numpy columns and :mod:`ckptio.readplan` partitions them among the aggregators at open and matches the
    requests each aggregator receives per read (ROMIO's two-phase pattern: no rank holds every rank's
    requests or the whole exchange map). The global planner that ran on every rank for every rank is gone.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import DeclarationError
from .layout import Box, check_dtype, check_name, exclusive_prefix_sum, validate_variable

ARRAY = "array"
SEGMENT = "segment"


# --------------------------------------------------------------------------------------------- write plan
@dataclass
class BlockPlan:
    """One declared block: who wrote it, where it sits in the global array."""

    rank: int
    local_index: int  # position among this rank's declarations (all variables)
    box: Box
    stored_nbytes: int | None = None  # bytes in the file when different from the raw size (compression)
    codec: str | None = None
    checksum: str | None = None  # of the block's elements in C order, declared dtype


@dataclass
class VariablePlan:
    name: str
    dtype: str
    shape: tuple[int, ...]
    kind: str
    blocks: list[BlockPlan] = field(default_factory=list)
    nblocks: int | None = None  # every rank's blocks, when ``blocks`` holds only this rank's (see own_plan)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    @property
    def total_blocks(self) -> int:
        """The number of blocks of all ranks (``blocks`` may be only this rank's share)."""
        return len(self.blocks) if self.nblocks is None else self.nblocks


def declaration(name: str, array: np.ndarray, offset: Sequence[int] | None, global_shape: Sequence[int] | None,
                rank: int) -> dict[str, Any]:
    """Validate one local ``write()`` call and describe it as a small JSON-able dict. Local, no MPI."""
    check_name(name)
    if not isinstance(array, np.ndarray):
        raise DeclarationError(f"variable {name!r} on rank {rank}: expected a numpy array, got {type(array).__name__}")
    check_dtype(name, array.dtype)
    # Any strides: a view (the interior of a halo'd array) is written in place, see ckptio.memsel.
    if offset is None and global_shape is None:
        if array.ndim == 0:
            raise DeclarationError(
                f"variable {name!r} on rank {rank}: a per-rank segment (no offset/global_shape) needs at least "
                f"one dimension (its rows, laid end to end in rank order), got a 0-d array; give offset=() and "
                f"global_shape=() to write a scalar"
            )
        return {"name": name, "dtype": array.dtype.str, "kind": SEGMENT, "length": int(array.shape[0]),
                "trailing": [int(n) for n in array.shape[1:]]}
    if offset is None or global_shape is None:
        raise DeclarationError(f"variable {name!r} on rank {rank}: give both offset and global_shape, or neither")
    offset = tuple(int(o) for o in offset)
    gshape = tuple(int(g) for g in global_shape)
    if len(offset) != array.ndim or len(gshape) != array.ndim:
        raise DeclarationError(
            f"variable {name!r} on rank {rank}: array has {array.ndim} dimensions but offset has {len(offset)} "
            f"and global_shape {len(gshape)}"
        )
    if any(g < 0 for g in gshape):
        raise DeclarationError(f"variable {name!r} on rank {rank}: negative global shape {list(gshape)}")
    return {"name": name, "dtype": array.dtype.str, "kind": ARRAY, "global_shape": list(gshape),
            "offset": list(offset), "shape": list(array.shape)}


def plan_write(declarations_by_rank: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, VariablePlan]:
    """Validate all ranks' declarations together; return variables (sorted by name) with their block tables.

    Raises DeclarationError naming the variable and ranks for: different dtype, kind or global shape for the
    same name, per-rank segments whose trailing shapes differ, more than one segment of a name on one rank, and
    (via :func:`validate_variable`) blocks outside the shape, overlapping blocks or uncovered regions.
    """
    first: dict[str, tuple[int, Mapping[str, Any]]] = {}
    variables: dict[str, VariablePlan] = {}
    segment_lengths: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)
    for rank, decls in enumerate(declarations_by_rank):
        for local_index, d in enumerate(decls):
            name = d["name"]
            if name not in first:
                first[name] = (rank, d)
                shape = tuple(d["global_shape"]) if d["kind"] == ARRAY else (0,)
                variables[name] = VariablePlan(name, d["dtype"], shape, d["kind"])
            r0, d0 = first[name]
            for key, what in (("kind", "kind (array block vs per-rank segment)"), ("dtype", "dtype")):
                if d[key] != d0[key]:
                    raise DeclarationError(
                        f"variable {name!r}: rank {r0} declared {what} {d0[key]!r} but rank {rank} declared {d[key]!r}"
                    )
            if d["kind"] == SEGMENT and list(d["trailing"]) != list(d0["trailing"]):
                raise DeclarationError(
                    f"variable {name!r}: rank {r0} declared per-rank segments of rows of shape {list(d0['trailing'])} "
                    f"but rank {rank} of rows of shape {list(d['trailing'])} (all dimensions but the first must "
                    f"agree)"
                )
            if d["kind"] == ARRAY:
                if list(d["global_shape"]) != list(d0["global_shape"]):
                    raise DeclarationError(
                        f"variable {name!r}: rank {r0} declared global shape {list(d0['global_shape'])} but rank "
                        f"{rank} declared {list(d['global_shape'])}"
                    )
                variables[name].blocks.append(BlockPlan(rank, local_index, Box(tuple(d["offset"]), tuple(d["shape"])),
                                                        d.get("stored_nbytes"), d.get("codec"), d.get("checksum")))
            else:
                if rank in segment_lengths[name]:
                    raise DeclarationError(
                        f"variable {name!r}: rank {rank} declared more than one segment (one per rank allowed)"
                    )
                segment_lengths[name][rank] = (local_index, d["length"], d.get("stored_nbytes"), d.get("codec"),
                                                 d.get("checksum"))
    for name, per_rank in segment_lengths.items():
        var = variables[name]
        trailing = tuple(first[name][1]["trailing"])
        ranks = sorted(per_rank)
        offsets = exclusive_prefix_sum([per_rank[r][1] for r in ranks])
        var.shape = (sum(per_rank[r][1] for r in ranks), *trailing)
        var.blocks = [BlockPlan(r, per_rank[r][0], segment_box(o, per_rank[r][1], trailing), *per_rank[r][2:])
                      for r, o in zip(ranks, offsets, strict=True)]
    for var in variables.values():
        if var.kind == ARRAY:
            validate_variable(var.name, var.shape, [(b.rank, b.box) for b in var.blocks])
    return dict(sorted(variables.items()))


def segment_box(start: int, length: int, trailing: Sequence[int]) -> Box:
    """The box of one per-rank segment: ``length`` rows from row ``start``, whole along the trailing axes."""
    return Box((int(start), *(0 for _ in trailing)), (int(length), *(int(n) for n in trailing)))


def plan_headers(variables: Mapping[str, VariablePlan]) -> dict[str, tuple[str, tuple[int, ...], str, int]]:
    """Coordinator: what every rank needs to know of every variable (dtype, global shape, kind, number of blocks
    of all ranks): O(variables), whatever the number of ranks."""
    return {name: (v.dtype, tuple(v.shape), v.kind, v.total_blocks) for name, v in variables.items()}


def segment_starts(variables: Mapping[str, VariablePlan], nprocs: int) -> list[dict[int, int]]:
    """Coordinator: for every rank, ``{local index: offset}`` of its per-rank segments (the offsets the
    exclusive scan of :func:`plan_write` gave them; the rest of a rank's blocks it declared itself)."""
    out: list[dict[int, int]] = [{} for _ in range(nprocs)]
    for v in variables.values():
        if v.kind == SEGMENT:
            for b in v.blocks:
                out[b.rank][b.local_index] = b.box.offset[0]
    return out


def own_plan(headers: Mapping[str, tuple[str, Sequence[int], str, int]], declarations: Sequence[Mapping[str, Any]],
             rank: int, segment_offsets: Mapping[int, int]) -> dict[str, VariablePlan]:
    """Local, on every rank but the coordinator: the plan of this rank's own blocks, rebuilt from its own
    declarations and what the coordinator sent (:func:`plan_headers`, this rank's :func:`segment_starts`). The
    same BlockPlans :func:`plan_write` made for this rank, without any other rank's (``nblocks`` counts them),
    so what a rank holds of the write plan is O(its blocks + variables), not O(ranks)."""
    variables = {name: VariablePlan(name, dtype, tuple(shape), kind, nblocks=n)
                 for name, (dtype, shape, kind, n) in headers.items()}
    for i, d in enumerate(declarations):
        if d["kind"] == ARRAY:
            box = Box(tuple(d["offset"]), tuple(d["shape"]))
        else:
            box = segment_box(segment_offsets[i], d["length"], d["trailing"])
        variables[d["name"]].blocks.append(BlockPlan(rank, i, box, d.get("stored_nbytes"), d.get("codec"),
                                                     d.get("checksum")))
    return variables


# ---------------------------------------------------------------------------------------------- read side
@dataclass(frozen=True)
class Extent:
    """Contiguous bytes of the file holding a C-ordered box of one variable.

    ``verify`` lists the writer blocks wholly inside this extent as ``(block_index, box, checksum)``;
    an aggregator checks them after reading. ``chain`` identifies extents that are parts of one stored block
    split because it exceeds the buffer (``(block_key, part, nparts)``); the aggregator hashes those in
    streaming fashion across rounds.
    """

    var: str
    box: Box
    file_offset: int
    nbytes: int
    verify: tuple[tuple[int, Box, str], ...] = ()
    chain: tuple[str, int, int] | None = None
    codec: str | None = None  # stored compressed: read whole, decompress to box.size elements
    label: str | None = None  # what it holds, for messages (default: the variable and the file offset)


@dataclass(frozen=True)
class Request:
    """One hyperslab of one variable that one rank wants."""

    var: str
    box: Box


def choose_aggregators(nprocs: int, node_of_rank: Sequence[int], stripe_count: int, override: int | None = None,
                       cap: int = 80) -> list[int]:
    """Pick aggregator ranks: ``min(nprocs, stripe_count, cap)`` unless overridden, spread one per node first.

    ``node_of_rank[r]`` is a node id (from ``MPI.COMM_TYPE_SHARED``). Ranks are taken round-robin over nodes:
    the first rank of every node, then the second rank of every node, and so on.
    """
    want = override if override is not None else min(nprocs, max(stripe_count, 1), cap)
    want = max(1, min(want, nprocs))
    by_node: dict[int, list[int]] = defaultdict(list)
    for rank in range(nprocs):
        by_node[node_of_rank[rank]].append(rank)
    nodes = sorted(by_node, key=lambda n: by_node[n][0])
    chosen: list[int] = []
    depth = 0
    while len(chosen) < want:
        for node in nodes:
            if depth < len(by_node[node]) and len(chosen) < want:
                chosen.append(by_node[node][depth])
        depth += 1
    return sorted(chosen)
