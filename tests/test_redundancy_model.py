"""The pure part of multi-level checkpoints (issue 28, ckptio/model/parity.py): partner and XOR-set choice, the
ring's parity arithmetic (simulated here exactly as the ring runs it), and the restart's rebuild plan."""

from __future__ import annotations

import numpy as np
import pytest

from ckptio.model import parity
from ckptio.model.parity import Layout


def ring_parity(data: list[bytes], block: int) -> list[np.ndarray]:
    """What every member holds after coord.redundancy.xor_ring: member j passes right, receives from the left."""
    n = len(data)
    padded = [np.frombuffer(d.ljust((n - 1) * block, b"\0"), np.uint8) for d in data]

    def own(j: int, step: int) -> np.ndarray:
        b = parity.ring_block(step, n)
        return padded[j][b * block:(b + 1) * block]

    partial = [own(j, 0).copy() for j in range(n)]
    for step in range(1, n):
        got = [partial[(j - 1) % n] for j in range(n)]
        partial = [got[j] ^ own(j, step) if step < n - 1 else got[j] for j in range(n)]
    return partial


def rebuild(data: list[bytes], parities: list[np.ndarray], m: int, block: int) -> bytes:
    n = len(data)
    padded = [np.frombuffer(d.ljust((n - 1) * block, b"\0"), np.uint8) for d in data]
    acc = np.zeros((n - 1) * block, np.uint8)
    for j, parts in parity.rebuild_sources(m, n).items():
        for b, kind, blk in parts:
            src = parities[j] if kind == "parity" else padded[j][blk * block:(blk + 1) * block]
            parity.xor_into(acc[b * block:(b + 1) * block], src)
    return acc[:len(data[m])].tobytes()


