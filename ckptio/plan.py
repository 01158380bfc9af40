"""Global write and read plans. Pure: a plan is a function of the gathered declarations and the hints, so the
planner can be tested for 10,000 simulated ranks without MPI (and ``ckptio plan`` runs it for a hypothetical
job).

Write plan
    :func:`plan_write` takes every rank's declarations (gathered on one coordinator rank) and returns the
    validated variables with their block tables; per-rank segments get their offsets from an exclusive prefix
    sum of the lengths.

Read plan (two-phase aggregated restart)
    The stored data is described as *extents*: contiguous byte ranges of the file that hold a C-ordered box of
    one variable (a native-format block, or a leading-axis band of an HDF5/netCDF dataset). :func:`plan_read`
    keeps the extents some rank needs, splits those larger than the aggregator buffer, gives each aggregator a
    contiguous file domain (a run of extents, cut preferably at stripe boundaries, balanced by bytes) and
    orders each aggregator's work in rounds of at most ``buffer_bytes``. :func:`exchange_for_rank` derives,
    for one rank, what it sends (as an aggregator) and receives in every round; both sides enumerate pieces in
    the same canonical order, so no plan needs to be communicated.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import DeclarationError
from .layout import Box, check_dtype, check_name, exclusive_prefix_sum, split_leading_axis, validate_variable

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

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


def declaration(name: str, array: np.ndarray, offset: Sequence[int] | None, global_shape: Sequence[int] | None,
                rank: int) -> dict[str, Any]:
    """Validate one local ``write()`` call and describe it as a small JSON-able dict. Local, no MPI."""
    check_name(name)
    if not isinstance(array, np.ndarray):
        raise DeclarationError(f"variable {name!r} on rank {rank}: expected a numpy array, got {type(array).__name__}")
    check_dtype(name, array.dtype)
    if array.size and not (array.flags.c_contiguous or array.flags.f_contiguous):
        raise DeclarationError(
            f"variable {name!r} on rank {rank}: array is not contiguous (strides {array.strides}); "
            "pass np.ascontiguousarray(a) so the checkpoint does not silently copy it"
        )
    if offset is None and global_shape is None:
        if array.ndim != 1:
            raise DeclarationError(
                f"variable {name!r} on rank {rank}: a per-rank segment (no offset/global_shape) must be 1-D, "
                f"got shape {list(array.shape)}"
            )
        return {"name": name, "dtype": array.dtype.str, "kind": SEGMENT, "length": int(array.shape[0])}
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
    same name, more than one segment of a name on one rank, and (via :func:`validate_variable`) blocks outside
    the shape, overlapping blocks or uncovered regions.
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
        ranks = sorted(per_rank)
        offsets = exclusive_prefix_sum([per_rank[r][1] for r in ranks])
        var.shape = (sum(per_rank[r][1] for r in ranks),)
        var.blocks = [BlockPlan(r, per_rank[r][0], Box((o,), (per_rank[r][1],)), *per_rank[r][2:])
                      for r, o in zip(ranks, offsets, strict=True)]
    for var in variables.values():
        if var.kind == ARRAY:
            validate_variable(var.name, var.shape, [(b.rank, b.box) for b in var.blocks])
    return dict(sorted(variables.items()))


# ---------------------------------------------------------------------------------------------- read plan
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


@dataclass(frozen=True)
class Request:
    """One hyperslab of one variable that one rank wants."""

    var: str
    box: Box


@dataclass
class ReadPlan:
    aggregators: list[int]  # world ranks (of the reading communicator) that open and read the file
    rounds: list[list[list[Extent]]]  # rounds[a][k]: extents aggregator a reads in round k
    nrounds: int
    domains: list[tuple[int, int]]  # byte range [start, end) of each aggregator's file domain
    buffer_bytes: int

    def aggregator_index(self, rank: int) -> int | None:
        try:
            return self.aggregators.index(rank)
        except ValueError:
            return None


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


def _split_extent(extent: Extent, itemsize: int, buffer_bytes: int) -> list[Extent]:
    """Split an extent larger than the buffer along its leading axis into a chain of contiguous parts."""
    if extent.nbytes <= buffer_bytes or extent.codec is not None:
        return [extent]
    pieces = split_leading_axis(extent.box, max(1, buffer_bytes // itemsize))
    if len(pieces) == 1:
        return [extent]
    out, pos = [], extent.file_offset
    key = f"{extent.var}@{extent.file_offset}"
    for i, piece in enumerate(pieces):
        nbytes = piece.size * itemsize
        verify = extent.verify if len(extent.verify) == 1 and extent.verify[0][1] == extent.box else ()
        out.append(Extent(extent.var, piece, pos, nbytes, verify, (key, i, len(pieces)) if verify else None))
        pos += nbytes
    return out


class _IntervalIndex:
    """Requests of one variable indexed by their leading-axis interval, for fast intersection queries."""

    def __init__(self, items: list[tuple[Box, Any]]):
        self.items = sorted(items, key=lambda it: it[0].offset[0] if it[0].ndim else 0)
        self.starts = [it[0].offset[0] if it[0].ndim else 0 for it in self.items]
        self.max_len = max((it[0].shape[0] if it[0].ndim else 1 for it in self.items), default=0)

    def query(self, box: Box) -> list[tuple[Box, Any]]:
        if not self.items:
            return []
        if box.ndim == 0:
            return list(self.items)
        lo = bisect.bisect_left(self.starts, box.offset[0] - self.max_len)
        hi = bisect.bisect_left(self.starts, box.end[0])
        return [it for it in self.items[lo:hi] if it[0].intersect(box) is not None or (box.size == 0 == it[0].size)]

    def any(self, box: Box) -> bool:
        if box.ndim == 0:
            return bool(self.items)
        lo = bisect.bisect_left(self.starts, box.offset[0] - self.max_len)
        hi = bisect.bisect_left(self.starts, box.end[0])
        return any(it[0].intersect(box) is not None for it in self.items[lo:hi])


def needed_extents(extents: Sequence[Extent], requests_by_rank: Sequence[Sequence[Request]]) -> list[Extent]:
    """Extents that intersect at least one request (in file order)."""
    by_var: dict[str, list[tuple[Box, Any]]] = defaultdict(list)
    for rank, reqs in enumerate(requests_by_rank):
        for req in reqs:
            if req.box.size > 0:
                by_var[req.var].append((req.box, rank))
    index = {v: _IntervalIndex(items) for v, items in by_var.items()}
    out = [e for e in extents if e.var in index and index[e.var].any(e.box)]
    return sorted(out, key=lambda e: e.file_offset)


def plan_read(
    extents: Sequence[Extent],
    itemsizes: Mapping[str, int],
    requests_by_rank: Sequence[Sequence[Request]],
    aggregators: Sequence[int],
    stripe_unit: int,
    buffer_bytes: int = 64 << 20,
) -> ReadPlan:
    """Assign the needed extents to aggregators in contiguous, stripe-aligned-where-possible file domains.

    Domains are cut only between extents (a stored block is never split across aggregators, so its checksum
    can be verified where it is read); among candidate cut points within 1/8 of the ideal share the planner
    takes a stripe-aligned one. Each aggregator's extents are then grouped into rounds of at most
    ``buffer_bytes`` (an extent larger than that was split into a chain first).
    """
    need = needed_extents(extents, requests_by_rank)
    naggr = max(1, len(aggregators))
    units: list[list[Extent]] = [_split_extent(e, itemsizes[e.var], buffer_bytes) for e in need]
    sizes = [sum(p.nbytes for p in u) for u in units]
    total = sum(sizes)
    cuts = _balanced_cuts(units, sizes, total, naggr, stripe_unit)
    rounds: list[list[list[Extent]]] = []
    domains: list[tuple[int, int]] = []
    for a in range(naggr):
        mine = [p for u in units[cuts[a]:cuts[a + 1]] for p in u]
        domains.append((mine[0].file_offset, mine[-1].file_offset + mine[-1].nbytes) if mine else (0, 0))
        groups: list[list[Extent]] = []
        current: list[Extent] = []
        size = 0
        for p in mine:
            if current and size + p.nbytes > buffer_bytes:
                groups.append(current)
                current, size = [], 0
            current.append(p)
            size += p.nbytes
        if current:
            groups.append(current)
        rounds.append(groups)
    nrounds = max((len(r) for r in rounds), default=0)
    return ReadPlan(list(aggregators), rounds, nrounds, domains, buffer_bytes)


def _balanced_cuts(units: list[list[Extent]], sizes: list[int], total: int, naggr: int, stripe_unit: int) -> list[int]:
    """Indices into ``units`` where each aggregator's run starts (length naggr + 1), balanced by bytes."""
    prefix = [0]
    for s in sizes:
        prefix.append(prefix[-1] + s)
    cuts = [0]
    tolerance = total / naggr / 8 if naggr else 0
    for a in range(1, naggr):
        target = total * a / naggr
        i = bisect.bisect_left(prefix, target)
        candidates = [j for j in (i - 1, i) if cuts[-1] <= j <= len(units)]
        best = min(candidates, key=lambda j: abs(prefix[j] - target)) if candidates else cuts[-1]
        # prefer a nearby stripe-aligned boundary
        lo = bisect.bisect_left(prefix, target - tolerance)
        hi = bisect.bisect_right(prefix, target + tolerance)
        aligned = [j for j in range(max(lo, cuts[-1]), min(hi, len(units))) if 0 < j < len(units)
                   and units[j][0].file_offset % stripe_unit == 0]
        if aligned:
            best = min(aligned, key=lambda j: abs(prefix[j] - target))
        cuts.append(max(best, cuts[-1]))
    cuts.append(len(units))
    return cuts


