"""The columnar extent table and the distributed restart plan, without MPI: every collective's delivery is
simulated by handing each simulated rank what the Alltoallv would give it."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.mpiio import NativeBackend
from backends.rawio import leading_axis_bands
from ckptio.model import extent_table, readplan
from ckptio.model.plan import choose_aggregators


def _tiles(shape, cuts_per_axis, rng):
    """Blocks tiling ``shape``: a grid with random cut points per axis, in shuffled order."""
    edges = []
    for n, c in zip(shape, cuts_per_axis, strict=True):
        inner = sorted(rng.choice(np.arange(1, n), size=min(c, n - 1), replace=False).tolist()) if n > 1 else []
        edges.append([0, *inner, n])
    boxes = [()]
    for e in edges:
        boxes = [(*b, (e[i], e[i + 1] - e[i])) for b in boxes for i in range(len(e) - 1)]
    order = rng.permutation(len(boxes))
    return [boxes[i] for i in order]


def _meta(variables, writers, rng, stored_as_array):
    """A metadata document: variables {name: (shape, cuts per axis)}; native block offsets laid out rank-major,
    or (HDF5/netCDF) each variable one C-ordered array."""
    meta = {"nprocs": writers, "variables": {}}
    pos = 4096
    for name, (shape, cuts) in variables.items():
        tiles = _tiles(shape, cuts, rng) if shape else [()]
        blocks = []
        for i, t in enumerate(tiles):
            off, shp = [a for a, _ in t], [b for _, b in t]
            nbytes = math.prod(shp) * 8
            blocks.append({"rank": i % writers, "offset": off, "shape": shp, "checksum": f"{rng.integers(2**63):016x}",
                           "file_offset": None if stored_as_array else pos, "stored_nbytes": nbytes,
                           "codec": "zstd:3" if (not stored_as_array and i % 7 == 3) else None})
            pos += nbytes
        var = {"dtype": "<f8", "shape": list(shape), "kind": "array", "blocks": blocks}
        if stored_as_array:
            var["storage"] = {"file_offset": pos}
            pos += math.prod(shape) * 8
        meta["variables"][name] = var
    return meta


def _same(table, extents):
    assert len(table) == len(extents)
    for i, e in enumerate(sorted(extents, key=lambda e: e.file_offset)):
        got = table.extent(i)
        assert (got.var, got.box, got.file_offset, got.nbytes, got.codec) == \
            (e.var, e.box, e.file_offset, e.nbytes, e.codec)
        assert sorted(got.verify, key=lambda v: v[0]) == sorted(e.verify, key=lambda v: v[0])


VARIABLES = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]),
    st.tuples(st.lists(st.integers(1, 12), min_size=0, max_size=3), st.lists(st.integers(0, 4), min_size=3,
                                                                             max_size=3)),
    min_size=1, max_size=4).map(lambda d: {k: (tuple(s), c[:len(s)]) for k, (s, c) in d.items()})


@settings(max_examples=60, deadline=None)
@given(variables=VARIABLES, writers=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_columnar_tables_equal_the_backends_extent_lists(variables, writers, seed):
    """The vectorized builders give exactly the extents (and verify lists) of the per-object code they replace."""
    rng = np.random.default_rng(seed)
    native = _meta(variables, writers, rng, stored_as_array=False)
    _same(extent_table.from_blocks(native), NativeBackend().extents(native))
    arrays = _meta(variables, writers, rng, stored_as_array=True)
    _same(extent_table.from_bands(arrays), leading_axis_bands(arrays))
    _same(extent_table.from_extents(arrays, leading_axis_bands(arrays)), leading_axis_bands(arrays))


def _simulate(table, requests_by_rank, naggr, buffer_bytes, stripe=1 << 16):
    """Run the per-rank steps of a read for every simulated rank; return per rank the deliveries
    ``[(source, round, qi, lo, shape)]`` and the aggregators' plans."""
    nranks = len(requests_by_rank)
    aggs = choose_aggregators(nranks, [r // 4 for r in range(nranks)], 80, naggr)
    owner, routing = readplan.partition(table, aggs, stripe, min_share=256)
    rows = readplan.rows_of_aggregators(owner, len(aggs))
    assert sorted(np.concatenate(rows).tolist()) == list(range(len(table)))  # every row owned exactly once
    by_var = routing.by_var()
    inbox = {a: [np.zeros((0, 2 + 2 * table.ndim), np.int64)] * nranks for a in aggs}
    records = {}
    for r, reqs in enumerate(requests_by_rank):
        records[r] = readplan.request_records(reqs, table.ndim)
        for a, recs in enumerate(readplan.route_requests(records[r], routing, by_var)):
            inbox[aggs[a]][r] = recs
    itemsizes = np.full(len(table.names), 8, np.int64)
    plans = {a: readplan.match_requests(table.take(rows[i]), inbox[a], itemsizes, buffer_bytes)
             for i, a in enumerate(aggs)}
    nrounds = max((p.nrounds for p in plans.values()), default=0)
    width = 2 + 2 * table.ndim
    incoming = {r: [np.zeros((0, width), np.int64)] * nranks for r in range(nranks)}
    for a, plan in plans.items():
        for rnd in plan.rounds:
            assert sum(plan.parts[p].nbytes for p in rnd) <= max(buffer_bytes, max(plan.parts[p].nbytes for p in rnd))
        for dest, desc in enumerate(plan.descriptors_for(nranks)):
            incoming[dest][a] = desc
    delivered = {r: [] for r in range(nranks)}
    for dest in range(nranks):
        for src_round in readplan.parse_descriptors(incoming[dest], table.ndim, nrounds):
            for src, got in src_round.items():
                delivered[dest].extend((src, row[0], row[1:1 + table.ndim], row[1 + table.ndim:]) for row in got)
    return delivered, records


@settings(max_examples=90, deadline=None)  # 30 per threshold
@given(variables=VARIABLES, writers=st.integers(1, 12), readers=st.integers(1, 40), naggr=st.integers(1, 9),
       seed=st.integers(0, 2**16), buffer_bytes=st.sampled_from([64, 512, 1 << 20]), few=st.sampled_from([0, 2, 16]))
def test_every_requested_element_delivered_exactly_once(variables, writers, readers, naggr, seed, buffer_bytes, few):
    """``few``: the planner's threshold between variables whose requests meet every extent at once and those
    searched by a window of sorted offsets (0: every variable searched, 16: the default)."""
    saved, readplan._FEW_EXTENTS = readplan._FEW_EXTENTS, few
    try:
        _delivered_once(variables, writers, readers, naggr, seed, buffer_bytes)
    finally:
        readplan._FEW_EXTENTS = saved


def _delivered_once(variables, writers, readers, naggr, seed, buffer_bytes) -> None:
    rng = np.random.default_rng(seed)
    meta = _meta(variables, writers, rng, stored_as_array=bool(seed % 2))
    table = extent_table.from_bands(meta) if seed % 2 else extent_table.from_blocks(meta)
    names = table.names
    requests = []
    for _ in range(readers):
        reqs = []
        for _ in range(int(rng.integers(0, 3))):
            v = int(rng.integers(len(names)))
            shape = meta["variables"][names[v]]["shape"]
            lo = [int(rng.integers(0, n + 1)) for n in shape]
            shp = [int(rng.integers(0, n - a + 1)) for a, n in zip(lo, shape, strict=True)]
            pad_lo, pad_shape = np.zeros(table.ndim, np.int64), np.ones(table.ndim, np.int64)
            pad_lo[:len(lo)], pad_shape[:len(shp)] = lo, shp
            reqs.append((v, pad_lo, pad_shape))
        requests.append(reqs)
    delivered, _ = _simulate(table, requests, naggr, buffer_bytes)
    check_delivered_once(requests, delivered, range(readers))


def check_delivered_once(requests, delivered, ranks) -> None:
    """Every element of every request of ``ranks`` arrived exactly once."""
    for r in ranks:
        for qi, (_v, lo, shape) in enumerate(requests[r]):
            hits = np.zeros(shape, np.int32)
            for _src, q, plo, pshape in delivered[r]:
                if q == qi:
                    hits[tuple(slice(a - b, a - b + n) for a, b, n in zip(plo, lo, pshape, strict=True))] += 1
            assert (hits == 1).all(), f"rank {r} request {qi}: delivered {hits.min()}..{hits.max()} times"


def test_partition_spreads_every_large_variable_over_all_aggregators():
    """Reading any one variable keeps every aggregator busy: each variable larger than A shares is cut into A
    byte-balanced runs; small variables rotate over the aggregators whole."""
    rng = np.random.default_rng(0)
    meta = _meta({"big": ((64, 32), [63, 0]), "tiny": ((2,), [0]), "t2": ((3,), [0])}, 64, rng, False)
    table = extent_table.from_blocks(meta)
    owner, routing = readplan.partition(table, list(range(8)), 1 << 16, min_share=1024)
    big = table.var == table.names.index("big")
    per_agg = np.bincount(owner[big], weights=table.nbytes[big], minlength=8)
    assert (per_agg > 0).all() and per_agg.max() <= 1.5 * per_agg.mean()
    assert len(routing.run_var) == 8 + 2


def _partition_variable_by_variable(table, aggregators, stripe_unit, min_share=1):
    """readplan.partition as it was written first, one variable at a time: the reference of the vectorized one."""
    naggr = max(1, len(aggregators))
    owner = np.zeros(len(table), np.int32)
    run_var, run_agg, run_lo, run_hi = [], [], [], []
    order = np.argsort(table.var, kind="stable")  # rows by variable, file order within one
    vars_, starts = np.unique(table.var[order], return_index=True)
    ends = np.append(starts[1:], len(order))[:len(starts)]
    first = 0
    for v, s, e in zip(vars_.tolist(), starts.tolist(), ends.tolist(), strict=True):
        rows = order[s:e]
        sizes = table.nbytes[rows]
        total = int(sizes.sum())
        k = int(max(1, min(naggr, len(rows), total // max(min_share, 1))))
        cuts = readplan._cut_points(sizes, table.file_offset[rows], k, stripe_unit)
        for j in range(k):
            run = rows[cuts[j]:cuts[j + 1]]
            if not len(run):
                continue
            agg = (first + j) % naggr
            owner[run] = agg
            run_var.append(v)
            run_agg.append(agg)
            run_lo.append(table.lo[run].min(axis=0))
            run_hi.append((table.lo[run] + table.shape[run]).max(axis=0))
        first = (first + k) % naggr
    nd = table.ndim
    routing = readplan.Routing(np.asarray(aggregators, np.int32), np.array(run_var, np.int32),
                               np.array(run_agg, np.int32), np.array(run_lo, np.int64).reshape(-1, nd),
                               np.array(run_hi, np.int64).reshape(-1, nd), nd)
    return owner, routing


@settings(max_examples=60, deadline=None)
@given(variables=VARIABLES, writers=st.integers(1, 9), naggr=st.integers(1, 9), seed=st.integers(0, 2**16),
       min_share=st.sampled_from([1, 64, 4096]))
def test_partition_deals_the_same_runs_as_variable_by_variable(variables, writers, naggr, seed, min_share):
    """The vectorized partition (variables of one run dealt at once) gives every row the owner, and the routing
    the runs, of the loop over variables it replaced."""
    rng = np.random.default_rng(seed)
    meta = _meta(variables, writers, rng, stored_as_array=bool(seed % 2))
    table = extent_table.from_bands(meta) if seed % 2 else extent_table.from_blocks(meta)
    aggs = list(range(0, 2 * naggr, 2))
    owner, routing = readplan.partition(table, aggs, 64, min_share)
    want_owner, want = _partition_variable_by_variable(table, aggs, 64, min_share)
    assert (owner == want_owner).all()
    for key in ("aggregators", "run_var", "run_agg", "run_lo", "run_hi"):
        got, expected = getattr(routing, key), getattr(want, key)
        assert got.dtype == expected.dtype and got.shape == expected.shape and (got == expected).all(), key


def _route_one_by_one(records, routing, nd):
    """The routing rule request by request (what route_requests did before it handled all requests at once)."""
    dest = [[] for _ in routing.aggregators]
    for i in range(len(records)):
        lo, shape = records[i, 2:2 + nd], records[i, 2 + nd:]
        if not (shape > 0).all():
            continue
        runs = np.flatnonzero(routing.run_var == records[i, 1])
        hit = (routing.run_lo[runs] < lo + shape).all(axis=1) & (lo < routing.run_hi[runs]).all(axis=1)
        for a in np.unique(routing.run_agg[runs[hit]]).tolist():
            dest[a].append(i)
    return [records[np.array(d, np.int64)] if d else np.zeros((0, records.shape[1]), np.int64) for d in dest]


@settings(max_examples=60, deadline=None)
@given(variables=VARIABLES, writers=st.integers(1, 9), naggr=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_requests_route_to_the_same_aggregators_as_one_by_one(variables, writers, naggr, seed):
    """route_requests handles every request of a read at once (one set of (request, run) pairs): each aggregator
    gets the same records in the same order as the rule applied request by request, empty requests and a
    variable without runs included."""
    rng = np.random.default_rng(seed)
    meta = _meta(variables, writers, rng, stored_as_array=bool(seed % 2))
    table = extent_table.from_bands(meta) if seed % 2 else extent_table.from_blocks(meta)
    aggs = choose_aggregators(naggr, list(range(naggr)), 80, naggr)
    _owner, routing = readplan.partition(table, aggs, 1 << 6, min_share=64)
    nd = table.ndim
    shapes = [tuple(v["shape"]) for v in meta["variables"].values()]
    requests = []
    for _ in range(int(rng.integers(0, 16))):
        v = int(rng.integers(0, len(shapes) + 1))  # one past the last: a variable no run holds
        shape = list(shapes[v]) if v < len(shapes) else [4] * nd
        shape += [1] * (nd - len(shape))  # padded as the reader pads
        lo = np.array([int(rng.integers(0, n)) for n in shape], np.int64)
        size = np.array([int(rng.integers(0, n - o + 1)) for n, o in zip(shape, lo.tolist(), strict=True)], np.int64)
        requests.append((v, lo, size))
    records = readplan.request_records(requests, nd)
    want = _route_one_by_one(records, routing, nd)
    saved = readplan._ROUTE_PAIRS
    try:
        for batch in (saved, 1, 3):  # pairs per batch: all at once, one request at a time, a few requests
            readplan._ROUTE_PAIRS = batch
            got = readplan.route_requests(records, routing, routing.by_var())
            assert len(got) == len(want) == len(aggs) and all(np.array_equal(g, w) for g, w in
                                                              zip(got, want, strict=True)), batch
    finally:
        readplan._ROUTE_PAIRS = saved
    assert sum(len(g) for g in got) >= sum(1 for _, _, size in requests if (size > 0).all()) - sum(
        1 for v, _, _ in requests if v == len(shapes))  # every non-empty request of a stored variable goes somewhere


def test_an_extent_made_without_its_constructor_equals_the_constructors():
    """Extent.made (one per part an aggregator reads) sets the fields directly: the same extent, field by field."""
    from ckptio.model.layout import Box
    from ckptio.model.plan import Extent

    for codec, label in ((None, None), ("zstd:3", "block 3")):
        made = Extent.made("v", Box((1, 0), (2, 4)), 4096, 64, codec, label)
        built = Extent("v", Box((1, 0), (2, 4)), 4096, 64, (), None, codec, label)
        assert made == built and vars(made) == vars(built) and hash(made) == hash(built)


def test_bands_of_variables_too_long_for_the_vectorized_running_maximum():
    """Variables whose row counts times the number of variables exceed int64 (the vectorized band builder's running
    maximum, restarted per variable, would overflow) take the per-variable path, with the same bands."""
    rows = 1 << 61
    meta = {"nprocs": 2, "variables": {}}
    for k, name in enumerate(("a", "b", "c", "d")):
        blocks = [{"rank": r, "offset": [r * rows // 2], "shape": [rows // 2], "checksum": f"{k * 2 + r:016x}",
                   "file_offset": None, "stored_nbytes": rows // 2, "codec": None} for r in (1, 0)]
        meta["variables"][name] = {"dtype": "|u1", "shape": [rows], "kind": "array", "blocks": blocks,
                                   "storage": {"file_offset": 4096 + k}}
    _same(extent_table.from_bands(meta), leading_axis_bands(meta))


def test_bands_of_a_block_ending_before_row_zero_are_not_merged_across_variables():
    """A damaged document's block that ends before row 0 (what the schema checks refuse, but what from_bands may be
    given) takes the per-variable path: the vectorized running maximum restarts per variable only for ends >= 0
    (found by an outside review: the two blocks of "b" were merged into one band)."""
    def block(offset, shape):
        return {"rank": 0, "offset": [offset], "shape": [shape], "checksum": "0" * 16, "file_offset": None,
                "stored_nbytes": 0, "codec": None}

    meta = {"nprocs": 1, "variables": {
        "a": {"dtype": "|u1", "shape": [5], "kind": "array", "blocks": [block(0, 5)], "storage": {"file_offset": 4096}},
        "b": {"dtype": "|u1", "shape": [5], "kind": "array", "blocks": [block(-5, 1), block(-3, 1)],
              "storage": {"file_offset": 8192}}}}
    _same(extent_table.from_bands(meta), leading_axis_bands(meta))


@settings(max_examples=40, deadline=None)
@given(boxes=st.lists(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), min_size=0, max_size=4),
                      max_size=30), ndim=st.integers(4, 5))
def test_records_of_requests_are_the_padded_records(boxes, ndim):
    """readplan.records_of (one numpy step per number of dimensions) gives request_records of the requests padded
    one by one (offset 0, extent 1 beyond a variable's own dimensions), variables by index."""
    from ckptio.model.layout import Box
    from ckptio.model.plan import Request

    names = {f"v{i}": 7 - i for i in range(8)}
    requests = [Request(f"v{i % 8}", Box(tuple(o for o, _ in b), tuple(s for _, s in b))) for i, b in enumerate(boxes)]
    padded = []
    for q in requests:
        lo, shape = np.zeros(ndim, np.int64), np.ones(ndim, np.int64)
        lo[:q.box.ndim], shape[:q.box.ndim] = q.box.offset, q.box.shape
        padded.append((names[q.var], lo, shape))
    got = readplan.records_of(requests, names, ndim)
    assert got.dtype == np.int64 and np.array_equal(got, readplan.request_records(padded, ndim))
