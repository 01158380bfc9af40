"""The write aggregators' file domains: ckptio's own collective buffering on the write side (issue 29, item 1).

Pure: no MPI, no files. The planning rank chooses the aggregators and their domains (:func:`cyclic_domains`,
:func:`contiguous_domains`); every rank maps its own pieces onto them (:meth:`WriteDomains.cut`), and an
aggregator places what it receives by the positions the senders computed, so no rank holds anything of the other
ranks' pieces but what it receives itself. What a rank gets of the plan is O(aggregators) (the domains) plus, for
contiguous domains, O(1) of its own (:class:`RankDomain`).

Two kinds of domains, after the layout the file system really gave the file (:mod:`ckptio.engine.fslayout`):

``cyclic`` (a striped layout: CephFS, Lustre), as ROMIO's ``ad_lustre``
    The file is a sequence of stripe units of ``U`` bytes; unit ``k`` lies in object
    ``obj(k) = (k // (S * U_per_object)) * S + k mod S`` (stripe count ``S``; Lustre: one object per OST, its
    stripe units one after the other; CephFS: objects of ``object_size`` bytes, ``S`` of them filled
    round-robin, unit by unit) and belongs to aggregator ``obj(k) mod A``. ``A`` is a divisor of ``S`` (the
    default, ``A <= S``) or a multiple of it (only when more aggregators are asked for), so every object is
    written by exactly one aggregator; with ``A = S`` aggregator ``a`` writes objects ``a, a + S, a + 2S, ...``:
    one object index class, one OST on Lustre. (With ``A | S`` the rule is simply ``k mod A``.)
``contiguous`` (no stripes: ext4, xfs, NFS, tmpfs, GPFS)
    Each rank's region (its blocks: the native layout is rank-major and stripe-aligned) goes whole to one
    aggregator: the ranks of each node in consecutive groups balanced by bytes, as many groups as aggregators
    the node gets, the first rank of a group its aggregator. So with ``A = P`` every rank writes its own region
    and nothing is exchanged; with one aggregator per node, the exchange stays inside the node.

*Domain positions.* Every byte an aggregator writes has a position ``d`` in its domain, the same on the sender
and the receiver: cyclic, ``d = j * U + (offset mod U)`` with ``j`` the unit's index among the aggregator's
units (``k // A`` when ``A | S``); contiguous, ``d = offset + shift`` with the rank's ``shift`` (its region's
place among its group's regions, whole cells apart). ``d mod cell = offset mod cell`` in both, so a round
buffer (``cells_per_round`` cells) holds the file's bytes at their file alignment, and rounds are ``d //
round_bytes``: an aggregator writes its domain in rounds of at most ``round_bytes``, with writes aligned to
stripe units.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio.model.plan import choose_aggregators

_I64 = np.int64
CYCLIC = "cyclic"
CONTIGUOUS = "contiguous"
MAX_AGGREGATORS = 80  # the FLASH study's cap, as the restart's (ckptio.model.plan.choose_aggregators)


@dataclass(frozen=True)
class StripeLayout:
    """A file's real striping: ``count`` objects (OSTs) filled round-robin in units of ``unit`` bytes, each object
    ``object_size`` bytes before the next set of ``count`` objects starts (Lustre: unlimited; given as ``unit``,
    the rule then needs no object size)."""

    count: int
    unit: int
    object_size: int

    @property
    def units_per_object(self) -> int:
        return max(1, self.object_size // self.unit)

    @classmethod
    def from_record(cls, got: Mapping[str, Any] | None) -> StripeLayout | None:
        """The layout a file system reported (``fslayout.read_back``: CephFS ``stripe_count``, ``stripe_unit``,
        ``object_size``; Lustre ``stripe_count``, ``stripe_unit``), or None where it reported no stripes."""
        if not got:
            return None
        count, unit = got.get("stripe_count"), got.get("stripe_unit")
        if not (isinstance(count, int) and isinstance(unit, int) and count > 0 and unit > 0):
            return None
        size = got.get("object_size")
        size = size if isinstance(size, int) and size >= unit and size % unit == 0 else unit
        return cls(count, unit, size)


@dataclass(frozen=True)
class RankDomain:
    """A rank's own part of contiguous domains: the aggregator (index) its region goes to and the shift from its
    file offsets to positions in that aggregator's domain."""

    aggregator: int
    shift: int


