"""The write aggregators' file domains (ckptio.model.write_domains, issue 29 item 1), pure, at simulated rank counts:
stripe-cyclic domains give every object exactly one writer (with A = S, aggregator a the objects a, a + S, ...),
contiguous domains hand every rank's region whole to one aggregator (with A = P, its own), every byte gets one
place in one aggregator's domain at its file alignment, and what one rank computes and holds does not grow with
the number of ranks."""

from __future__ import annotations

import itertools
import pickle
import time

import numpy as np
import pytest
from ckptio.backends.mpiio import HEADER_SIZE, place_blocks, rank_spans
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptio.model.write_domains import (
    CONTIGUOUS,
    CYCLIC,
    RankDomain,
    StripeLayout,
    WriteDomains,
    balanced_groups,
    contiguous_domains,
    cyclic_count,
    cyclic_domains,
    node_ids,
    split,
)

MIB = 1 << 20


def native_spans(sizes: list[int], unit: int) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Every rank's span and its one block (offset, length) as the native placement puts one block per rank."""
    n = len(sizes)
    offsets, _end, _regions = place_blocks(np.arange(n), np.zeros(n, np.int64), np.array(sizes), unit)
    spans = rank_spans(np.arange(n), offsets, np.array(sizes, np.int64), n)
    return spans, [(int(o), int(s)) for o, s in zip(offsets, sizes, strict=True)]


