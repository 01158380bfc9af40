"""Restart-planner properties at up to 10,000 simulated ranks, and ``ckptio plan`` (no MPI, no data).

The per-rank steps of :mod:`ckptio.model.readplan` (partition at open; route, match, descriptors per read) run for
every simulated rank with what the collectives would deliver (``tests/test_readplan.py``'s ``_simulate``), on a
2-D variable tiled by up to 40 writers and read by up to 10,000 ranks."""

import itertools
import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

# tests/ is on sys.path; not "tests.test_readplan": yt's dependency ewah_bool_utils installs a package named tests
from test_readplan import _simulate, check_delivered_once

from ckptio.model import extent_table, readplan
from ckptio.model.plan import choose_aggregators
from ckptio.tools.cli import main as cli_main
from ckptio.tools.simulate import PlanScenario, simulate, split_even, split_shifted


def _tiling(n: int, writers: int, row: int, stripe: int, rng) -> extent_table.ExtentTable:
    """A 2-D variable (n, row) written by ``writers`` ranks, laid out rank-major with stripe-aligned regions."""
    cuts = np.sort(rng.choice(np.arange(1, n), size=min(writers - 1, n - 1), replace=False)) if writers > 1 else []
    bounds = [0, *cuts.tolist(), n] if len(cuts) else [0, n]
    blocks, pos = [], 4096
    for i in range(len(bounds) - 1):
        nbytes = (bounds[i + 1] - bounds[i]) * row * 8
        if nbytes >= stripe:
            pos = -(-pos // stripe) * stripe
        blocks.append({"rank": i, "offset": [bounds[i], 0], "shape": [bounds[i + 1] - bounds[i], row],
                       "checksum": "0" * 16, "codec": None, "file_offset": pos, "stored_nbytes": nbytes})
        pos += nbytes
    return extent_table.from_blocks({"variables": {"v": {"dtype": "<f8", "shape": [n, row], "kind": "array",
                                                         "blocks": blocks}}})


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 300), writers=st.integers(1, 40), readers=st.integers(1, 10_000),
       naggr=st.integers(1, 100), row=st.sampled_from([1, 16, 512]), seed=st.integers(0, 2**16),
       buffer_kib=st.sampled_from([4, 64, 1024]))
def test_every_requested_element_delivered_exactly_once_at_many_ranks(n, writers, readers, naggr, row, seed,
                                                                      buffer_kib):
    rng = np.random.default_rng(seed)
    table = _tiling(n, writers, row, 64 * 1024, rng)
    requests = []
    for _r in range(readers):
        if rng.random() < 0.3:
            requests.append([])
            continue
        a = int(rng.integers(0, n))
        b = int(rng.integers(a, n + 1))
        c = int(rng.integers(0, row))
        requests.append([(0, np.array([a, c]), np.array([b - a, row - c]))])
    # _simulate checks: every row owned by exactly one aggregator, every round within the buffer
    delivered, _ = _simulate(table, requests, naggr, buffer_kib * 1024, stripe=64 * 1024)
    assert len({src for got in delivered.values() for src, *_ in got}) <= min(naggr, readers)
    check_delivered_once(requests, delivered, rng.choice(readers, size=min(readers, 12), replace=False).tolist())


def test_partition_gives_contiguous_stripe_aligned_domains_for_one_variable():
    """One variable, 64 writers, 8 aggregators: each aggregator owns one contiguous file run, cut where a writer's
    stripe-aligned region starts, and the runs are balanced by bytes."""
    table = _tiling(6400, 64, 512, 64 * 1024, np.random.default_rng(1))
    aggs = choose_aggregators(64, [r // 8 for r in range(64)], 8)
    owner, routing = readplan.partition(table, aggs, 64 * 1024)
    sizes = []
    for a, rows in enumerate(readplan.rows_of_aggregators(owner, len(aggs))):
        assert (np.diff(rows) == 1).all(), f"aggregator {a} does not own a contiguous run of extents"
        assert a == 0 or table.file_offset[rows[0]] % (64 * 1024) == 0
        sizes.append(int(table.nbytes[rows].sum()))
    assert max(sizes) <= 1.5 * table.nbytes_total / len(aggs)
    assert len(routing.run_var) == len(aggs)


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
    spans = sorted(d for d in ck["domains"] if d[1] > d[0])
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))  # disjoint domains
    assert ck["rounds"] >= 60 * 1024 / 80 / 64  # each aggregator reads its 768 MiB in 64 MiB rounds
    naive = result["restart"]["naive"]
    assert naive["ranks_opening_file"] == 1500
    assert naive["clients"]["max"] > 10 * ck["clients"]["max"]
    assert naive["bytes"]["mean"] == ck["bytes"]["mean"]  # both read the whole file once


def test_ckptio_plan_for_the_flash_stampede_case(capsys):
    assert cli_main(["plan", "--ranks", "7620", "--bytes", "189G", "--stripe-count", "80", "--stripe-size", "1M",
                     "--json", "--open-max-ranks", "1000"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["restart"]["ckptio"]["ranks_opening_file"] <= 80
    assert result["write"]["ckptio"]["ranks_opening_file"] <= 80
    assert result["restart"]["naive"]["ranks_opening_file"] == 7620
    assert result["restart"]["ckptio"]["bytes"]["imbalance"] <= 1.1
    cp = result["control_plane"]
    assert cp["ranks"] == 7620 and cp["blocks"] == 7620 * 24 and cp["aggregators"] == 80
    assert cp["rank0_open"]["extrapolated"]
    assert cp["rank0_open_parts"]["parse_validate_table"]["measured_at_ranks"] == 1000
    for step in ("rank0_open", "aggregator_per_read", "any_rank_per_read"):
        assert cp[step]["seconds"] > 0 and cp[step]["peak_MiB"] >= 0
    assert cp["broadcast_to_every_rank_bytes"] < 1 << 20  # O(variables x aggregators), not O(ranks)


def test_ckptio_plan_reports_the_control_plane_in_text_and_can_skip_it(capsys):
    assert cli_main(["plan", "--ranks", "300", "--bytes", "2G"]) == 0
    text = capsys.readouterr().out
    assert "RESTART CONTROL PLANE per rank" in text and "EXTRAPOLATED" not in text
    assert "one aggregator per read" in text and "any other rank per read" in text
    assert cli_main(["plan", "--ranks", "300", "--bytes", "2G", "--open-max-ranks", "100"]) == 0
    text = capsys.readouterr().out
    assert "EXTRAPOLATED" in text and "measured at 100 ranks (2400 blocks)" in text
    assert cli_main(["plan", "--ranks", "300", "--bytes", "2G", "--no-control-plane", "--json"]) == 0
    assert "control_plane" not in json.loads(capsys.readouterr().out)


def test_decompositions_cover_everything():
    for n, p in [(10, 3), (100, 7), (7, 7), (1000, 64)]:
        for split in (split_even, split_shifted):
            parts = split(n, p)
            assert sum(c for _, c in parts) == n
            assert all(parts[i][0] + parts[i][1] == parts[i + 1][0] for i in range(p - 1))
