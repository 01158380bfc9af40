"""Multi-level checkpoints (issue 28): redundancy of node-local staged checkpoints across nodes, and their rebuild.

A :class:`~ckptio.Series` with ``stage_dir=`` and ``redundancy=`` (``"single"``, ``"partner"``, ``"xor"``, see
:mod:`ckptio.model.parity`) stages every checkpoint to the node-local level and protects it there; with
``drain_every=k`` only every k-th is also drained to the parallel file system.

Write (:func:`protect`, collective, in the staged ``close()`` right after every rank wrote its piece):

1. rank 0 plans the :class:`~ckptio.model.parity.Layout` from every rank's node, node leader, failure group and
   piece files (sizes, the manifest's xxh3);
2. node leaders exchange (:mod:`ckptio.coord.redundancy`, point-to-point in chunks on a duplicate communicator):
   ``partner``: each node's files go to its partner, which writes them to ``<token>/redundancy/partner-<i>/`` in
   its own stage; ``xor``: the parity passes around each set's ring and lands in ``<token>/redundancy/xor.parity``,
   its xxh3 computed as it is written;
3. every node leader writes ``<token>/redundancy/level.json`` (the layout, its node, its parity's checksum):
   the checkpoint is complete at the node-local level. Any failure is agreed and removes the checkpoint's
   pieces on every node (a staged checkpoint without its redundancy is not left behind as if it were whole).

Restart (:func:`rebuild`, collective, from :func:`ckptio.tiers.staging.recover` when some rank's piece is missing
or damaged): each node leader reports the layout it recorded and which redundancy it holds intact (partner copies
verified against every block checksum and the manifests' xxh3; its parity against its xxh3); rank 0 plans the
rebuild (:func:`ckptio.model.parity.plan_rebuild`) or says why it cannot be done; the leaders move the bytes and
the lost node's leader writes the files back (temporary names, renamed once all arrived); the caller then verifies
every rank's piece again before draining it.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio import _warn, coord
from ckptio.coord import comms
from ckptio.coord import redundancy as wire
from ckptio.engine import faults
from ckptio.errors import CheckpointError, CorruptCheckpointError, DeclarationError
from ckptio.model import meta as metamod
from ckptio.model import parity
from ckptio.model.parity import Layout
from ckptio.tiers.stage_files import naming, read_piece
from ckptio.tiers.streams import Concat, Spill, own_files, pwrite_all

SUBDIR = "redundancy"
LEVEL = "level.json"
PARITY = "xor.parity"
_TAG_PROTECT, _TAG_REBUILD = 11, 12


@dataclass(frozen=True)
class StagePolicy:
    """What a Series asks of one staged checkpoint: its redundancy scheme, whether it is drained to the parallel
    file system, and this rank's failure group (None: its node is its own group)."""

    scheme: str
    drain: bool
    group: str | None = None


def check_policy(redundancy: object, drain_every: object, failure_group: object, stage_dir: object) -> None:
    """Local: a DeclarationError for a bad ``redundancy=``/``drain_every=``/``failure_group=`` of a Series."""
    if redundancy is not None and redundancy not in parity.SCHEMES:
        raise DeclarationError(f"redundancy={redundancy!r}: must be one of {', '.join(map(repr, parity.SCHEMES))}")
    if not isinstance(drain_every, int) or isinstance(drain_every, bool) or drain_every < 1:
        raise DeclarationError(f"drain_every={drain_every!r}: must be an int of at least 1")
    if failure_group is not None and (isinstance(failure_group, bool) or not isinstance(failure_group, (str, int))):
        raise DeclarationError(f"failure_group={failure_group!r}: must be a string or an int (e.g. the rack)")
    if stage_dir is None and (redundancy is not None or drain_every != 1):
        raise DeclarationError("redundancy= and drain_every= need stage_dir= (the node-local level they apply to)")


