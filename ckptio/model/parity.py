"""Redundancy of node-local checkpoints (issue 28): which node protects which, the XOR parity arithmetic, and the
rebuild plan of a restart that lost nodes. Pure: numpy and dataclasses, no MPI, no files.

Schemes (as SCR's): ``single`` (each node's stage holds only its own ranks' pieces), ``partner`` (each node's
pieces are also copied to its *partner*, the next node in another failure group) and ``xor`` (the nodes form
*sets*; each member's *node data*, the concatenation of its ranks' piece files, is cut into ``n - 1`` blocks of
``B`` bytes, zero-padded to the largest member; member ``k`` stores the parity ``P_k``, the XOR of one block of
every other member: member ``j`` contributes its block ``(k - j - 1) mod n``. One lost member per set is rebuilt
from the others' data and parity; the parity costs ``1/(n-1)`` of the largest member's data per node).

The parity is computed on a ring (SCR's XOR): at step ``s`` (``0 .. n-2``) member ``j`` XORs its block
:func:`ring_block` ``(s, n)`` into the partial it received from its left neighbour and passes it right; after
``n - 1`` passes each member holds its own parity. Member ``m``'s block ``b`` is rebuilt as
``P_k ^ XOR_{j not in (k, m)} D_j[(k - j - 1) mod n]`` with ``k = (m + b + 1) mod n`` (:func:`rebuild_sources`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ckptio.model.agreement import rank_runs

SCHEMES = ("single", "partner", "xor")
XOR_SET_SIZE = 8  # at most this many nodes per XOR set (SCR's default)
_PIECE_FILE = re.compile(r"rank-\d{6}-of-\d{6}\.(data|json)")  # ckptio.tiers.stage_files.piece_names


@dataclass(frozen=True)
class Layout:
    """Where a staged checkpoint's pieces and its redundancy are: recorded on every node (``level.json``).

    ``hosts[i]``/``ranks[i]``/``groups[i]``: writing node ``i`` (nodes in the order of their lowest rank), its ranks
    and its failure group. ``files[i]``: its node data, ``[name, size, checksum or None]`` per file in stream order
    (each rank's data file, then its manifest, whose xxh3 is recorded). ``partner[i]``: the node holding node
    ``i``'s copy (``partner``); ``sets``: the XOR sets as lists of node indices (``xor``)."""

    scheme: str
    nprocs: int
    hosts: tuple[str, ...]
    ranks: tuple[tuple[int, ...], ...]
    groups: tuple[str, ...]
    files: tuple[tuple[tuple[str, int, str | None], ...], ...]
    partner: tuple[int, ...] = ()
    sets: tuple[tuple[int, ...], ...] = ()
    note: str = ""  # why the scheme is weaker than asked (one node; one failure group)

    def to_json(self) -> dict[str, Any]:
        return {"scheme": self.scheme, "nprocs": self.nprocs, "hosts": list(self.hosts),
                "ranks": [list(r) for r in self.ranks], "groups": list(self.groups),
                "files": [[list(f) for f in node] for node in self.files], "partner": list(self.partner),
                "sets": [list(s) for s in self.sets], "note": self.note}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Layout:
        """A layout read from a ``level.json``; ValueError saying what is wrong with a damaged one (its file names
        are checked too: a rebuild creates files of those names)."""
        try:
            if doc.get("scheme") not in SCHEMES:
                raise ValueError(f"unknown redundancy scheme {doc.get('scheme')!r}")
            out = cls(doc["scheme"], int(doc["nprocs"]), tuple(map(str, doc["hosts"])),
                      tuple(tuple(map(int, r)) for r in doc["ranks"]), tuple(map(str, doc["groups"])),
                      tuple(tuple((str(n), int(s), c) for n, s, c in node) for node in doc["files"]),
                      tuple(map(int, doc.get("partner", ()))), tuple(tuple(map(int, s)) for s in doc.get("sets", ())),
                      str(doc.get("note", "")))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"damaged layout record: {type(exc).__name__}: {exc}") from None
        nodes = len(out.hosts)
        if not (len(out.ranks) == len(out.groups) == len(out.files) == nodes) or nodes == 0:
            raise ValueError("damaged layout record: hosts, ranks, groups and files differ in length")
        if any(not 0 <= p < nodes for p in out.partner) or any(not 0 <= m < nodes for s in out.sets for m in s):
            raise ValueError("damaged layout record: a partner or set member is not a node")
        bad = [n for node in out.files for n, _, _ in node if not _PIECE_FILE.fullmatch(n)]
        if bad:
            raise ValueError(f"damaged layout record: {bad[0]!r} is not a piece file name")
        return out

    def node_bytes(self, node: int) -> int:
        return sum(size for _, size, _ in self.files[node])

    def set_of(self, node: int) -> tuple[int, ...]:
        return next(s for s in self.sets if node in s)

    def block_bytes(self, members: Sequence[int]) -> int:
        """``B`` of an XOR set: the largest member's node data over ``n - 1`` blocks (rounded up)."""
        n = len(members)
        return -(-max(self.node_bytes(m) for m in members) // (n - 1)) if n > 1 else 0

    def describe(self, node: int) -> str:
        return f"{self.hosts[node]} (ranks {rank_runs(self.ranks[node])})"


def plan_layout(scheme: str, views: Sequence[tuple[str, int, str | None, Sequence[tuple[str, int, str | None]]]]
                ) -> Layout:
    """Rank 0: the layout of a staged checkpoint from every rank's ``(host, node leader, failure group, files)``.
    A node's ranks must name the same failure group (ValueError otherwise). With one node, or ``partner`` with one
    failure group only, the layout says so in ``note`` (one node: ``single``; one group: partners in it)."""
    by_leader: dict[int, list[int]] = {}
    for r, v in enumerate(views):  # one pass: O(ranks), not O(ranks x nodes)
        by_leader.setdefault(v[1], []).append(r)
    leaders = sorted(by_leader)
    ranks = tuple(tuple(by_leader[leader]) for leader in leaders)
    hosts = tuple(views[leader][0] for leader in leaders)
    groups = []
    for i, rs in enumerate(ranks):
        named = {views[r][2] for r in rs}
        if len(named) > 1:
            raise ValueError(f"failure_group differs between the ranks of node {hosts[i]}: "
                             f"{sorted(map(str, named))}; give every rank of a node the same one")
        g = named.pop()
        groups.append(hosts[i] if g is None else str(g))
    files = tuple(tuple(tuple(f) for r in rs for f in views[r][3]) for rs in ranks)  # type: ignore[misc]
    base = {"nprocs": len(views), "hosts": hosts, "ranks": ranks, "groups": tuple(groups), "files": files}
    if scheme == "single":
        return Layout("single", **base)
    if len(hosts) < 2:
        return Layout("single", **base, note=f"{scheme} needs at least two nodes; the job runs on one ({hosts[0]})")
    if scheme == "partner":
        partner, note = partners(groups)
        return Layout("partner", **base, partner=tuple(partner), note=note)
    sets, note = xor_sets(groups)
    return Layout("xor", **base, sets=tuple(tuple(s) for s in sets), note=note)


def partners(groups: Sequence[str]) -> tuple[list[int], str]:
    """Local: for each node, the node holding its copy. A permutation (every node holds exactly one other node's
    copy, so each pays the same 100 %): the nodes in order of their failure group, largest group first, each
    partnered with the node as many places further on as the largest group has nodes, cyclically. A node's
    partner is then in another group whenever the largest group holds at most half the nodes; otherwise, or with
    a single group, ``note`` says how many copies stay in their own group."""
    n = len(groups)
    by_group: dict[str, list[int]] = {}
    for node, g in enumerate(groups):
        by_group.setdefault(g, []).append(node)
    order = [node for members in sorted(by_group.values(), key=lambda m: (-len(m), m[0])) for node in members]
    largest = max(map(len, by_group.values()))
    shift = largest if largest < n else 1
    out = [0] * n
    for pos, node in enumerate(order):
        out[node] = order[(pos + shift) % n]
    if len(by_group) == 1:
        return out, "every node is in one failure group: partners share it"
    shared = sum(groups[out[i]] == groups[i] for i in range(n))
    note = "" if not shared else (f"failure group {groups[order[0]]!r} holds {largest} of the {n} nodes: "
                                  f"{shared} of them keep their partner copy in that group")
    return out, note


def xor_sets(groups: Sequence[str], size: int = XOR_SET_SIZE) -> tuple[list[list[int]], str]:
    """Local: the XOR sets (each survives the loss of one member) and a note when a set holds two nodes of one
    failure group. Without groups of several nodes: ``ceil(N / size)`` sets of nearly equal size (at least two
    nodes each), consecutive runs of the nodes. With them (a rack holds several nodes), a set takes at most one
    node of each group where it can, as SCR's failure domains: sets of ``min(size, groups)`` members, the nodes
    dealt to the sets group by group, largest group first, so a lost group costs each set one member."""
    n = len(groups)
    by_group: dict[str, list[int]] = {}
    for node, g in enumerate(groups):
        by_group.setdefault(g, []).append(node)
    singletons = max(map(len, by_group.values())) == 1
    width = size if singletons else min(size, len(by_group))
    count = max(1, -(-n // max(width, 2)))
    while count > 1 and n // count < 2:
        count -= 1
    if singletons:  # every group one node: consecutive runs, as the nodes come
        order = _interleaved(groups)
        cuts = [n * k // count for k in range(count + 1)]
        return [sorted(order[cuts[k]:cuts[k + 1]]) for k in range(count)], ""
    sets: list[list[int]] = [[] for _ in range(count)]
    order = [node for members in sorted(by_group.values(), key=lambda m: (-len(m), m[0])) for node in members]
    for k, node in enumerate(order):
        sets[k % count].append(node)
    crowded = [s for s in sets if len({groups[i] for i in s}) < len(s)]
    note = "" if not crowded else (f"{len(crowded)} of {count} XOR sets hold two nodes of one failure group "
                                   "(the groups are too few or too uneven): losing that group loses those sets")
    return [sorted(s) for s in sets], note


def _interleaved(groups: Sequence[str]) -> list[int]:
    """Nodes ordered group by group in turn (first node of each group, then the second...)."""
    by_group: dict[str, list[int]] = {}
    for node, g in enumerate(groups):
        by_group.setdefault(g, []).append(node)
    lists = list(by_group.values())
    return [lst[i] for i in range(max(map(len, lists))) for lst in lists if i < len(lst)]


def ring_block(step: int, n: int) -> int:
    """Which of its ``n - 1`` blocks a member XORs in at ring step ``step`` (``0 .. n-2``)."""
    return (-step - 2) % n


def rebuild_sources(m: int, n: int) -> dict[int, list[tuple[int, str, int]]]:
    """For each surviving member ``j`` (positions in the set), what it sends to rebuild member ``m``: per block
    ``b`` of ``m`` (in order) either ``(b, "parity", 0)`` (``j`` is ``k``) or ``(b, "data", block of j)``."""
    out: dict[int, list[tuple[int, str, int]]] = {j: [] for j in range(n) if j != m}
    for b in range(n - 1):
        k = (m + b + 1) % n
        for j in out:
            out[j].append((b, "parity", 0) if j == k else (b, "data", (k - j - 1) % n))
    return out


def xor_into(target: np.ndarray, source: np.ndarray) -> None:
    """``target ^= source`` on bytes (equal lengths)."""
    np.bitwise_xor(target, source, out=target)


# --------------------------------------------------------------------------------------------- restart
@dataclass
class Rebuild:
    """What a restart must move before every rank has its piece (rank 0's plan, sent to every rank).

    ``copies``: ``(lost node, from leader rank, to leader rank)``: the partner sends its copy of the lost node's
    files. ``xor``: ``(lost node, to leader rank, [(member node, its leader rank), ...])``: the set's other members
    send their parts. ``said``: one line per rebuilt node, for the log."""

    copies: list[tuple[int, int, int]] = field(default_factory=list)
    xor: list[tuple[int, int, list[tuple[int, int]]]] = field(default_factory=list)
    said: list[str] = field(default_factory=list)


def plan_rebuild(layout: Layout | None, rank_views: Sequence[tuple[str, int, str | None]],
                 leader_views: dict[int, dict[str, Any]]) -> Rebuild | str:
    """Rank 0: how to rebuild the pieces some ranks lack, or why they cannot be.

    ``rank_views[r]``: rank ``r``'s ``(host, node leader, problem with its piece or None)``. ``leader_views``: by
    leader rank, ``{"node": writing node index or None, "copies": nodes whose partner copy verified here,
    "parity": its parity verified}``. The restart's nodes must hold the same ranks as the writing nodes (a
    node's stage serves its own ranks: N-to-M restarts read the parallel file system copy); a lost node is one
    with any rank's piece missing or damaged."""
    if layout is None:
        return "no node recorded the checkpoint's redundancy (it was staged without redundancy=)"
    if layout.nprocs != len(rank_views):
        return (f"it was written by {layout.nprocs} ranks and this job has {len(rank_views)} (node-local pieces are "
                "rebuilt for the same ranks per node; N-to-M restarts read the parallel file system copy)")
    on_node: dict[int, list[int]] = {}
    for r, v in enumerate(rank_views):  # one pass: O(ranks), not O(ranks x nodes)
        on_node.setdefault(v[1], []).append(r)
    where: list[int] = []
    for i, rs in enumerate(layout.ranks):
        leaders = {rank_views[r][1] for r in rs}
        if len(leaders) != 1 or on_node[next(iter(leaders))] != list(rs):
            now = sorted({rank_views[r][0] for r in rs})
            return (f"the ranks {rank_runs(rs)} written together on {layout.hosts[i]} are not alone on one node in "
                    f"this job (now on {', '.join(now[:4])}{' ...' if len(now) > 4 else ''}): a node's stage serves "
                    "the ranks that wrote it, so restart with the same ranks per node as the writing job")
        where.append(leaders.pop())
    lost = [i for i, rs in enumerate(layout.ranks) if any(rank_views[r][2] for r in rs)]
    plan = Rebuild()
    if lost and layout.scheme == "single":
        i = lost[0]
        return f"node {_now(layout, where, rank_views, i)} lost pieces and the scheme is single (no redundancy)"
    for i in lost:
        now = _now(layout, where, rank_views, i)
        if layout.scheme == "partner":
            p = layout.partner[i]
            if i not in leader_views.get(where[p], {}).get("copies", []):
                return (f"node {now} lost pieces and its partner copy on {rank_views[where[p]][0]} is missing or "
                        "does not match its checksums")
            plan.copies.append((i, where[p], where[i]))
            plan.said.append(f"rebuilt node {now} from its partner copy on {rank_views[where[p]][0]}")
            continue
        members = layout.set_of(i)
        others = [j for j in members if j != i]
        gone = [j for j in others if j in lost]
        if gone:
            names = ", ".join(_now(layout, where, rank_views, j) for j in [i, *gone])
            return (f"XOR set {list(layout.sets).index(members)} lost {len(gone) + 1} nodes ({names}): "
                    "one lost node per set can be rebuilt")
        bad = [j for j in others if not leader_views.get(where[j], {}).get("parity")]
        if bad:
            return (f"node {now} lost pieces and the parity of {rank_views[where[bad[0]]][0]} in its XOR set is "
                    "missing or does not match its checksum")
        plan.xor.append((i, where[i], [(j, where[j]) for j in others]))
        plan.said.append(f"rebuilt node {now} from the XOR parity of "
                         f"{', '.join(rank_views[where[j]][0] for j in others)}")
    return plan


def _now(layout: Layout, where: Sequence[int], rank_views: Sequence[tuple[str, int, str | None]], i: int) -> str:
    host = rank_views[where[i]][0]
    then = layout.hosts[i]
    return layout.describe(i) if host == then else f"{then} (ranks {rank_runs(layout.ranks[i])}, now {host})"