@pytest.mark.parametrize("sizes", [(10, 10), (7, 0, 13), (100, 64, 64, 1), (5, 9, 2, 33, 17)])
def test_ring_parity_rebuilds_any_one_lost_member(sizes):
    rng = np.random.default_rng(len(sizes))
    data = [rng.integers(0, 256, s, np.uint8).tobytes() for s in sizes]
    n = len(data)
    block = -(-max(sizes) // (n - 1))
    parities = ring_parity(data, block)
    for k in range(n):  # member k's parity is the XOR of one block of every other member
        want = np.zeros(block, np.uint8)
        for j in range(n):
            if j != k:
                b = (k - j - 1) % n
                want ^= np.frombuffer(data[j].ljust((n - 1) * block, b"\0"), np.uint8)[b * block:(b + 1) * block]
        assert (parities[k] == want).all()
    for m in range(n):
        assert rebuild(data, parities, m, block) == data[m]
    m = int(np.argmax(sizes))
    if n > 2 and any(data[(m + 1) % n]):  # a second lost member (its data zeroed): the largest is not rebuilt
        broken = list(data)
        broken[(m + 1) % n] = bytes(len(data[(m + 1) % n]))
        assert rebuild(broken, parities, m, block) != data[m]


def test_partners_and_sets_follow_failure_groups():
    partner, note = parity.partners(["r1", "r1", "r2", "r2"])
    assert all(["r1", "r1", "r2", "r2"][partner[i]] != ["r1", "r1", "r2", "r2"][i] for i in range(4)) and not note
    assert sorted(partner) == [0, 1, 2, 3]  # everyone holds one copy
    partner, note = parity.partners(["g", "g", "g"])
    assert partner == [1, 2, 0] and "one failure group" in note
    assert parity.xor_sets(["a", "b", "c", "d"]) == ([[0, 1, 2, 3]], "")
    sets, _ = parity.xor_sets([f"n{i}" for i in range(17)])
    assert len(sets) == 3 and sorted(n for s in sets for n in s) == list(range(17)) and all(len(s) >= 5 for s in sets)
    sets, note = parity.xor_sets(["a", "a", "b", "b"], size=2)
    assert all(len({["a", "a", "b", "b"][i] for i in s}) == 2 for s in sets) and not note


@pytest.mark.parametrize("groups", [["r1"] * 3 + ["r2"], ["r1"] * 30 + ["r2"] * 2, ["a", "a", "b", "b", "c"],
                                    [f"rack{i % 4}" for i in range(13)], ["x"] * 5, [f"n{i}" for i in range(7)]])
def test_partners_are_a_permutation_whatever_the_failure_groups(groups):
    """Every node holds exactly one other node's copy (the 100 % the docs promise, on every node); a partner is in
    another group unless one group holds more than half the nodes, and then the note counts those that are not."""
    partner, note = parity.partners(groups)
    n = len(groups)
    assert sorted(partner) == list(range(n)) and all(partner[i] != i for i in range(n))
    shared = sum(groups[partner[i]] == groups[i] for i in range(n))
    largest = max(groups.count(g) for g in set(groups))
    if len(set(groups)) > 1 and largest <= n - largest:
        assert shared == 0 and not note
    elif len(set(groups)) > 1:
        assert shared > 0 and f"{shared} of them" in note


@pytest.mark.parametrize(("racks", "per_rack"), [(2, 4), (2, 8), (3, 5), (4, 4), (8, 2)])
def test_xor_sets_take_one_node_per_failure_group(racks, per_rack):
    """Racks of several nodes (failure_group=rack): each set holds at most one node of a rack, so losing a whole
    rack costs each set one member, which its parity rebuilds (two racks of 4: 4 sets of 2, not one set of 8)."""
    groups = [f"rack{i // per_rack}" for i in range(racks * per_rack)]
    sets, note = parity.xor_sets(groups)
    assert sorted(n for s in sets for n in s) == list(range(len(groups))) and all(len(s) >= 2 for s in sets)
    assert all(len({groups[i] for i in s}) == len(s) for s in sets) and not note
    for rack in set(groups):  # lose a rack: every set loses at most one member
        assert all(sum(groups[i] == rack for i in s) <= 1 for s in sets)


def test_xor_sets_say_when_the_groups_cannot_keep_a_set_apart():
    sets, note = parity.xor_sets(["r1", "r1", "r1", "r2"])
    assert sorted(n for s in sets for n in s) == [0, 1, 2, 3] and "hold two nodes of one failure group" in note


def layout(scheme: str, per_node=(2, 2, 1)) -> Layout:
    views, r = [], 0
    for i, count in enumerate(per_node):
        for _ in range(count):
            name = f"rank-{r:06d}-of-{sum(per_node):06d}"
            files = [(f"{name}.data", 10 + r, None), (f"{name}.json", 5, "x")]
            views.append((f"node{i}", sum(per_node[:i]), None, files))
            r += 1
    return parity.plan_layout(scheme, views)


def test_layout_groups_ranks_by_leader_and_round_trips():
    lay = layout("xor")
    assert lay.ranks == ((0, 1), (2, 3), (4,)) and lay.sets == ((0, 1, 2),)
    assert Layout.from_json(lay.to_json()) == lay
    assert lay.node_bytes(1) == 12 + 5 + 13 + 5 and lay.block_bytes((0, 1, 2)) == -(-35 // 2)
    one = parity.plan_layout("partner", [("solo", 0, None, []), ("solo", 0, None, [])])
    assert one.scheme == "single" and "two nodes" in one.note
    with pytest.raises(ValueError, match="failure_group differs"):
        parity.plan_layout("partner", [("a", 0, "r1", []), ("a", 0, "r2", [])])


def test_rebuild_plan_recovers_one_node_refuses_two_and_other_layouts():
    lay = layout("xor")
    ok = [("node0", 0, None), ("node0", 0, None), ("new", 2, "missing"), ("new", 2, "missing"), ("node2", 4, None)]
    leaders = {0: {"parity": True}, 2: {"parity": False}, 4: {"parity": True}}
    plan = parity.plan_rebuild(lay, ok, leaders)
    assert isinstance(plan, parity.Rebuild) and plan.xor == [(1, 2, [(0, 0), (2, 4)])]
    assert "now new" in plan.said[0]
    two = list(ok)
    two[4] = ("node2", 4, "damaged")
    assert "lost 2 nodes" in parity.plan_rebuild(lay, two, leaders)
    assert "parity of node2" in parity.plan_rebuild(lay, ok, {**leaders, 4: {"parity": False}})
    moved = [("a", 0, None), ("a", 0, None), ("a", 0, "missing"), ("b", 3, None), ("b", 3, None)]
    assert "not alone on one node" in parity.plan_rebuild(lay, moved, {})
    assert "this job has 4" in parity.plan_rebuild(lay, ok[:4], {})
    assert "without redundancy" in parity.plan_rebuild(None, ok, {})
    lay = layout("partner")
    holder = lay.ranks[lay.partner[1]][0]
    assert parity.plan_rebuild(lay, ok, {holder: {"copies": [1]}}).copies == [(1, holder, 2)]
    assert "partner copy" in parity.plan_rebuild(lay, ok, {holder: {"copies": []}})


def test_a_checkpoint_whose_exchange_no_node_completed_is_not_used():
    from ckptio.tiers.redundancy import piece_problems

    assert piece_problems([(None, True, True), (None, True, False)]) == {}  # one node recorded it: complete
    assert piece_problems([(None, False, False), ("missing", False, False)]) == {1: "missing"}  # no redundancy=
    never = piece_problems([(None, True, False), ("missing", False, False)])
    assert never[0].startswith("its redundancy exchange never completed") and never[1] == "missing"


def test_regroup_plan_gives_each_piece_a_rank_of_its_node_or_says_why():
    """ckptio.tiers.regroup.plan (pure): pieces of 3 writing ranks on nodes A, B, C; a job of 4 ranks (A twice)
    drains them numbered like the writers; one of fewer ranks on a node, or without a node, falls back."""
    from ckptio.tiers.regroup import Regroup, plan

    pieces = {"A": [(0, 3)], "B": [(1, 3)], "C": [(2, 3)]}
    views = [(h, pieces[h], True) for h in ("A", "A", "B", "C")]
    assert plan(views, 4) == Regroup(3, {0: 0, 2: 1, 3: 2})
    assert plan([(h, [(r, 4)], True) for r, h in enumerate("AABC")], 4) is None  # this job's count: usual path
    assert plan([("A", [], False)] * 2, 2) is None  # nothing staged
    two = [("A", [(0, 4), (1, 4)], True), ("B", [(2, 4)], True), ("C", [(3, 4)], True)]
    assert "node A holds 2 pieces but runs 1 rank(s)" in plan(two, 3)
    assert "rank(s) 2 are on no node of this job" in plan([(h, pieces[h], True) for h in "AB"], 2)