def pieces_of_rank(rank: int, blocks: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    off, n = blocks[rank]
    offs, lens = ([0], [HEADER_SIZE]) if rank == 0 else ([], [])
    return [*offs, off], [*lens, n]


def all_parts(domains: WriteDomains, blocks, own: list[RankDomain] | None):
    """Every rank's cut parts: (rank, file offset, length, aggregator index, position)."""
    out = []
    for r in range(len(blocks)):
        offs, lens = pieces_of_rank(r, blocks)
        cut = domains.cut(offs, lens, own[r] if own else None)
        for o, n, a, p in zip(cut.offset.tolist(), cut.length.tolist(), cut.aggregator.tolist(),
                              cut.position.tolist(), strict=True):
            out.append((r, o, n, a, p))
    return out


def check_places(domains: WriteDomains, parts) -> None:
    """Every byte once: the parts tile the pieces; no two parts share a place in one aggregator's domain; a place
    keeps its file offset's alignment within a cell, and a part never crosses a round."""
    by_agg: dict[int, list[tuple[int, int]]] = {}
    for _r, o, n, a, p in parts:
        assert p % domains.cell == o % domains.cell, (o, p)
        assert p // domains.round_bytes == (p + n - 1) // domains.round_bytes, "a part crosses a round"
        by_agg.setdefault(a, []).append((p, p + n))
    for a, spans in by_agg.items():
        spans.sort()
        for (_, e1), (s2, _) in itertools.pairwise(spans):
            assert e1 <= s2, f"aggregator {a}: two parts share a place"


def test_split_cuts_at_every_grid_line_and_keeps_every_byte():
    piece, start, length = split(np.array([5, 100, 64]), np.array([10, 300, 0 + 1]), 64)
    got = list(zip(piece.tolist(), start.tolist(), length.tolist(), strict=True))
    assert got == [(0, 5, 10), (1, 100, 28), (1, 128, 64), (1, 192, 64), (1, 256, 64), (1, 320, 64),
                   (1, 384, 16), (2, 64, 1)]


@pytest.mark.parametrize(("nprocs", "count", "override", "expected"), [
    (4, 4, None, 4), (100, 80, None, 80), (3, 4, None, 2), (6, 4, None, 4), (8, 80, None, 8), (4, 1, None, 1),
    (8, 4, 8, 8), (8, 4, 6, 4), (8, 3, 7, 6), (5, 4, 2, 2), (16, 1, 5, 5)])
def test_cyclic_count_is_a_divisor_or_a_multiple_of_the_stripe_count(nprocs, count, override, expected):
    assert cyclic_count(nprocs, count, override) == expected


@pytest.mark.parametrize(("stripes", "per_object", "naggr"), [(4, 4, 4), (4, 1, 4), (8, 4, 2), (8, 2, 4),
                                                               (3, 4, 6), (2, 4, 8), (1, 4, 3), (6, 1, 1)])
def test_cyclic_domains_give_every_object_exactly_one_writer(stripes, per_object, naggr):
    unit = 64 << 10
    domains = WriteDomains(CYCLIC, tuple(range(naggr)), unit, 4, stripes, per_object)
    units = np.arange(stripes * per_object * naggr * 5)
    agg, index = domains.unit_owner(units)
    objects = domains.object_of(units)
    writers: dict[int, set[int]] = {}
    for o, a in zip(objects.tolist(), agg.tolist(), strict=True):
        writers.setdefault(o, set()).add(a)
    assert all(len(w) == 1 for w in writers.values()), writers
    if naggr == stripes:  # each aggregator writes one object index class
        for o, w in writers.items():
            assert w == {o % stripes}
    for a in range(naggr):  # an aggregator's units are numbered 0, 1, 2, ... in file order: dense positions
        mine = index[agg == a]
        assert mine.tolist() == list(range(len(mine)))
    assert sorted(set(agg.tolist())) == list(range(naggr)), "every aggregator gets units"


def test_cyclic_domains_cut_every_rank_at_stripe_units_with_unique_places():
    nprocs, unit = 6, 1 * MIB
    layout = StripeLayout(4, unit, 4 * unit)
    domains = cyclic_domains(nprocs, [0] * nprocs, layout, None, 8 * MIB)
    assert domains.kind == CYCLIC and domains.aggregators == (0, 1, 2, 3) and domains.cells_per_round == 8
    sizes = [5 * MIB + 12345, 0, 40 * MIB, 3 * MIB, 7, 16 * MIB]
    _spans, blocks = native_spans(sizes, 16 * MIB)
    parts = all_parts(domains, blocks, None)
    assert sum(p[2] for p in parts) == sum(sizes) + HEADER_SIZE
    for _r, o, n, a, _p in parts:
        assert o // unit == (o + n - 1) // unit, "a part crosses a stripe unit"
        assert a == (o // unit) % 4
        assert o >= HEADER_SIZE or a == 0, "the header is rank 0's to write"
    check_places(domains, parts)


def test_cyclic_aggregators_spread_one_per_node_first():
    hosts = ["a", "a", "a", "b", "b", "b", "c", "c"]
    domains = cyclic_domains(8, node_ids(hosts), StripeLayout(3, MIB, MIB), None, 64 * MIB)
    assert domains.aggregators == (0, 3, 6)


@pytest.mark.parametrize("nprocs", [1, 2, 4, 7])
def test_contiguous_domains_with_every_rank_an_aggregator_exchange_nothing(nprocs):
    sizes = [(r + 1) * 3 * MIB + r * 1000 for r in range(nprocs)]
    spans, blocks = native_spans(sizes, MIB)
    domains, own = contiguous_domains(spans, [0] * nprocs, nprocs, None, MIB, 64 * MIB)
    assert domains.kind == CONTIGUOUS and domains.aggregators == tuple(range(nprocs))
    for r in range(nprocs):
        assert own[r].aggregator == r
    parts = all_parts(domains, blocks, own)
    assert all(domains.aggregators[a] == r for r, _o, _n, a, _p in parts), "a rank's bytes left it"
    check_places(domains, parts)
    # positions start near 0 for each aggregator (no empty rounds in front of its region)
    assert all(p < domains.cell for r, o, n, a, p in parts if o == blocks[r][0] and r)


def test_contiguous_domains_balance_uneven_regions_and_skip_empty_ranks():
    sizes = [40 * MIB, 0, 2 * MIB, 2 * MIB, 0, 30 * MIB, 5 * MIB, 1 * MIB]
    spans, blocks = native_spans(sizes, MIB)
    domains, own = contiguous_domains(spans, [0] * 8, 8, 3, MIB, 8 * MIB)
    assert len(domains.aggregators) == 3 and domains.aggregators[0] == 0
    load = {a: 0 for a in range(3)}
    for r, size in enumerate(sizes):
        load[own[r].aggregator] += size
        assert spans[r][0] == spans[r][1] or own[r].aggregator in range(3)
    assert max(load.values()) <= 42 * MIB and min(load.values()) > 0, load
    members = {a: [r for r in range(8) if own[r].aggregator == a] for a in range(3)}
    for a, ranks in members.items():  # consecutive ranks, the aggregator first
        assert ranks == list(range(ranks[0], ranks[-1] + 1)) and domains.aggregators[a] == ranks[0]
    check_places(domains, all_parts(domains, blocks, own))


def test_contiguous_domains_give_each_node_its_own_aggregators():
    hosts = ["n0"] * 4 + ["n1"] * 4 + ["n2"] * 4
    sizes = [MIB] * 12
    spans, blocks = native_spans(sizes, MIB)
    domains, own = contiguous_domains(spans, node_ids(hosts), 3, None, MIB, 64 * MIB)
    assert domains.aggregators == (0, 4, 8)
    for r in range(12):  # the exchange stays inside the node
        assert hosts[domains.aggregators[own[r].aggregator]] == hosts[r]
    domains, own = contiguous_domains(spans, node_ids(hosts), 6, None, MIB, 64 * MIB)
    assert [hosts[a] for a in domains.aggregators] == ["n0", "n0", "n1", "n1", "n2", "n2"]
    assert {0, 4, 8} <= set(domains.aggregators) and {(4, 6), (8, 10)} <= set(zip(domains.aggregators[::2],
                                                                                   domains.aggregators[1::2],
                                                                                   strict=True))
    # fewer aggregators than nodes: the nodes without one go to the least loaded aggregator
    domains, own = contiguous_domains(spans, node_ids(hosts), 12, 2, MIB, 64 * MIB)
    assert domains.aggregators == (0, 4)
    assert {own[r].aggregator for r in range(8, 12)} == {1}  # n1 (4 MiB) had less than n0 (the header too)
    check_places(domains, all_parts(domains, blocks, own))


def test_balanced_groups_are_consecutive_nonempty_and_even():
    assert balanced_groups(np.array([1, 1, 1, 1]), 4) == [[0], [1], [2], [3]]
    assert balanced_groups(np.array([10, 0, 0, 10]), 2) == [[0], [1, 2, 3]] or \
        balanced_groups(np.array([10, 0, 0, 10]), 2) == [[0, 1, 2], [3]]
    assert balanced_groups(np.array([0, 0, 0]), 5) == [[0], [1], [2]]
    groups = balanced_groups(np.array([5, 1, 1, 1, 1, 1]), 2)
    assert groups == [[0], [1, 2, 3, 4, 5]]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 5 * (1 << 16)), min_size=1, max_size=12),
       stripes=st.sampled_from([1, 2, 3, 4, 8]), per_object=st.sampled_from([1, 2, 4]),
       override=st.one_of(st.none(), st.integers(1, 16)), cells=st.integers(1, 5))
