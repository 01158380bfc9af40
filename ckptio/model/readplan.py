"""The distributed restart plan (ROMIO's two-phase pattern): no rank holds every rank's requests or the whole
exchange map. Pure functions on numpy arrays; :class:`ckptio.reader.Reader` runs them between its collectives
and ``ckptio plan`` runs them for one simulated rank of a large job (:mod:`ckptio.tools.scale`).

At open (rank 0 once, :func:`partition`)
    The extent table (:mod:`ckptio.model.extent_table`) is cut into *runs*: each variable's extents, in file order,
    into up to A contiguous runs balanced by bytes (cut at a stripe-aligned extent boundary where one is within
    1/8 of the ideal share; fewer when it has fewer extents or is smaller than A x ``min_share``), and run ``j`` of a
    variable goes to aggregator ``(first + j) mod A`` with ``first`` rotating over the variables, so reading
    any subset of variables still spreads over the aggregators. Each aggregator receives only its own rows;
    every rank receives the :class:`Routing` index, one bounding box per run: O(variables x aggregators).

Per read call
    1. Every rank routes its requests (:func:`route_requests`) to the aggregators whose runs' boxes meet them:
       an Alltoall of counts and an Alltoallv of int64 records.
    2. Every aggregator matches what it received against its rows (:func:`match_requests`): the extents some
       rank needs, split into parts that fit the buffer, grouped into rounds, and the pieces (part x request
       intersections) in canonical order: round, destination, part, request.
    3. The aggregators tell every destination its pieces (an Alltoallv of int64 descriptors): a rank receives
       O(its own pieces), and the bytes of each round then line up on both sides without a global plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ckptio.model.extent_table import ExtentTable
from ckptio.model.joined_blocks import concatenated_ranges as _ranges
from ckptio.model.plan import Request

_I64 = np.int64


# ------------------------------------------------------------------------------------------------ at open
@dataclass
class Routing:
    """Broadcast to every rank at open: which aggregator holds which part of each variable."""

    aggregators: np.ndarray  # int32 [A]: ranks
    run_var: np.ndarray      # int32 [R]
    run_agg: np.ndarray      # int32 [R]: index into ``aggregators``
    run_lo: np.ndarray       # int64 [R, ndim]: bounding box of the run's extents
    run_hi: np.ndarray       # int64 [R, ndim]
    ndim: int

    def memory_bytes(self) -> int:
        return sum(a.nbytes for a in (self.aggregators, self.run_var, self.run_agg, self.run_lo, self.run_hi))

    def by_var(self) -> RunsByVar:
        """Run indices per variable (built once per Reader)."""
        order = np.argsort(self.run_var, kind="stable")
        return RunsByVar(order, self.run_var[order].astype(_I64))


@dataclass(frozen=True)
class RunsByVar:
    """The runs of each variable as one index sorted by variable (:meth:`Routing.by_var`): what
    :func:`route_requests` looks every request up in at once."""

    order: np.ndarray  # int64 [R]: run indices, by variable (each variable's in run order)
    var: np.ndarray  # int64 [R]: the variable of each of them (sorted)

    def get(self, var: int) -> np.ndarray | None:
        """The run indices of variable ``var`` (None: it has no run)."""
        a, b = np.searchsorted(self.var, [var, var + 1])
        return self.order[a:b] if b > a else None


def _cut_points(sizes: np.ndarray, offsets: np.ndarray, k: int, stripe_unit: int) -> np.ndarray:
    """Row boundaries (length k + 1, from 0 to len) cutting ``sizes`` into k byte-balanced runs, preferring
    boundaries at stripe-aligned file offsets within 1/8 of a share of the ideal cut."""
    m = len(sizes)
    prefix = np.zeros(m + 1, _I64)
    np.cumsum(sizes, out=prefix[1:])
    total = int(prefix[-1])
    cuts = [0]
    tolerance = total / k / 8
    for j in range(1, k):
        target = total * j / k
        i = int(np.searchsorted(prefix, target))
        cand = [c for c in (i - 1, i) if cuts[-1] <= c <= m]
        best = min(cand, key=lambda c: abs(int(prefix[c]) - target)) if cand else cuts[-1]
        lo = max(int(np.searchsorted(prefix, target - tolerance)), cuts[-1], 1)
        hi = min(int(np.searchsorted(prefix, target + tolerance, side="right")), m)
        if hi > lo:
            window = np.arange(lo, hi)
            aligned = window[offsets[window] % stripe_unit == 0]
            if len(aligned):
                best = int(aligned[np.argmin(np.abs(prefix[aligned] - target))])
        cuts.append(max(best, cuts[-1]))
    cuts.append(m)
    return np.array(cuts, _I64)


def partition(table: ExtentTable, aggregators: list[int], stripe_unit: int,
              min_share: int = 1) -> tuple[np.ndarray, Routing]:
    """Rank 0, at open: the aggregator index owning each row of ``table``, and the routing index.

    Each variable's rows (file order) are cut into ``k`` byte-balanced runs (``k`` at most the aggregators, its
    rows, its bytes / ``min_share``), dealt to the aggregators round-robin across variables. The variables of one
    run (most of the thousands of small variables of a code's checkpoint) are dealt all at once; only those cut
    into several runs are cut one by one."""
    naggr = max(1, len(aggregators))
    nd = table.ndim
    owner = np.zeros(len(table), np.int32)
    order = np.argsort(table.var, kind="stable")  # rows by variable, file order within one
    vars_, starts = np.unique(table.var[order], return_index=True)
    if not len(vars_):
        return owner, Routing(np.asarray(aggregators, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32),
                              np.zeros((0, nd), _I64), np.zeros((0, nd), _I64), nd)
    nrows = np.diff(np.append(starts, len(order)))
    totals = np.add.reduceat(table.nbytes[order], starts)
    k = np.maximum(1, np.minimum(np.minimum(naggr, nrows), totals // max(min_share, 1)))
    first = np.zeros(len(k), _I64)  # each variable's first aggregator: where the previous one's runs ended
    np.cumsum(k[:-1], out=first[1:])
    first %= naggr
    row_first = np.repeat(first, nrows)  # per row in ``order``
    single = np.repeat(k == 1, nrows)
    owner[order[single]] = row_first[single]
    one = np.flatnonzero(k == 1)
    run_var, run_j = [vars_[one].astype(np.int32)], [np.zeros(len(one), _I64)]
    run_agg = [first[one].astype(np.int32)]
    run_lo = [np.minimum.reduceat(table.lo[order], starts, axis=0)[one]]
    run_hi = [np.maximum.reduceat((table.lo + table.shape)[order], starts, axis=0)[one]]
    for i in np.flatnonzero(k > 1).tolist():
        rows = order[starts[i]:starts[i] + nrows[i]]
        cuts = _cut_points(table.nbytes[rows], table.file_offset[rows], int(k[i]), stripe_unit)
        for j in range(int(k[i])):
            run = rows[cuts[j]:cuts[j + 1]]
            if not len(run):
                continue
            agg = (int(first[i]) + j) % naggr
            owner[run] = agg
            run_var.append(np.array([vars_[i]], np.int32))
            run_j.append(np.array([j], _I64))
            run_agg.append(np.array([agg], np.int32))
            run_lo.append(table.lo[run].min(axis=0).reshape(1, nd))
            run_hi.append((table.lo[run] + table.shape[run]).max(axis=0).reshape(1, nd))
    var_col, j_col = np.concatenate(run_var), np.concatenate(run_j)
    runs = np.lexsort((j_col, var_col))  # variable by variable, each one's runs in order
    routing = Routing(np.asarray(aggregators, np.int32), var_col[runs], np.concatenate(run_agg)[runs],
                      np.concatenate(run_lo).astype(_I64)[runs].reshape(-1, nd),
                      np.concatenate(run_hi).astype(_I64)[runs].reshape(-1, nd), nd)
    return owner, routing


def rows_of_aggregators(owner: np.ndarray, naggr: int) -> list[np.ndarray]:
    """Rank 0: for each aggregator index, its rows (in file order)."""
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(naggr + 1))
    return [order[bounds[a]:bounds[a + 1]] for a in range(naggr)]


# ---------------------------------------------------------------------------------------- per read call
# A request record: [request index, variable, lo (ndim), shape (ndim)]; a piece descriptor: [round, request
# index, lo (ndim), shape (ndim)]. Both int64, padded boxes.
def request_records(requests: list[tuple[int, np.ndarray, np.ndarray]], ndim: int) -> np.ndarray:
    """``(var, lo, shape)`` per request (padded) -> records ``[qi, var, lo, shape]``."""
    out = np.zeros((len(requests), 2 + 2 * ndim), _I64)
    for qi, (v, lo, shape) in enumerate(requests):
        out[qi, 0], out[qi, 1] = qi, v
        out[qi, 2:2 + ndim] = lo
        out[qi, 2 + ndim:] = shape
    return out


def records_of(requests: Sequence[Request], var_index: Mapping[str, int], ndim: int) -> np.ndarray:
    """Local, pure: :func:`request_records` of :class:`Request` s (variable names looked up in ``var_index``; boxes
    of fewer than ``ndim`` dimensions padded with offset 0, extent 1), the requests of one number of dimensions at
    once: no numpy step per request (a restart of 10,000 small variables makes 2,500 per rank)."""
    out = np.zeros((len(requests), 2 + 2 * ndim), _I64)
    out[:, 0] = np.arange(len(requests))
    out[:, 2 + ndim:] = 1
    by_ndim: dict[int, list[int]] = {}
    for qi, q in enumerate(requests):
        by_ndim.setdefault(len(q.box.offset), []).append(qi)
    for nd, rows in by_ndim.items():
        picked = [requests[qi] for qi in rows]
        out[rows, 1] = [var_index[q.var] for q in picked]
        if nd:
            out[rows, 2:2 + nd] = [q.box.offset for q in picked]
            out[rows, 2 + ndim:2 + ndim + nd] = [q.box.shape for q in picked]
    return out


_ROUTE_PAIRS = 1 << 20  # (request, run) pairs examined at once: ~200 bytes of temporaries each


def route_requests(records: np.ndarray, routing: Routing, runs_by_var: RunsByVar) -> list[np.ndarray]:
    """Every rank, per read: its request records grouped by destination aggregator index, each group in request
    order (empty requests go nowhere). A request goes to every aggregator owning a run whose bounding box it
    meets. The (request, run of its variable) pairs are columns, handled in batches of at most
    :data:`_ROUTE_PAIRS` (an AMR restart of 20,000 block requests against 64 aggregators would otherwise hold 1.3
    million pairs, a quarter GB, at once)."""
    nd = routing.ndim
    naggr = len(routing.aggregators)
    live = np.flatnonzero((records[:, 2 + nd:] > 0).all(axis=1))
    var = records[live, 1]
    first = np.searchsorted(runs_by_var.var, var, "left")
    counts = np.searchsorted(runs_by_var.var, var, "right") - first
    ends = np.cumsum(counts)
    keys = []
    start = 0
    while start < len(live):  # the requests from ``start`` whose pairs fit (one at least)
        reach = (int(ends[start - 1]) if start else 0) + _ROUTE_PAIRS
        stop = max(start + 1, int(np.searchsorted(ends, reach, "right")))
        keys.append(_routed(records, routing, runs_by_var, live[start:stop], first[start:stop], counts[start:stop]))
        start = stop
    key = np.concatenate(keys) if keys else np.zeros(0, _I64)  # by request, then aggregator (batches in order)
    req, agg = key // naggr, key % naggr
    return [records[req[agg == a]] for a in range(naggr)]


def _routed(records: np.ndarray, routing: Routing, runs_by_var: RunsByVar, live: np.ndarray, first: np.ndarray,
            counts: np.ndarray) -> np.ndarray:
    """Local: ``request row * aggregators + aggregator index`` of every aggregator the requests ``live`` (rows of
    ``records``; their runs at ``first``, ``counts`` in ``runs_by_var``) meet, sorted and unique."""
    nd, naggr = routing.ndim, len(routing.aggregators)
    pair_req = np.repeat(live, counts)  # row of records
    pair_run = runs_by_var.order[_ranges(first, counts)]
    lo = records[pair_req, 2:2 + nd]
    hi = lo + records[pair_req, 2 + nd:]
    hit = (routing.run_lo[pair_run] < hi).all(axis=1) & (lo < routing.run_hi[pair_run]).all(axis=1)
    return np.unique(pair_req[hit] * naggr + routing.run_agg[pair_run[hit]].astype(_I64))


@dataclass
class Part:
    """A contiguous piece of one of the aggregator's extents, read in one round."""

    row: int                  # row of the aggregator's table
    lo: np.ndarray            # padded box
    shape: np.ndarray
    file_offset: int
    nbytes: int
    chain: tuple[int, int] | None = None  # (part, nparts) of a split extent: its blocks are checked streaming


@dataclass
class AggregatorPlan:
    """What one aggregator does in one read call."""

    parts: list[Part]
    rounds: list[list[int]]                       # part indices per round
    # pieces, in canonical order (round, destination, part, source request): columns
    piece_round: np.ndarray = field(default_factory=lambda: np.zeros(0, _I64))
    piece_dest: np.ndarray = field(default_factory=lambda: np.zeros(0, _I64))
    piece_part: np.ndarray = field(default_factory=lambda: np.zeros(0, _I64))
    piece_qi: np.ndarray = field(default_factory=lambda: np.zeros(0, _I64))
    piece_lo: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), _I64))
    piece_shape: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), _I64))

    @property
    def nrounds(self) -> int:
        return len(self.rounds)

    def descriptors_by_dest(self) -> dict[int, np.ndarray]:
        """For each destination rank that gets pieces: ``[round, qi, lo, shape]`` rows in canonical order (what
        it will receive). O(pieces), not O(ranks)."""
        if not len(self.piece_round):
            return {}
        rows = np.column_stack([self.piece_round, self.piece_qi, self.piece_lo, self.piece_shape]).astype(_I64)
        order = np.argsort(self.piece_dest, kind="stable")  # already (round, dest, ...): keep round order per dest
        dests, starts = np.unique(self.piece_dest[order], return_index=True)
        ends = np.append(starts[1:], len(order))
        return {int(d): rows[order[a:b]] for d, a, b in zip(dests.tolist(), starts.tolist(), ends.tolist(),
                                                              strict=True)}

    def descriptors_for(self, ndests: int) -> list[np.ndarray]:
        """:meth:`descriptors_by_dest` as one array per rank of the job (empty for most; tests and tools)."""
        empty = np.zeros((0, 2 + 2 * self.piece_lo.shape[1]), _I64)
        by_dest = self.descriptors_by_dest()
        return [by_dest.get(d, empty) for d in range(ndests)]