# -------------------------------------------------------------------------------------------- protect
def protect(comm, info: Any, directory: str, policy: StagePolicy) -> Layout | None:
    """Collective over ``comm`` (every rank wrote its piece of ``directory``; ``info``: the stage, as
    :func:`ckptio.tiers.staging.locate` found it): plan the layout, exchange the redundancy between node leaders,
    write every node's ``level.json``. Raises the same error on every rank; the caller removes the pieces.
    Returns the layout on node leaders, None on the other ranks."""
    rank, nprocs = comm.Get_rank(), comm.Get_size()
    leader = 0 if info.shared else coord.node_leader(comm)  # a shared stage: one "node", no redundancy
    phase = f"stage {info.directory}: redundancy {policy.scheme}"

    planned: list[Layout] = []  # rank 0

    def plan(views: list[Any]) -> None:
        try:
            layout = parity.plan_layout("single" if info.shared else policy.scheme, views)
        except ValueError as exc:
            raise DeclarationError(str(exc)) from None
        if info.shared and policy.scheme != "single":
            layout = Layout(**{**layout.__dict__, "note": f"the stage is shared by every node: no {policy.scheme} "
                               "redundancy across nodes"})
        planned.append(layout)

    coord.gather_and_plan(comm, f"{phase}: layout",
                          lambda: (info.host, leader, policy.group, own_files(directory, rank, nprocs)), plan)
    # only node leaders receive the layout (O(ranks) of the job); the other ranks take no part in the exchange
    def to_leaders() -> list[Any]:  # one JSON form, the same object for every leader; the leader set built once
        text, leaders = planned[0].to_json(), {rs[0] for rs in planned[0].ranks}
        return [text if r in leaders else None for r in range(nprocs)]

    given = coord.scatter_from_root(comm, f"{phase}: the layout to node leaders", to_leaders)
    layout = None if given is None else Layout.from_json(given)
    note = planned[0].note if planned else ""  # rank 0's, given inside the agreed prepare step below
    node = None if layout is None else next(i for i, rs in enumerate(layout.ranks) if rs[0] == rank)
    red = os.path.join(directory, SUBDIR)
    p2p = comms.duplicate(comm)
    try:
        digest: list[str | None] = [None]
        exchange = None

        def prepare() -> None:  # the files written by the exchange exist before any byte moves
            nonlocal exchange
            if note:  # rank 0 only; inside the agreed step, so a warnings filter's exception fails every rank
                _warn.warn(f"ckptio: redundancy={policy.scheme!r}: {note}", RuntimeWarning)
            if node is not None and layout is not None and layout.scheme != "single":
                exchange = _prepare(p2p, layout, node, directory, red, digest)

        coord.run(comm, f"{phase}: prepare", prepare)
        faults.point("redundancy exchange", comm)
        error = None
        if exchange is not None:
            try:
                error = exchange()
            except BaseException as exc:  # agreed below (the wire functions themselves do not raise)
                error = exc
        coord.agree(comm, f"{phase}: exchange", error)

        def level() -> None:
            if node is not None and layout is not None:
                _write_json(os.path.join(red, LEVEL), {"level": layout.to_json(), "node": node,
                                                       "parity": digest[0], "time_ns": time.time_ns()})

        coord.run(comm, f"{phase}: mark the level complete", level)
    finally:
        comms.free(p2p)
    return layout


def _prepare(p2p, layout: Layout, node: int, directory: str, red: str, digest: list[str | None]) -> Any:
    """Local, a node leader: create the files its part of the write exchange fills; returns the exchange (every
    leader calls one of the two wire functions), run once every rank prepared."""
    mine = Concat(directory, layout.files[node])
    os.makedirs(red, exist_ok=True)

    def landed(write: Any) -> Any:  # a received chunk's writer, with the fault point after the first one
        def chunk(offset: int, data: np.ndarray) -> None:
            write(offset, data)
            if offset == 0:
                faults.point("redundancy chunk", p2p)
        return chunk

    if layout.scheme == "partner":
        sends = [(layout.ranks[layout.partner[node]][0], mine.size, mine.read)]
        recvs = [(layout.ranks[j][0], layout.node_bytes(j),
                  landed(Spill(os.path.join(red, f"partner-{j}"), layout.files[j], False).write))
                 for j, p in enumerate(layout.partner) if p == node]
        return lambda: wire.transfer(p2p, sends, recvs, _TAG_PROTECT)
    members = layout.set_of(node)
    n, pos = len(members), members.index(node)
    block = layout.block_bytes(members)
    path = os.path.join(red, PARITY)
    open(path, "wb").close()
    sum_ = metamod.StreamingChecksum()

    def done(offset: int, data: np.ndarray) -> None:
        pwrite_all(path, data, offset)
        sum_.update(data)  # chunks arrive in order
        digest[0] = sum_.hexdigest()

    digest[0] = sum_.hexdigest()
    return lambda: wire.xor_ring(p2p, layout.ranks[members[pos - 1]][0], layout.ranks[members[(pos + 1) % n]][0],
                                 n, block, lambda step, lo, cnt: mine.read(parity.ring_block(step, n) * block + lo,
                                                                           cnt), landed(done), _TAG_PROTECT)