def test_every_byte_has_one_place_whatever_the_layout(sizes, stripes, per_object, override, cells):
    unit = 1 << 16
    nprocs = len(sizes)
    spans, blocks = native_spans(sizes, unit)
    domains = cyclic_domains(nprocs, [0] * nprocs, StripeLayout(stripes, unit, unit * per_object), override,
                             cells * unit)
    parts = all_parts(domains, blocks, None)
    assert sum(p[2] for p in parts) == sum(sizes) + HEADER_SIZE
    check_places(domains, parts)
    cdom, own = contiguous_domains(spans, [r // 3 for r in range(nprocs)], stripes, override, unit, cells * unit)
    assert cdom.aggregators[0] == 0 and domains.aggregators[0] == 0
    cparts = all_parts(cdom, blocks, own)
    assert sum(p[2] for p in cparts) == sum(sizes) + HEADER_SIZE
    check_places(cdom, cparts)


def _one_rank_cost(nprocs: int, kind: str) -> tuple[int, int, float]:
    """(bytes of what rank 7 holds of the plan, parts it computes, seconds to cut its pieces) at ``nprocs``."""
    unit = MIB
    sizes = np.full(nprocs, 8 * MIB + 4096, np.int64)
    offsets, _end, _ = place_blocks(np.arange(nprocs), np.zeros(nprocs, np.int64), sizes, unit)
    if kind == CYCLIC:
        domains, own = cyclic_domains(nprocs, [r // 64 for r in range(nprocs)], StripeLayout(80, unit, unit), None,
                                      64 * MIB), None
    else:
        spans = rank_spans(np.arange(nprocs), offsets, sizes, nprocs)
        domains, every = contiguous_domains(spans, [r // 64 for r in range(nprocs)], 80, None, unit, 64 * MIB)
        own = every[7]
    held = len(pickle.dumps((domains, own)))
    t = time.perf_counter()
    cut = domains.cut([int(offsets[7])], [int(sizes[7])], own)
    return held, len(cut), time.perf_counter() - t


@pytest.mark.parametrize("kind", [CYCLIC, CONTIGUOUS])
def test_what_one_rank_holds_and_computes_does_not_grow_with_the_job(kind):
    small = _one_rank_cost(1_000, kind)
    large = _one_rank_cost(100_000, kind)
    assert large[0] <= small[0] + 64, (small, large)  # the plan a rank holds: O(aggregators), not O(P)
    assert large[1] == small[1]  # the parts it computes: O(its own bytes)
    assert large[2] < 0.05


def test_planning_100000_ranks_on_the_planning_rank_takes_seconds_not_minutes():
    nprocs = 100_000
    sizes = np.full(nprocs, 3 * MIB, np.int64)
    offsets, _end, _ = place_blocks(np.arange(nprocs), np.zeros(nprocs, np.int64), sizes, MIB)
    spans = rank_spans(np.arange(nprocs), offsets, sizes, nprocs)
    hosts = [f"n{r // 48}" for r in range(nprocs)]
    t = time.perf_counter()
    domains, own = contiguous_domains(spans, node_ids(hosts), 80, None, MIB, 64 * MIB)
    took = time.perf_counter() - t
    assert len(domains.aggregators) == 80 and len(own) == nprocs
    assert took < 20, took