def match_requests(table: ExtentTable, received: list[np.ndarray], itemsizes: np.ndarray,
                   buffer_bytes: int) -> AggregatorPlan:
    """An aggregator, per read: ``received[src]`` holds the request records rank ``src`` sent it. Returns the
    parts to read in rounds of at most ``buffer_bytes`` (an extent larger than that is split along its
    leading axis unless compressed) and the pieces each source rank gets."""
    nd = table.ndim
    srcs = [np.full(len(r), s, _I64) for s, r in enumerate(received) if len(r)]
    if not srcs:
        return AggregatorPlan([], [], piece_lo=np.zeros((0, nd), _I64), piece_shape=np.zeros((0, nd), _I64))
    req_src = np.concatenate(srcs)
    recs = np.concatenate([r for r in received if len(r)])
    req_qi, req_var = recs[:, 0], recs[:, 1]
    req_lo, req_shape = recs[:, 2:2 + nd], recs[:, 2 + nd:]
    req_hi = req_lo + req_shape
    hit_row, hit_req = _meeting_pairs(table, req_var, req_lo, req_hi)
    if not len(hit_row):
        return AggregatorPlan([], [], piece_lo=np.zeros((0, nd), _I64), piece_shape=np.zeros((0, nd), _I64))
    hr, hq = hit_row, hit_req
    t_lo, t_hi = table.lo, table.lo + table.shape
    # parts of the needed extents (rows are in file order), in rounds of at most buffer_bytes
    needed = np.unique(hr)
    parts: list[Part] = []
    part_range = {}
    for row in needed.tolist():
        first = len(parts)
        parts.extend(_split(table, row, int(itemsizes[table.var[row]]), buffer_bytes))
        part_range[row] = (first, len(parts))
    rounds: list[list[int]] = []
    current: list[int] = []
    size = 0
    for p, part in enumerate(parts):
        if current and size + part.nbytes > buffer_bytes:
            rounds.append(current)
            current, size = [], 0
        current.append(p)
        size += part.nbytes
    if current:
        rounds.append(current)
    round_of = np.zeros(len(parts), _I64)
    for k, r in enumerate(rounds):
        round_of[r] = k
    # pieces: every (part, hitting request) intersection; an extent read whole is one part, so its pieces are
    # the (request, extent) intersections themselves (vectorized); split extents go part by part
    first_part = np.array([part_range[row][0] for row in needed.tolist()], _I64)
    nparts = np.array([part_range[row][1] - part_range[row][0] for row in needed.tolist()], _I64)
    where = np.searchsorted(needed, hr)
    whole = nparts[where] == 1
    p_part = [first_part[where[whole]]]
    p_req = [hq[whole]]
    p_lo = [np.maximum(req_lo[hq[whole]], t_lo[hr[whole]])]
    p_hi = [np.minimum(req_hi[hq[whole]], t_hi[hr[whole]])]
    split_rows = needed[nparts > 1]
    if len(split_rows):
        sel = ~whole
        hr_s, hq_s = hr[sel], hq[sel]
        order = np.argsort(hr_s, kind="stable")
        hr_s, hq_s = hr_s[order], hq_s[order]
        bounds = np.append(np.searchsorted(hr_s, split_rows), len(hr_s))
        for n, row in enumerate(split_rows.tolist()):
            reqs = hq_s[bounds[n]:bounds[n + 1]]
            a, b = part_range[row]
            for p in range(a, b):
                part = parts[p]
                lo = np.maximum(req_lo[reqs], part.lo)
                hi = np.minimum(req_hi[reqs], part.lo + part.shape)
                ok = (hi > lo).all(axis=1)
                if ok.any():
                    p_part.append(np.full(int(ok.sum()), p, _I64))
                    p_req.append(reqs[ok])
                    p_lo.append(lo[ok])
                    p_hi.append(hi[ok])
    pp, pq = np.concatenate(p_part), np.concatenate(p_req)
    plo, phi = np.concatenate(p_lo), np.concatenate(p_hi)
    dest, qi = req_src[pq], req_qi[pq]
    rnd = round_of[pp]
    canon = np.lexsort((qi, pp, dest, rnd))
    return AggregatorPlan(parts, rounds, rnd[canon], dest[canon], pp[canon], qi[canon], plo[canon],
                          (phi - plo)[canon])


