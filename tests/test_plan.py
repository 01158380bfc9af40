"""Read-planner properties at up to 10,000 simulated ranks (no MPI, no data)."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptio.cli import main as cli_main
from ckptio.layout import Box
from ckptio.plan import Extent, Request, choose_aggregators, exchange_for_rank, plan_read
from ckptio.simulate import PlanScenario, simulate, split_even, split_shifted


def _tiling(n: int, writers: int, row: int, stripe: int, rng) -> list[Extent]:
    """A 2-D variable (n, row) written by ``writers`` ranks, laid out rank-major with stripe-aligned regions."""
    cuts = np.sort(rng.choice(np.arange(1, n), size=min(writers - 1, n - 1), replace=False)) if writers > 1 else []
    bounds = [0, *cuts.tolist(), n] if len(cuts) else [0, n]
    extents, pos = [], 4096
    for i in range(len(bounds) - 1):
        nbytes = (bounds[i + 1] - bounds[i]) * row * 8
        if nbytes >= stripe:
            pos = -(-pos // stripe) * stripe
        box = Box((bounds[i], 0), (bounds[i + 1] - bounds[i], row))
        extents.append(Extent("v", box, pos, nbytes, ((i, box, "0"),)))
        pos += nbytes
    return extents


def _check_delivery(plan, requests, ranks):
    for rank in ranks:
        ex = exchange_for_rank(plan, requests, rank)
        for qi, q in enumerate(requests[rank]):
            hits = np.zeros(q.box.shape, dtype=np.int32)
            for r in ex:
                for pieces in r.recv.values():
                    for p in pieces:
                        if p.request_index == qi:
                            hits[p.box.relative_to(q.box)] += 1
            assert (hits == 1).all(), f"rank {rank} request {qi}: elements delivered {hits.min()}..{hits.max()} times"


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), writers=st.integers(1, 40), readers=st.integers(1, 10_000),
       naggr=st.integers(1, 100), row=st.sampled_from([1, 16, 512]), seed=st.integers(0, 2**16),
       buffer_kib=st.sampled_from([4, 64, 1024]))
def test_every_requested_element_delivered_exactly_once(n, writers, readers, naggr, row, seed, buffer_kib):
    rng = np.random.default_rng(seed)
    stripe = 64 * 1024
    extents = _tiling(n, writers, row, stripe, rng)
    requests = []
    for _r in range(readers):
        if rng.random() < 0.3:
            requests.append([])
            continue
        a = int(rng.integers(0, n))
        b = int(rng.integers(a, n + 1))
        c = int(rng.integers(0, row))
        requests.append([Request("v", Box((a, c), (b - a, row - c)))])
    aggs = choose_aggregators(readers, [r // 8 for r in range(readers)], 80, naggr)
    plan = plan_read(extents, {"v": 8}, requests, aggs, stripe, buffer_kib * 1024)
    assert len(plan.aggregators) == min(naggr, readers)
    # domains: disjoint, in file order, each extent in exactly one aggregator's rounds
    seen = [e for rounds in plan.rounds for group in rounds for e in group]
    assert len({(e.file_offset, e.box) for e in seen}) == len(seen)
    spans = [d for d in plan.domains if d[1] > d[0]]
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    # every round fits the buffer unless one unsplittable extent is bigger
    for rounds in plan.rounds:
        for group in rounds:
            assert sum(e.nbytes for e in group) <= max(buffer_kib * 1024, max(e.nbytes for e in group))
    _check_delivery(plan, requests, rng.choice(readers, size=min(readers, 12), replace=False).tolist())


def test_aggregators_spread_one_per_node_first():
    nodes = [r // 4 for r in range(16)]  # 4 nodes of 4 ranks
    assert choose_aggregators(16, nodes, 80, 4) == [0, 4, 8, 12]
    assert choose_aggregators(16, nodes, 80, 6) == [0, 1, 4, 5, 8, 12]
    assert choose_aggregators(16, nodes, 2) == [0, 4]  # default: min(nprocs, stripe count, 80)
    assert len(choose_aggregators(10_000, [r // 48 for r in range(10_000)], 200)) == 80


def test_flash_like_domains_stripe_aligned_and_ost_load_balanced():
    s = PlanScenario(ranks=2000, nbytes=60 << 30, stripe_count=80, stripe_size=1 << 20, readers=1500)
    result = simulate(s)
    ck = result["restart"]["ckptio"]
    assert ck["ranks_opening_file"] == 80
    assert ck["bytes"]["imbalance"] <= 1.1
    assert all(lo % (1 << 20) == 0 for lo, hi in ck["domains"][1:] if hi > lo)
    naive = result["restart"]["naive"]
    assert naive["ranks_opening_file"] == 1500
    assert naive["clients"]["max"] > 10 * ck["clients"]["max"]


def test_ckptio_plan_for_the_flash_stampede_case(capsys):
    assert cli_main(["plan", "--ranks", "7620", "--bytes", "189G", "--stripe-count", "80", "--stripe-size", "1M",
                     "--json"]) == 0
    import json

    result = json.loads(capsys.readouterr().out)
    assert result["restart"]["ckptio"]["ranks_opening_file"] <= 80
    assert result["write"]["ckptio"]["ranks_opening_file"] <= 80
    assert result["restart"]["naive"]["ranks_opening_file"] == 7620
    assert result["restart"]["ckptio"]["bytes"]["imbalance"] <= 1.1


def test_decompositions_cover_everything():
    for n, p in [(10, 3), (100, 7), (7, 7), (1000, 64)]:
        for split in (split_even, split_shifted):
            parts = split(n, p)
            assert sum(c for _, c in parts) == n
            assert all(parts[i][0] + parts[i][1] == parts[i + 1][0] for i in range(p - 1))