@dataclass(frozen=True)
class WriteDomains:
    """The write aggregators (ranks, ascending; rank 0 first: it also writes the header, index and trailer) and
    their domains. O(aggregators): every rank holds it."""

    kind: str
    aggregators: tuple[int, ...]
    cell: int  # bytes: the stripe unit (cyclic) or the alignment of the regions (contiguous)
    cells_per_round: int
    stripe_count: int = 1
    units_per_object: int = 1

    @property
    def round_bytes(self) -> int:
        return self.cell * self.cells_per_round

    def cut(self, offsets: Sequence[int], lengths: Sequence[int], own: RankDomain | None = None) -> PieceCut:
        """Local, any rank: its pieces (file ``offsets`` and ``lengths``, in any order) cut where they cross an
        aggregator's domain or a round, with each part's aggregator (index), domain position and round.
        ``own``: the rank's :class:`RankDomain` (contiguous domains only). Vectorized: O(the parts)."""
        off, n = np.asarray(offsets, _I64), np.asarray(lengths, _I64)
        keep = n > 0
        source = np.flatnonzero(keep)
        off, n = off[keep], n[keep]
        if self.kind == CYCLIC:
            piece, start, length = split(off, n, self.cell)
            unit = start // self.cell
            agg, index = self.unit_owner(unit)
            position = index * self.cell + (start - unit * self.cell)
        else:
            if own is None:
                raise ValueError("contiguous write domains need the rank's own RankDomain")
            piece, dstart, length = split(off + own.shift, n, self.round_bytes)
            start = dstart - own.shift
            agg, position = np.full(len(piece), own.aggregator, _I64), dstart
        return PieceCut(source[piece], start, length, agg, position, position // self.round_bytes)

    def unit_owner(self, unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cyclic: for stripe units ``unit``, the aggregator (index) and the unit's index among that aggregator's
        units (see the module docstring)."""
        naggr, count = len(self.aggregators), self.stripe_count
        if count % naggr == 0:  # A divides S (A = S included): unit k -> k mod A
            return unit % naggr, unit // naggr
        if naggr % count:
            raise ValueError(f"{naggr} aggregators for {count} stripes: neither a divisor nor a multiple of it")
        per_set = count * self.units_per_object  # A = m S: object (set, position) -> (set mod m) S + position
        times = naggr // count
        stripe_set, within = unit // per_set, unit % per_set
        return (stripe_set % times) * count + within % count, (stripe_set // times) * self.units_per_object + \
            within // count

    def object_of(self, unit: np.ndarray) -> np.ndarray:
        """Cyclic: the object number (CephFS ``<inode>.<object>``; Lustre: the OST index is ``object mod S``) of
        stripe units ``unit``."""
        per_set = self.stripe_count * self.units_per_object
        return (unit // per_set) * self.stripe_count + unit % self.stripe_count


@dataclass(frozen=True)
class PieceCut:
    """A rank's pieces cut at domains and rounds, as columns: the piece each part comes from (index into the
    pieces given), its file offset and length, its aggregator (index), domain position and round."""

    piece: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    aggregator: np.ndarray
    position: np.ndarray
    round: np.ndarray

    def __len__(self) -> int:
        return len(self.piece)

    def take(self, rows: np.ndarray) -> PieceCut:
        return PieceCut(*(a[rows] for a in (self.piece, self.offset, self.length, self.aggregator, self.position,
                                            self.round)))

    @property
    def nrounds(self) -> int:
        """Rounds this rank takes part in as a sender (the last one's number + 1)."""
        return int(self.round.max()) + 1 if len(self.round) else 0


def split(starts: np.ndarray, lengths: np.ndarray, grid: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pure: the intervals ``[starts, starts + lengths)`` (non-empty) cut at every multiple of ``grid``:
    ``(interval index, start, length)`` of each part, in order. Vectorized."""
    if not len(starts):
        return np.zeros(0, _I64), np.zeros(0, _I64), np.zeros(0, _I64)
    first = starts // grid
    count = (starts + lengths - 1) // grid - first + 1
    piece = np.repeat(np.arange(len(starts), dtype=_I64), count)
    cell = first[piece] + np.arange(len(piece), dtype=_I64) - np.repeat(np.cumsum(count) - count, count)
    start = np.maximum(starts[piece], cell * grid)
    stop = np.minimum((starts + lengths)[piece], (cell + 1) * grid)
    return piece, start, stop - start


def cyclic_count(nprocs: int, stripe_count: int, override: int | None = None, cap: int = MAX_AGGREGATORS) -> int:
    """Pure: how many aggregators write a file striped over ``stripe_count`` objects: ``override`` or
    ``min(nprocs, stripe_count, cap)``, lowered to a divisor of the stripe count (or, above it, to a multiple),
    so that each object has exactly one writer (ROMIO's ``ad_lustre`` makes the same adjustment)."""
    want = override if override is not None else min(nprocs, stripe_count, cap)
    want = max(1, min(want, nprocs))
    if want <= stripe_count:
        return max(d for d in range(1, want + 1) if stripe_count % d == 0)
    return want // stripe_count * stripe_count


def cyclic_domains(nprocs: int, node_of_rank: Sequence[int], layout: StripeLayout, override: int | None,
                   buffer_bytes: int) -> WriteDomains:
    """Planning rank, pure: stripe-cyclic domains over ``layout``; the aggregators chosen as the restart's (one
    per node first, :func:`ckptio.model.plan.choose_aggregators`), ``A`` from :func:`cyclic_count`."""
    count = cyclic_count(nprocs, layout.count, override)
    chosen = choose_aggregators(nprocs, node_of_rank, layout.count, count)
    return WriteDomains(CYCLIC, tuple(chosen), layout.unit, max(1, buffer_bytes // layout.unit), layout.count,
                        layout.units_per_object)


def contiguous_domains(spans: np.ndarray, node_of_rank: Sequence[int], stripe_count: int, override: int | None,
                       cell: int, buffer_bytes: int) -> tuple[WriteDomains, list[RankDomain]]:
    """Planning rank, pure: contiguous domains of whole rank regions (``spans[r]``: rank r's ``[start, end)``,
    ``start == end`` for none). How many aggregators each node gets is the restart's rule
    (:func:`ckptio.model.plan.choose_aggregators` with ``stripe_count`` and ``override``); a node's ranks are cut into
    that many consecutive groups balanced by bytes, the first rank of each group its aggregator (rank 0 first).
    The ranks of a node without an aggregator (fewer aggregators than nodes) go, node by node, to the aggregator
    with the fewest bytes so far. Returns the domains and every rank's :class:`RankDomain`."""
    spans = np.asarray(spans, _I64).reshape(-1, 2)
    nprocs = len(spans)
    sizes = spans[:, 1] - spans[:, 0]
    chosen = choose_aggregators(nprocs, node_of_rank, stripe_count, override)
    per_node: dict[int, int] = defaultdict(int)
    for rank in chosen:
        per_node[node_of_rank[rank]] += 1
    ranks_of: dict[int, list[int]] = defaultdict(list)
    for rank in range(nprocs):
        ranks_of[node_of_rank[rank]].append(rank)
    group_of = np.zeros(nprocs, _I64)  # the aggregator RANK each rank's region goes to
    leaders: list[int] = []
    load: dict[int, int] = {}
    orphans: list[list[int]] = []
    for node in sorted(ranks_of, key=lambda n: ranks_of[n][0]):
        members = ranks_of[node]
        if not per_node[node]:
            orphans.append(members)
            continue
        for group in balanced_groups(sizes[members], per_node[node]):
            first = members[group[0]]
            leaders.append(first)
            group_of[[members[i] for i in group]] = first
            load[first] = int(sizes[[members[i] for i in group]].sum())
    for members in orphans:
        target = min(load, key=lambda r: (load[r], r))
        group_of[members] = target
        load[target] += int(sizes[members].sum())
    aggregators = sorted(leaders)
    index = {rank: a for a, rank in enumerate(aggregators)}
    # positions: each group's regions one after the other in rank order, whole cells apart, each at its file
    # offset modulo the cell (so rounds cut and write at the file's alignment)
    lead = np.fromiter((index[int(g)] for g in group_of), _I64, nprocs)
    width = np.where(sizes > 0, (spans[:, 0] % cell + sizes + cell - 1) // cell * cell, 0)
    order = np.lexsort((np.arange(nprocs), lead))
    before = np.zeros(nprocs, _I64)
    within = np.cumsum(width[order]) - width[order]
    group_start = np.searchsorted(lead[order], np.arange(len(aggregators)))
    before[order] = within - within[group_start[lead[order]]] if nprocs else within
    shift = before + spans[:, 0] % cell - spans[:, 0]
    domains = WriteDomains(CONTIGUOUS, tuple(aggregators), cell, max(1, buffer_bytes // cell))
    return domains, [RankDomain(int(a), int(s)) for a, s in zip(lead.tolist(), shift.tolist(), strict=True)]


def balanced_groups(sizes: np.ndarray, groups: int) -> list[list[int]]:
    """Pure: indices ``0..len(sizes)-1`` cut into ``groups`` consecutive non-empty groups (at most
    ``len(sizes)``) whose byte sums are as even as the cut points allow."""
    n = len(sizes)
    groups = max(1, min(groups, n))
    prefix = np.concatenate(([0], np.cumsum(np.asarray(sizes, _I64))))
    cuts = [0]
    for g in range(1, groups):
        lo, hi = cuts[-1] + 1, n - (groups - g)  # leave one member for each group after this one
        target = prefix[-1] * g / groups
        best = int(np.clip(np.searchsorted(prefix, target), lo, hi))
        if best > lo and abs(prefix[best - 1] - target) <= abs(prefix[best] - target):
            best -= 1
        cuts.append(best)
    cuts.append(n)
    return [list(range(a, b)) for a, b in itertools.pairwise(cuts)]


def node_ids(hosts: Sequence[str]) -> list[int]:
    """Pure: a node number per rank from the ranks' host names (``MPI_Get_processor_name``): the lowest rank on
    the same host, as ``ckptio.coord.node_leader`` numbers nodes."""
    first: dict[str, int] = {}
    return [first.setdefault(h, r) for r, h in enumerate(hosts)]


__all__ = ["CONTIGUOUS", "CYCLIC", "PieceCut", "RankDomain", "StripeLayout", "WriteDomains", "balanced_groups",
           "contiguous_domains", "cyclic_count", "cyclic_domains", "node_ids", "split"]