_FEW_EXTENTS = 16  # a variable with at most this many extents: every request of it tests all of them
_PAIR_CHUNK = 1 << 14  # requests per vectorized step (bounds the candidate arrays)


def _meeting_pairs(table: ExtentTable, req_var: np.ndarray, req_lo: np.ndarray,
                   req_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (extent row, request) pair whose boxes meet, as two int64 arrays (in no particular order). Local.

    Variables of few extents (the thousands of small variables of a code's checkpoint, one block each) are tested
    all at once: each request against every extent of its variable, in one vectorized pass over all of them. A
    variable of many extents is searched on its own: its extents sorted by leading offset, the candidates of a
    request are those whose leading interval can reach it (a window of the sorted offsets), then the N-d test."""
    t_lo, t_hi = table.lo, table.lo + table.shape
    order = np.lexsort((table.lo[:, 0], table.var))
    nvars = max(int(table.var.max()) + 1 if len(table.var) else 0, int(req_var.max()) + 1 if len(req_var) else 0)
    per_var = np.bincount(table.var, minlength=nvars).astype(_I64)
    var_start = np.zeros(nvars + 1, _I64)
    np.cumsum(per_var, out=var_start[1:])
    hit_row: list[np.ndarray] = []
    hit_req: list[np.ndarray] = []

    def keep(q: np.ndarray, cand: np.ndarray) -> None:
        meet = (t_lo[cand] < req_hi[q]).all(axis=1) & (req_lo[q] < t_hi[cand]).all(axis=1)
        if meet.any():
            hit_row.append(cand[meet])
            hit_req.append(q[meet])

    few = np.flatnonzero(per_var[req_var] <= _FEW_EXTENTS)
    for chunk in range(0, len(few), _PAIR_CHUNK):
        qs = few[chunk:chunk + _PAIR_CHUNK]
        counts = per_var[req_var[qs]]
        keep(np.repeat(qs, counts), order[_ranges(var_start[req_var[qs]], counts)])
    many = np.flatnonzero(per_var[req_var] > _FEW_EXTENTS)
    if len(many):
        many = many[np.argsort(req_var[many], kind="stable")]
        qvars, qstarts = np.unique(req_var[many], return_index=True)
        qends = np.append(qstarts[1:], len(many))
        for v, s, e in zip(qvars.tolist(), qstarts.tolist(), qends.tolist(), strict=True):
            rows = order[var_start[v]:var_start[v + 1]]
            lead, maxlen = table.lo[rows, 0], int(table.shape[rows, 0].max())
            for chunk in range(s, e, _PAIR_CHUNK):
                qs = many[chunk:min(e, chunk + _PAIR_CHUNK)]
                a = np.searchsorted(lead, req_lo[qs, 0] - maxlen, side="right")
                counts = np.maximum(np.searchsorted(lead, req_hi[qs, 0], side="left") - a, 0)
                keep(np.repeat(qs, counts), rows[_ranges(a, counts)])
    if not hit_row:
        return np.zeros(0, _I64), np.zeros(0, _I64)
    return np.concatenate(hit_row), np.concatenate(hit_req)


def _split(table: ExtentTable, row: int, itemsize: int, buffer_bytes: int) -> list[Part]:
    """One extent as parts of at most ``buffer_bytes`` along its leading axis (C order: each is contiguous)."""
    lo, shape = table.lo[row], table.shape[row]
    nbytes, offset = int(table.nbytes[row]), int(table.file_offset[row])
    if nbytes <= buffer_bytes or table.codec[row] >= 0 or shape[0] <= 1 or table.var_ndim[table.var[row]] == 0:
        return [Part(row, lo, shape, offset, nbytes)]
    row_bytes = nbytes // int(shape[0])
    rows = max(1, buffer_bytes // max(row_bytes, 1))
    nparts = -(-int(shape[0]) // rows)
    out = []
    for i in range(nparts):
        start = i * rows
        n = min(rows, int(shape[0]) - start)
        plo, pshape = lo.copy(), shape.copy()
        plo[0] += start
        pshape[0] = n
        out.append(Part(row, plo, pshape, offset + start * row_bytes, n * row_bytes, (i, nparts)))
    return out


def parse_descriptors(received: list[np.ndarray], ndim: int, nrounds: int) -> list[dict[int, np.ndarray]]:
    """A receiving rank: the descriptors each source sent -> per round, ``{source: rows [qi, lo, shape]}`` in
    arrival (canonical) order."""
    out: list[dict[int, np.ndarray]] = [{} for _ in range(nrounds)]
    for src, rows in enumerate(received):
        if not len(rows):
            continue
        rnd = rows[:, 0]
        cuts = np.flatnonzero(np.diff(rnd)) + 1
        for chunk in np.split(rows, cuts):
            out[int(chunk[0, 0])][src] = chunk[:, 1:]
    return out