def _write_json(path: str, doc: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def discard(directory: str) -> None:
    """Local, a node leader: remove a checkpoint's redundancy files (after a failed :func:`protect`)."""
    shutil.rmtree(os.path.join(directory, SUBDIR), ignore_errors=True)


# -------------------------------------------------------------------------------------------- rebuild
def completed(directory: str) -> bool:
    """Local: this node recorded the staged checkpoint ``directory`` complete at the node-local level (its
    ``level.json``, written by every node leader only after the whole exchange succeeded)."""
    return os.path.exists(os.path.join(directory, SUBDIR, LEVEL))


def piece_problems(found: list[tuple[str | None, bool, bool]]) -> dict[int, str]:
    """Rank 0: by rank, what is wrong with a staged checkpoint's pieces (every rank's ``(problem, manifest asks
    for redundancy, node completed it)``). A checkpoint written with redundancy that no node completed (the job
    ended inside ``close()``, during the exchange) is not used, whatever pieces are there."""
    out = {r: p for r, (p, _, _) in enumerate(found) if p}
    if any(asks for _, asks, _ in found) and not any(done for _, _, done in found):
        why = "its redundancy exchange never completed (the job ended inside close())"
        out = {r: p or why for r, (p, _, _) in enumerate(found)}
    return out


def rebuild(comm, directory: str, final: str, problems: dict[int, str]) -> str | None:
    """Collective over ``comm``: rebuild the missing or damaged pieces of the staged checkpoint ``directory``
    (``problems``: by rank, agreed) from the redundancy the nodes hold. Returns None once the bytes are back
    (the caller verifies every piece again), or why they cannot be (nothing was changed then). Rank 0 warns
    saying what it rebuilt from where."""
    rank, nprocs = comm.Get_rank(), comm.Get_size()
    leader = coord.node_leader(comm)
    from ckptio.tiers.stage_files import host_name

    host = host_name()

    kept: list[Any] = []  # rank 0: every rank's view (no rank but rank 0 receives O(P))

    def source(views: list[Any]) -> int | None:
        kept.append([v[:3] for v in views])
        return next((r for r, v in enumerate(views) if v[3]), None)

    try:
        recorded = rank == leader and completed(directory)
        root = coord.gather_and_plan(comm, f"stage {final}: rebuild, who recorded the level",
                                     lambda: (host, leader, problems.get(rank), recorded), source)
        if root is None:
            return "no node recorded the checkpoint's redundancy (it was staged without redundancy=)"
        layout = _layout_to_leaders(comm, f"stage {final}: rebuild, the level", directory, rank == leader, root)

        def plan(reports: list[Any]) -> Any:  # rank 0, a node leader: it has the layout
            assert layout is not None
            decided = parity.plan_rebuild(layout, kept[0], {r: v for r, v in enumerate(reports) if v is not None})
            return decided if isinstance(decided, str) else decided.__dict__

        decided = coord.gather_and_plan(
            comm, f"stage {final}: rebuild plan",
            lambda: _leader_report(directory, final, nprocs, layout) if rank == leader else None, plan)
    except CheckpointError as exc:  # agreed: a level file that cannot be read
        return f"its redundancy record cannot be read: {exc}"
    if isinstance(decided, str):
        return decided
    spills: list[Spill] = []
    p2p = comms.duplicate(comm)
    try:
        error = None
        try:  # only node leaders send or receive (and only they have the layout)
            sends, recvs = ([], []) if layout is None else _rebuild_streams(layout, decided, rank, directory, spills)
        except BaseException as exc:
            error, sends, recvs = exc, [], []
        coord.agree(comm, f"stage {final}: rebuild (prepare)", error)
        error = wire.transfer(p2p, sends, recvs, _TAG_REBUILD) if sends or recvs else None
        coord.agree(comm, f"stage {final}: rebuild (exchange)", error)

        def finish() -> None:
            for spill in spills:
                spill.finish()

        coord.run(comm, f"stage {final}: rebuild (write back)", finish)
    except CheckpointError as exc:
        for spill in spills:
            spill.discard()
        return f"the rebuild failed: {exc}"
    finally:
        comms.free(p2p)
    coord.warn_from_root(comm, f"stage {final}: rebuilt", f"ckptio: staged copy of {final}: " + "; ".join(
        decided["said"]))
    return None


def _read_level(directory: str) -> dict[str, Any]:
    """Local: a node's ``level.json`` of the staged checkpoint ``directory``, its layout checked
    (:meth:`Layout.from_json`); OSError/ValueError if unreadable or damaged."""
    where = os.path.join(directory, SUBDIR, LEVEL)
    with open(where) as f:
        level = json.load(f)
    if not isinstance(level, dict) or not isinstance(level.get("node"), int) or not isinstance(level.get("level"),
                                                                                                 dict):
        raise ValueError(f"{where}: not a ckptio level record")
    try:
        Layout.from_json(level["level"])
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return level


def _layout_to_leaders(comm, phase: str, directory: str, is_leader: bool, root: int) -> Layout | None:
    """Collective over ``comm``: the layout node ``root`` recorded (a node leader that has its level), on every
    node leader; None on the other ranks. The layout is O(ranks) of the job: like :func:`protect`, only the
    leaders, which plan and move the bytes, receive it (over a communicator of the leaders with ``root`` first),
    not every rank. A level ``root`` cannot read is the same CheckpointError on every rank of ``comm``."""
    leaders = comms.subset_keyed(comm, None if not is_leader else 0 if comm.Get_rank() == root else 1)
    text, error = None, None
    try:
        if leaders is not None:
            text = coord.bcast_from_root(leaders, phase, lambda: _level_layout(directory))
    except BaseException as exc:  # any failure of a leader: the other ranks must learn of it in agree() below
        error = exc
    finally:
        comms.free(leaders)
    coord.agree(comm, phase, error)
    return None if text is None else Layout.from_json(text)


def _level_layout(directory: str) -> dict[str, Any]:
    """Local, the node chosen to send it: its recorded layout; CorruptCheckpointError if unreadable or damaged
    (then every rank gets that error from the broadcast, and the rebuild says why it cannot use the level)."""
    try:
        return _read_level(directory)["level"]
    except (OSError, ValueError) as exc:
        raise CorruptCheckpointError(f"its level record: {exc}") from None


def _leader_report(directory: str, final: str, nprocs: int, layout: Layout) -> dict[str, Any]:
    """Local, a node leader at restart: the nodes whose partner copies it holds intact and whether its parity is
    intact (nothing, if its node recorded no level)."""
    red = os.path.join(directory, SUBDIR)
    try:
        level = _read_level(directory)
    except (OSError, ValueError):
        return {"copies": [], "parity": False}
    copies = [j for j, p in enumerate(layout.partner)
              if p == level["node"] and _copy_intact(os.path.join(red, f"partner-{j}"), layout, j, final, nprocs)]
    intact = False
    if layout.scheme == "xor" and 0 <= level["node"] < len(layout.hosts):
        try:
            path = os.path.join(red, PARITY)
            digest = metamod.StreamingChecksum()
            with open(path, "rb") as f:
                while chunk := f.read(wire.CHUNK):
                    digest.update(chunk)
            intact = (os.path.getsize(path) == layout.block_bytes(layout.set_of(level["node"]))
                      and digest.hexdigest() == level.get("parity"))
        except OSError:
            intact = False
    return {"copies": copies, "parity": intact}


def _copy_intact(where: str, layout: Layout, node: int, final: str, nprocs: int) -> bool:
    """Local: every file of ``node``'s partner copy is there, its manifests match their xxh3 and every block its
    checksum."""
    try:
        for name, size, digest in layout.files[node]:
            path = os.path.join(where, name)
            if os.path.getsize(path) != size:
                return False
            if digest is not None:
                with open(path, "rb") as f:
                    if metamod.checksum(f.read()) != digest:
                        return False
        for r in layout.ranks[node]:
            read_piece(where, r, nprocs, final)
    except (OSError, CheckpointError):
        return False
    return True


def _rebuild_streams(layout: Layout, decided: dict[str, Any], rank: int, directory: str, spills: list[Spill]
                     ) -> tuple[list[Any], list[Any]]:
    """Local, a node leader: the streams it sends and receives in the rebuild (none on other ranks)."""
    red = os.path.join(directory, SUBDIR)
    sends: list[Any] = []
    recvs: list[Any] = []
    for lost, src, dst in decided["copies"]:
        if rank == src:
            sends.append((dst, layout.node_bytes(lost), Concat(os.path.join(red, f"partner-{lost}"),
                                                               layout.files[lost]).read))
        if rank == dst:
            spills.append(Spill(directory, layout.files[lost], True))
            recvs.append((src, layout.node_bytes(lost), spills[-1].write))
    for lost, dst, sources in decided["xor"]:
        members = layout.set_of(lost)
        n, m = len(members), members.index(lost)
        block = layout.block_bytes(members)
        plan = parity.rebuild_sources(m, n)
        for j, src in sources:
            if rank == src:
                sends.append((dst, (n - 1) * block, _part_reader(directory, layout, j, plan[members.index(j)], block)))
        if rank == dst:
            spills.append(_XorSpill(directory, layout, lost))
            recvs += [(src, (n - 1) * block, spills[-1].write) for _, src in sources]
    return sends, recvs


def _part_reader(directory: str, layout: Layout, node: int, parts: list[tuple[int, str, int]], block: int) -> Any:
    """Local: the stream a surviving member sends to rebuild a lost one: per block, its parity or one of its data
    blocks (:func:`ckptio.model.parity.rebuild_sources`)."""
    data = Concat(directory, layout.files[node])
    parity_file = os.path.join(directory, SUBDIR, PARITY)

    def read(offset: int, count: int) -> np.ndarray:
        out = np.empty(count, np.uint8)
        done = 0
        while done < count:
            b, within = divmod(offset + done, block)
            n = min(count - done, block - within)
            _b, kind, blk = parts[b]
            if kind == "parity":
                with open(parity_file, "rb") as f:
                    f.seek(within)
                    out[done:done + n] = np.frombuffer(f.read(n), np.uint8)
            else:
                out[done:done + n] = data.read(blk * block + within, n)
            done += n
        return out

    return read


class _XorSpill(Spill):
    """Local, the lost member's leader: XORs what the set's survivors send straight into the lost node's files
    (under their temporary names), so that the rebuild needs the lost node's size in free space, not twice it
    (an accumulator file beside the files, as before). Bytes of the stream past the files' end are the parity
    block's padding and are not kept. The files' space is allocated before any byte arrives: a full stage is
    ENOSPC here, never a SIGBUS in the middle of the exchange."""

    def __init__(self, directory: str, layout: Layout, lost: int):
        super().__init__(directory, layout.files[lost], True)
        self.maps: list[tuple[np.memmap, int, int]] = []
        for path, start, size in self.parts:
            if size:
                _allocate(path, size)
                self.maps.append((np.memmap(path, np.uint8, "r+", shape=(size,)), start, size))

    def write(self, offset: int, data: np.ndarray) -> None:
        for acc, start, size in self.maps:
            lo, hi = max(offset, start), min(offset + len(data), start + size)
            if lo < hi:
                parity.xor_into(acc[lo - start:hi - start], data[lo - offset:hi - offset])

    def finish(self) -> None:
        for acc, _start, _size in self.maps:
            acc.flush()
        self.maps = []  # (unmapped once the arrays go)
        super().finish()


def _allocate(path: str, size: int) -> None:
    """Local: give the (empty) file ``path`` ``size`` bytes of zeros with its blocks allocated: ENOSPC now if the
    stage cannot hold them (``posix_fallocate``; zeros written where the file system cannot allocate)."""
    fd = os.open(path, os.O_RDWR)
    try:
        with naming(path):
            os.posix_fallocate(fd, 0, size)
        return
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
    finally:
        os.close(fd)
    zeros = np.zeros(min(size, wire.CHUNK), np.uint8)
    for lo in range(0, size, len(zeros)):
        pwrite_all(path, zeros[:min(len(zeros), size - lo)], lo)  # (short writes resumed, the file named)