@dataclass
class Piece:
    """Part of one extent that goes to one request of one rank."""

    extent: Extent
    request_index: int
    box: Box

    @property
    def count(self) -> int:
        return self.box.size


@dataclass
class RoundExchange:
    """What one rank sends and receives in one round (pieces in canonical order per peer)."""

    send: dict[int, list[Piece]]  # dest rank -> pieces (only on aggregators)
    recv: dict[int, list[Piece]]  # source aggregator rank -> pieces


def exchange_for_rank(plan: ReadPlan, requests_by_rank: Sequence[Sequence[Request]], rank: int) -> list[RoundExchange]:
    """For ``rank``: per round, the pieces it sends (if it is an aggregator) and receives.

    Canonical order within one (source, destination, round): the source's extents in round order, and for each
    extent the destination's requests in request order. Sender and receiver enumerate the same way.
    """
    out = [RoundExchange({}, {}) for _ in range(plan.nrounds)]
    # receives: my requests against every aggregator's extents; only requests of the extent's variable can meet
    # it (grouping by variable keeps request order within a variable, so the canonical order is unchanged, and
    # makes the cost O(extents x requests per variable) instead of O(extents x requests): 10,000 variables)
    my_reqs_by_var: dict[str, list[tuple[int, Request]]] = defaultdict(list)
    for qi, q in enumerate(requests_by_rank[rank]):
        my_reqs_by_var[q.var].append((qi, q))
    for a, agg_rank in enumerate(plan.aggregators):
        for k, extents in enumerate(plan.rounds[a]):
            pieces = [Piece(e, qi, common) for e in extents for qi, q in my_reqs_by_var.get(e.var, ())
                      if (common := q.box.intersect(e.box)) is not None]
            if pieces:
                out[k].recv[agg_rank] = pieces
    a = plan.aggregator_index(rank)
    if a is not None:
        index: dict[str, _IntervalIndex] = {}
        by_var: dict[str, list[tuple[Box, Any]]] = defaultdict(list)
        for dest, reqs in enumerate(requests_by_rank):
            for qi, q in enumerate(reqs):
                if q.box.size > 0:
                    by_var[q.var].append((q.box, (dest, qi)))
        index = {v: _IntervalIndex(items) for v, items in by_var.items()}
        for k, extents in enumerate(plan.rounds[a]):
            send: dict[int, list[Piece]] = defaultdict(list)
            for e in extents:
                if e.var not in index:
                    continue
                hits = sorted(index[e.var].query(e.box), key=lambda it: it[1])
                for qbox, (dest, qi) in hits:
                    common = qbox.intersect(e.box)
                    if common is not None:
                        send[dest].append(Piece(e, qi, common))
            out[k].send = dict(send)
    return out
