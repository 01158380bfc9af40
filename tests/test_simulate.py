"""``ckptio plan``'s vectorized model against the code it models: the native layout, the restart planner's parts
and rounds, and the scale harness's directly built extent table (no MPI, no data)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.mpiio import BLOCK_ALIGN, HEADER_SIZE, NativeBackend
from ckptio.model import extent_table, readplan
from ckptio.model import meta as metamod
from ckptio.model.layout import Box
from ckptio.model.plan import choose_aggregators
from ckptio.model.variable_plan import BlockPlan, VariablePlan
from ckptio.tools import scale
from ckptio.tools.simulate import PlanScenario, aggregator_rounds, build_job, needed_rows, ost_load


def _reference_layout(variables, stripe_unit: int) -> tuple[dict[int, dict[int, int]], int, list[tuple[int, int]]]:
    """The native placement written block by block (the backend's layout before it became columnar): each
    rank's blocks in declaration order, 8-byte aligned, a region of at least one stripe starting on a stripe."""
    per_rank: dict[int, list[tuple[int, int]]] = {}
    for var in variables.values():
        for b in var.blocks:
            stored = b.stored_nbytes if b.stored_nbytes is not None else b.box.size * np.dtype(var.dtype).itemsize
            per_rank.setdefault(b.rank, []).append((b.local_index, stored))
    offsets: dict[int, dict[int, int]] = {}
    regions, pos = [], HEADER_SIZE
    align = lambda v, a: (v + a - 1) // a * a  # noqa: E731
    for rank in sorted(per_rank):
        blocks = sorted(per_rank[rank])
        if sum(align(n, BLOCK_ALIGN) for _, n in blocks) >= stripe_unit:
            pos = align(pos, stripe_unit)
        start = pos
        mine = offsets[rank] = {}
        for local_index, stored in blocks:
            pos = align(pos, BLOCK_ALIGN)
            mine[local_index] = pos
            pos += stored
        if pos > start:
            regions.append((start, pos))
    return offsets, pos, regions


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), ranks=st.integers(1, 9), nvars=st.integers(1, 4),
       stripe=st.sampled_from([8, 64, 4096, 1 << 20]))
def test_native_layout_equals_the_block_by_block_placement(seed, ranks, nvars, stripe):
    """Random blocks (some ranks with none, empty blocks, stored sizes not multiples of 8, regions below and
    above a stripe): NativeBackend.layout (columnar, place_blocks) gives the offsets, data end and regions of
    the placement computed block by block."""
    rng = np.random.default_rng(seed)
    variables = {}
    count = np.zeros(ranks, int)
    for v in range(nvars):
        dtype = ["<f8", "|i1", "<i2"][v % 3]
        blocks = []
        for r in range(ranks):
            for _ in range(int(rng.integers(0, 3))):
                n = int(rng.integers(0, 700))
                packed = int(rng.integers(1, n + 2)) if rng.random() < 0.3 else None  # "compressed"
                blocks.append(BlockPlan(r, int(count[r]), Box((0,), (n,)), packed))
                count[r] += 1
        variables[f"v{v}"] = VariablePlan.from_blocks(f"v{v}", dtype, (1000,), "array", blocks)
    want_offsets, want_end, want_regions = _reference_layout(variables, stripe)
    got = NativeBackend().place(variables, stripe, ranks)
    assert [s["offsets"] for s in got.shares] == [[want_offsets[r][i] for i in range(int(count[r]))]
                                                 for r in range(ranks)]
    assert {s["data_end"] for s in got.shares} == {want_end}
    assert got.whole["regions"] == want_regions


@settings(max_examples=25, deadline=None)
@given(ranks=st.integers(1, 40), per_rank=st.integers(1, 6), readers=st.integers(1, 60), naggr=st.integers(1, 12),
       buffer_blocks=st.sampled_from([1, 2, 3, 7, 1000]), decomposition=st.sampled_from(["blocks", "shifted"]))
def test_modelled_rounds_are_the_planners(ranks, per_rank, readers, naggr, buffer_blocks, decomposition):
    """For every aggregator, the parts and rounds ``ckptio plan`` models are those match_requests plans when
    every reader sends its requests (blocks larger than the buffer split, rounds fitting the buffer)."""
    s = PlanScenario(ranks=ranks, nbytes=(per_rank * ranks + ranks // 3) * 3 * 32768, stripe_count=8, stripe_size=65536,
                     variables=3, readers=readers, decomposition=decomposition, aggregators=naggr,
                     buffer_bytes=buffer_blocks * 32768 + 8)
    job = build_job(s)
    t = job.table
    aggs = choose_aggregators(readers, list(range(readers)), 8, naggr)
    owner, routing = readplan.partition(t, aggs, s.stripe_size)
    model = aggregator_rounds(t, needed_rows(job), owner, s.buffer_bytes)
    by_var = routing.by_var()
    inbox = [[None] * readers for _ in aggs]
    rb = job.reader_bounds
    for r in range(readers):
        recs = readplan.request_records([(v, np.array([rb[r], 0, 0, 0]), np.array([rb[r + 1] - rb[r], 16, 16, 16]))
                                         for v in range(s.variables)], 4)
        for a, got in enumerate(readplan.route_requests(recs, routing, by_var)):
            inbox[a][r] = got
    for a, rows in enumerate(readplan.rows_of_aggregators(owner, len(aggs))):
        plan = readplan.match_requests(t.take(rows), inbox[a], np.full(3, 8, np.int64), s.buffer_bytes)
        real = sorted((k, plan.parts[p].file_offset, plan.parts[p].nbytes) for k, rnd in enumerate(plan.rounds)
                      for p in rnd)
        mine = model.agg == a
        modelled = sorted(zip(model.round[mine].tolist(), model.offset[mine].tolist(), model.nbytes[mine].tolist(),
                              strict=True))
        assert modelled == real


def test_scale_harness_table_is_what_rank0_builds_from_the_document():
    doc = scale.flash_like_document(37, 37 * 24 * 3 * 32768)
    want = extent_table.from_blocks(metamod.loads(doc))
    got = scale.flash_like_table(37, 37 * 24 * 3 * 32768)
    for field in want.__dataclass_fields__:
        a, b = getattr(want, field), getattr(got, field)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b), field
        else:
            assert a == b, field


def test_ost_load_keeps_each_run_with_its_client_when_empty_runs_are_dropped():
    """An empty run before others used to shift the client column against the runs (clients miscounted)."""
    runs = np.array([[0, 0], [0, 100], [1 << 20, 100], [2 << 20, 50]], np.int64)
    got = ost_load(runs, np.array([9, 1, 1, 1]), 1 << 20, 2)
    assert got["clients_per_ost"] == [1, 1]  # client 1 alone everywhere (never the empty run's 9)
    assert got["requests_per_ost"] == [2, 1] and got["bytes_per_ost"] == [150.0, 100.0]
