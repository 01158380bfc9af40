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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SCHEMES = ("single", "partner", "xor")
XOR_SET_SIZE = 8  # at most this many nodes per XOR set (SCR's default)


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
        if doc.get("scheme") not in SCHEMES:
            raise ValueError(f"unknown redundancy scheme {doc.get('scheme')!r}")
        return cls(doc["scheme"], int(doc["nprocs"]), tuple(doc["hosts"]), tuple(tuple(r) for r in doc["ranks"]),
                   tuple(doc["groups"]), tuple(tuple((str(n), int(s), c) for n, s, c in node) for node in doc["files"]),
                   tuple(doc.get("partner", ())), tuple(tuple(s) for s in doc.get("sets", ())), doc.get("note", ""))

    def node_bytes(self, node: int) -> int:
        return sum(size for _, size, _ in self.files[node])

    def set_of(self, node: int) -> tuple[int, ...]:
        return next(s for s in self.sets if node in s)

    def block_bytes(self, members: Sequence[int]) -> int:
        """``B`` of an XOR set: the largest member's node data over ``n - 1`` blocks (rounded up)."""
        n = len(members)
        return -(-max(self.node_bytes(m) for m in members) // (n - 1)) if n > 1 else 0

    def describe(self, node: int) -> str:
        return f"{self.hosts[node]} (ranks {ranges(self.ranks[node])})"


def ranges(ranks: Sequence[int]) -> str:
    if len(ranks) > 2 and ranks[-1] - ranks[0] == len(ranks) - 1:
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


def plan_layout(scheme: str, views: Sequence[tuple[str, int, str | None, Sequence[tuple[str, int, str | None]]]]
                ) -> Layout:
    """Rank 0: the layout of a staged checkpoint from every rank's ``(host, node leader, failure group, files)``.
    A node's ranks must name the same failure group (ValueError otherwise). With one node, or ``partner`` with one
    failure group only, the layout says so in ``note`` (one node: ``single``; one group: partners in it)."""
    leaders = sorted({leader for _, leader, _, _ in views})
    ranks = tuple(tuple(r for r, v in enumerate(views) if v[1] == leader) for leader in leaders)
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
    return Layout("xor", **base, sets=tuple(tuple(s) for s in xor_sets(groups)))


def partners(groups: Sequence[str]) -> tuple[list[int], str]:
    """Local: for each node, the node holding its copy: the next node (cyclically, nodes interleaved by failure
    group) in another failure group; with a single failure group, the next node, and a note saying so."""
    order = _interleaved(groups)
    n = len(order)
    out = [0] * n
    for pos, node in enumerate(order):
        nxt = next((order[(pos + d) % n] for d in range(1, n) if groups[order[(pos + d) % n]] != groups[node]), None)
        out[node] = nxt if nxt is not None else order[(pos + 1) % n]
    note = "" if len(set(groups)) > 1 else "every node is in one failure group: partners share it"
    return out, note


def xor_sets(groups: Sequence[str], size: int = XOR_SET_SIZE) -> list[list[int]]:
    """Local: the XOR sets: ``ceil(N / size)`` sets of nearly equal size (at least two nodes each), consecutive
    runs of the nodes interleaved by failure group, so a set's members are in different groups where the groups
    allow it."""
    order = _interleaved(groups)
    count = max(1, -(-len(order) // size))
    while count > 1 and len(order) // count < 2:
        count -= 1
    cuts = [len(order) * k // count for k in range(count + 1)]
    return [sorted(order[cuts[k]:cuts[k + 1]]) for k in range(count)]


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
    where: list[int] = []
    for i, rs in enumerate(layout.ranks):
        leaders = {rank_views[r][1] for r in rs}
        mates = [r for r, v in enumerate(rank_views) if v[1] in leaders]
        if len(leaders) != 1 or mates != list(rs):
            return (f"the ranks {ranges(rs)} written on {layout.hosts[i]} are not alone on one node in this job "
                    "(a node's stage serves the ranks that wrote it)")
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
    return layout.describe(i) if host == then else f"{then} (ranks {ranges(layout.ranks[i])}, now {host})"
