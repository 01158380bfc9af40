"""Staged checkpoints (``stage_dir=``): the burst-buffer pattern, on a shared or a node-local fast tier.

``close()`` of a staged checkpoint (collective over the writer's communicator):

1. :func:`locate` finds out what ``stage_dir`` is: every node's first rank writes a probe file into it and
   every rank reports which probes it sees. All see all: the stage is *shared*; each sees only its own node's:
   it is *node-local* (a node's SSD, ``/dev/shm``, a per-node burst buffer). Anything else (a rank that does
   not see its own node's probe, a stage shared by some nodes only) fails on every rank, naming the node and
   what it cannot see, before anything is written.
2. every rank writes its blocks, unchanged, into its own *piece* on its own node's stage: a data file and a
   JSON manifest holding each block's checksum, the checkpoint's final path and a token common to every rank
   (:func:`ckptio.tiers.stage_files.write_piece`). Plain local writes: no MPI-IO file is shared, so nothing is
   opened across nodes.
3. the *drain* (:func:`drain`, run by the I/O thread) reads each rank's own piece back, verifies every
   checksum, and writes the normal shared checkpoint at the final path through the usual collective path
   (:class:`ckptio.Writer`: aggregators, hints, commit). Once it committed, older staged copies of the same
   final directory are removed (:func:`retain`), so the stage holds the newest drained checkpoint and the
   ones still draining.

Staged copies live in ``stage_dir/<final directory name>-<hash of its absolute path>/<checkpoint name>/<token>/``
(:func:`ckptio.tiers.stage_files.checkpoint_dir`): two runs sharing one ``stage_dir`` never see each other's
copies, and every manifest names its final path, checked before use.

Restart (:func:`recover`, from ``ckptio.latest(..., comm=, stage_dir=)`` and ``Series.latest()``): when the
newest staged checkpoint has no valid copy on the parallel file system (its drain was interrupted), it is
drained now, but only when every rank's piece is present and verified on its own node (a restart on the same
nodes with the same number of ranks, as in SCR); otherwise it is skipped with a warning, never waited for.
``ckptio.open(path, comm, stage_dir=)`` reads from the stages by the same rule (:mod:`ckptio.tiers.staged_reader`).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio import _warn, coord
from ckptio.engine.index import WriteStats
from ckptio.engine.target_path import directory_problem
from ckptio.engine.write import WriteRequest, plan_globally
from ckptio.errors import CheckpointError, CheckpointIOError, CorruptCheckpointError, DeclarationError
from ckptio.model import varmeta
from ckptio.model.plan import ARRAY, pack_declarations
from ckptio.model.stage_manifest import StagedBlock, StageManifest
from ckptio.pathcheck import symlink_problem
from ckptio.tiers import async_io, catalog, redundancy, regroup
from ckptio.tiers.stage_files import (
    checkpoint_dir,
    drained_identity,
    family_of,
    host_name,
    key_dir,
    mark_drained,
    new_token,
    read_piece,
    remove_if_there,
    remove_piece,
    spare_data_file,
    staged_copies,
    write_piece,
)

_PROBE = ".ckptio-probe-"


@dataclass(frozen=True)
class StageInfo:
    """What :func:`locate` found out (the same on every rank, except ``host`` and ``cleaner``)."""

    directory: str
    shared: bool  # True: every rank sees one directory; False: every node has its own
    host: str  # this rank's host name (each rank's manifest records its own: nothing per rank is gathered)
    cleaner: bool  # this rank removes files in the stage it sees (rank 0 if shared, else each node's first rank)


# ----------------------------------------------------------------------------------------- where is it
def locate(comm, stage_dir: str) -> StageInfo:
    """Collective: create ``stage_dir`` if needed and find out whether it is shared or node-local (see the
    module docstring). Raises the same CheckpointIOError on every rank, naming the nodes, when it is neither."""
    from ckptio.coord.mpi import MPI

    rank = comm.Get_rank()
    host = MPI.Get_processor_name()
    leader = coord.node_leader(comm)
    phase = f"stage {stage_dir}"
    token = coord.bcast_from_root(comm, f"{phase}: probe name", lambda: uuid.uuid4().hex[:12])
    probe = os.path.join(stage_dir, f"{_PROBE}{token}-{rank}")

    def make() -> None:
        try:
            os.makedirs(stage_dir, exist_ok=True)
            if rank == leader:
                with open(probe, "w") as f:
                    f.write(host)
        except OSError as exc:
            raise CheckpointIOError(f"stage_dir {stage_dir} cannot be used on {host}: "
                                    f"{exc.strerror or exc}") from None

    failed = True  # the same on every rank: both phases below raise on every rank alike

    def remove_probe() -> None:
        if rank != leader:
            return
        try:
            remove_if_there(probe)
        except OSError:
            if not failed:
                raise
            # after a failure, the error to report is that one: on a read-only stage the probe was never made
            # and unlink says EROFS, which used to replace "stage_dir ... cannot be used on <node>"

    try:
        coord.run(comm, f"{phase}: create the directory and its probe", make)

        def seen() -> tuple[str, int, list[int]]:
            prefix = f"{_PROBE}{token}-"
            names = [n for n in os.listdir(stage_dir) if n.startswith(prefix)]
            return host, leader, sorted(int(n[len(prefix):]) for n in names)

        shared = coord.gather_and_plan(comm, f"{phase}: who sees which probe", seen,
                                       lambda views: _decide(stage_dir, views))
        failed = False
    finally:  # also after a failure (a full stage): a probe left behind would fill it further
        coord.run(comm, f"{phase}: remove the probe", remove_probe)
    return StageInfo(stage_dir, shared, host, rank == 0 if shared else rank == leader)


def _decide(stage_dir: str, views: Sequence[tuple[str, int, list[int]]]) -> bool:
    """Rank 0: True for a shared stage, False for a node-local one; CheckpointIOError naming nodes otherwise."""
    leaders = sorted({leader for _, leader, _ in views})
    host_of = {leader: views[leader][0] for leader in leaders}
    if all(seen == leaders for _, _, seen in views):
        return True
    if all(seen == [leader] for _, leader, seen in views):
        return False
    problems = []
    for leader in leaders:
        ranks = [r for r, (_, lead, _) in enumerate(views) if lead == leader]
        seen = sorted({n for r in ranks for n in views[r][2]})
        who = f"node {host_of[leader]} (ranks {_ranges(ranks)})"
        if leader not in seen:
            problems.append(f"{who} cannot see its own node's probe file in {stage_dir}")
        elif seen != leaders:
            others = [host_of[n] for n in leaders if n != leader]
            visible = [host_of[n] for n in seen if n != leader]
            problems.append(f"{who} sees the stage of {', '.join(visible) or 'no other node'} "
                            f"out of {', '.join(others)}")
    raise CheckpointIOError(f"stage_dir {stage_dir} must be either one directory every node sees or a "
                            f"directory local to each node: " + "; ".join(problems or ["ranks of one node disagree"]))


def _ranges(ranks: Sequence[int]) -> str:
    if len(ranks) > 2 and ranks[-1] - ranks[0] == len(ranks) - 1:
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


# ------------------------------------------------------------------------------------------- close
def close_staged(writer: Any, background: bool) -> None:
    """Collective over the writer's communicator (the staged branch of :meth:`ckptio.Writer.close`): write every
    rank's blocks into its own node's stage (shared or node-local, found out by :func:`locate`), then drain them
    to the final path through the usual collective write, in the background unless ``background`` is False."""
    writer._closed = True
    comm = writer.comm
    rank, nprocs = comm.Get_rank(), comm.Get_size()
    t0 = time.perf_counter()
    try:
        token = coord.gather_and_plan(comm, f"checkpoint {writer.path}: declare (staged)",
                                      lambda: _prepare_staged(writer), lambda g: _plan_staged(writer, g))
        info = locate(comm, writer.stage_dir)
        directory = checkpoint_dir(writer.stage_dir, writer.path, token)
        policy = getattr(writer, "stage_policy", None)  # a Series' multi-level policy (ckptio.tiers.redundancy)
        header = StageManifest(os.path.abspath(writer.path), token, info.host, writer.backend.name, writer.attrs,
                               None if writer.series_record is None else writer.series_record.to_json(),
                               None if policy is None else policy.scheme, rank, nprocs)
        blocks = [(StagedBlock.declared(p.decl, writer._described.get(p.decl["name"], {}), p.data.shape), p.data)
                  for p in writer._pending]

        def piece() -> int:
            spare = spare_data_file(writer.stage_dir, writer.path, rank, nprocs,
                                    getattr(writer, "stage_family", None))
            return write_piece(directory, header, blocks, spare)

        try:
            written = coord.run(comm, f"checkpoint {writer.path}: write to stage {writer.stage_dir}", piece)
            t1 = time.perf_counter()
            if policy is not None:
                redundancy.protect(comm, info, directory, policy)
        except BaseException:  # failed on some rank (a full stage): no rank keeps its piece of it
            if info.cleaner:
                redundancy.discard(directory)
            remove_piece(directory, rank, nprocs)
            raise
    finally:
        writer._pending = []
    total, least, most = coord.sum_min_max(comm, written)
    stage_seconds = time.perf_counter() - t0
    seconds = {"stage": stage_seconds} if policy is None else {"stage": t1 - t0,
                                                              "redundancy": stage_seconds - (t1 - t0)}
    writer.stats = WriteStats(seconds, total, least, most)
    final = writer.path
    on_commit = getattr(writer, "_on_commit", None)  # Series retention, as in Writer._close_async
    twins: list[Any] = []

    def twin(path: str, comm, _manifest) -> Any:  # the drain's writer, kept for its stats and document
        twins.append(writer._clone(path, comm))
        return twins[-1]

    family = getattr(writer, "stage_family", None)  # a Series' names (retain: one series never removes another's)

    def drain_now(comm) -> None:
        drain(comm, twin, directory, final)
        writer._adopt(twins[-1], {"stage": stage_seconds})
        retain(comm, info, final, token, family=family)
        if on_commit is not None and background:  # synchronous: Series runs it after close() returns
            on_commit(comm)

    def keep_level(comm) -> None:  # not drained (drain_every=k): the node-local level keeps its newest copy
        if writer.before_rename is not None:  # a Series' lease, checked as before a drained one's rename: a job
            # whose series another job took over must not go on checkpointing it, on the nodes either
            coord.run(comm, f"checkpoint {final}: node level, the series' lease",
                      lambda: writer.before_rename() if comm.Get_rank() == 0 else None)
        retain(comm, info, final, token, drained=False, family=family)
        if on_commit is not None and background:  # the lease's heartbeat with the Series' retention, as after a
            on_commit(comm)                       # drain: else a live job's lease went stale between drains

    job = drain_now if policy is None or policy.drain else keep_level
    if not background:
        job(comm)
        return
    engine = async_io.engine_for(comm)
    finished = engine.settle_before_new()
    writer.backend.write_problem()  # loads the backend's library here (see async_io.IOEngine.submit)
    writer.handle = async_io.AsyncCheckpoint(writer.path)
    engine.submit(writer.handle, job, lambda: None)  # FIFO: after the drains of older checkpoints
    async_io.raise_failures(finished, f"close() of {writer.path} (which was submitted normally)")


def _prepare_staged(writer: Any) -> dict[str, Any]:
    """Local part of a staged close's declare phase: C order (checksums are computed while writing the stage,
    compression is the drain's work), and whether this rank sees the final directory (the drain opens a file
    there)."""
    if writer._error is not None:
        raise writer._error
    check_stage_dir(writer.stage_dir)
    t = time.perf_counter()
    for p in writer._pending:
        p.data = np.ascontiguousarray(p.data).reshape(p.data.shape)  # (ascontiguousarray makes 0-d 1-d)
    policy = getattr(writer, "stage_policy", None)
    final_dir = os.path.dirname(os.path.abspath(writer.path))
    problem = None if os.path.isdir(final_dir) else (f"{final_dir} is not a directory seen from "
                                                     f"{host_name()} (rank {writer.comm.Get_rank()})")
    return {"decls": pack_declarations([p.decl for p in writer._pending]), "attrs": writer.attrs,
            "described": varmeta.pack(writer._described), "prepare_seconds": time.perf_counter() - t,
            "dir_problem": directory_problem(writer.path) if writer.comm.Get_rank() == 0 else None,
            "sees_final": problem, "drain": None if policy is None else policy.drain}


def _plan_staged(writer: Any, gathered: list[dict[str, Any]]) -> str:
    """Rank 0: validate the declarations as a direct write would (so a staged checkpoint fails now, not in the
    drain) and name the staged checkpoint (its token)."""
    blind = [g["sees_final"] for g in gathered if g["sees_final"]]
    if blind:
        raise CheckpointIOError(f"checkpoint {writer.path}: " + "; ".join(blind))
    drains = [g["drain"] for g in gathered]
    if len(set(drains)) > 1:  # each rank would run another background job: drain, or keep the node level
        yes = [r for r, d in enumerate(drains) if d]
        raise DeclarationError(f"checkpoint {writer.path}: drained to the parallel file system on rank(s) "
                               f"{_ranks(yes)} but kept node-local on the others (Series.create(drain=...) must be "
                               "the same on every rank)")
    plan_globally(WriteRequest(writer.path, writer.comm, writer.backend, writer.hints, writer.compression,
                               writer.attrs, []), gathered)
    return new_token()


def _ranks(ranks: Sequence[int]) -> str:
    shown = ", ".join(map(str, ranks[:8]))
    return shown + (f" (+{len(ranks) - 8} more)" if len(ranks) > 8 else "")


def check_stage_dir(stage_dir: str | None) -> None:
    """Local, every rank, in a staged close()'s declare phase (agreed, before the stage is probed by
    :func:`locate`): ``stage_dir``, or the nearest part of its path that exists, must be a directory. A regular
    file there made the probe fail and then its cleanup, which reported "remove the probe failed:
    NotADirectoryError" instead of the cause (issue 23)."""
    if stage_dir is None:
        return
    path = os.path.abspath(stage_dir)
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    if os.path.isdir(path):
        return
    why = symlink_problem(path)
    if why is None:
        what = "it" if path == os.path.abspath(stage_dir) else f"its parent {path}"
        why = f"{what} is {'a regular file' if os.path.isfile(path) else 'not a directory'}"
    raise CheckpointIOError(f"stage_dir {stage_dir} cannot be used on {host_name()}: {why}, "
                            "not a directory; give a directory (created if missing) for the staged copies")


# ---------------------------------------------------------------------------------------- drain, retain
def drain(comm, writer_factory, directory: str, final_path: str) -> None:
    """Collective over ``comm``: read this rank's piece (checksums verified) and write the final checkpoint
    with a Writer from ``writer_factory(final_path, comm, manifest)`` (its close() is the collective path; an
    error reading one rank's piece is raised there on every rank; ``manifest`` is None on that rank)."""
    try:
        manifest, arrays = read_piece(directory, comm.Get_rank(), comm.Get_size(), final_path)
    except CheckpointError as exc:
        twin = writer_factory(final_path, comm, None)
        twin._error = exc  # raised by close() on every rank, naming this one
        twin.close()
        return
    try:
        twin = writer_factory(final_path, comm, manifest)
    except (CheckpointError, ValueError, TypeError) as exc:  # its backend or series record cannot be used
        twin = writer_factory(final_path, comm, None)
        twin._error = CorruptCheckpointError(f"staged piece of {final_path} on rank {comm.Get_rank()}: {exc}")
        twin.close()
        return
    try:
        for b, a in zip(manifest.blocks, arrays, strict=True):
            if b.kind == ARRAY:
                twin.write(b.name, a, offset=b.offset, global_shape=b.global_shape, **b.described)
            else:
                twin.write(b.name, a, **b.described)
    except CheckpointError as exc:
        twin._error = twin._error or exc  # raised by close() on every rank, naming this one
    twin.close()


def retain(comm, info: StageInfo, final_path: str, token: str, drained: bool = True,
           family: Callable[[str], bool] | None = None) -> None:
    """Collective: after the checkpoint ``token`` committed at ``final_path``, mark it drained (its data files
    may then be reused by the next staged checkpoint, see :func:`spare_data_file`) and remove the staged
    checkpoints staged before it: those of the same family (drained, or failed and superseded) and any drained
    one (the parallel file system has it). The family: the names ``family`` accepts (a Series: its name
    pattern), else ``final_path``'s own name: the stage of a directory is shared by every series writing there,
    and one series' checkpoint never removes another's undrained copy, which may be that series' newest
    checkpoint, on the stage alone (``drain_every``). The cleaner of each stage does this; a failure is a warning,
    never an error of the committed checkpoint. ``drained=False``: ``token`` is complete at the node-local level
    only (``drain_every``, run by the I/O thread after the drains of older ones): the older staged copies go,
    ``token`` stays unmarked."""
    same = family_of(final_path, family)

    def remove() -> None:
        if not info.cleaner:
            return
        base = key_dir(info.directory, final_path)
        if drained:
            mark_drained(checkpoint_dir(info.directory, final_path, token), final_path)
        for name, tok, path in staged_copies(base):
            if tok < token and (same(name) or drained_identity(path) is not None):
                shutil.rmtree(path, ignore_errors=True)
                parent = os.path.dirname(path)
                if not os.listdir(parent):
                    os.rmdir(parent)

    try:
        coord.run(comm, f"stage {info.directory}: retention", remove)
    except CheckpointError as exc:
        _warn.warn(f"ckptio: could not remove old staged copies: {exc}", RuntimeWarning)


# -------------------------------------------------------------------------------------------- restart
def recover(comm, directory: str, pattern: catalog.NamePattern, stage_dir: str, writer_factory: Any) -> str | None:
    """Collective: if the newest staged checkpoint of ``directory`` (named exactly by ``pattern``) has no valid
    copy there, drain it now, when every rank's piece is present and verified on its own node. Returns the
    path drained, or None. Staged checkpoints that cannot be used are skipped with a warning (no hang: each
    rank only looks at its own node's stage, and the decision is agreed). ``writer_factory(path, comm,
    manifest)``: the writer of the drain (the facades pass :func:`ckptio.writer.restaging_writer`: the tiers sit
    below the facades and never import them). One collective section (:func:`ckptio.coord.collective_section`):
    a signal handler's exception during a drain fails that drain on every rank alike, every rank goes on to the
    next staged copy together, and the handler's rank raises its exception when the whole recovery ends."""
    with coord.collective_section():
        return _recover(comm, directory, pattern, stage_dir, writer_factory)


def _recover(comm, directory: str, pattern: catalog.NamePattern, stage_dir: str, writer_factory: Any) -> str | None:
    """:func:`recover` inside its collective section."""
    base = key_dir(stage_dir, os.path.join(directory, "x"))

    def mine() -> list[tuple[str, str]]:
        newest: dict[str, str] = {}
        for name, tok, _ in staged_copies(base):
            if pattern.step(name) is not None and tok > newest.get(name, ""):
                newest[name] = tok
        return sorted(newest.items())

    def order(views: list[list[tuple[str, str]]]) -> list[tuple[str, str]]:
        newest: dict[str, str] = {}
        for view in views:
            for name, tok in view:
                newest[name] = max(tok, newest.get(name, ""))
        return sorted(newest.items(), key=lambda nt: (pattern.step(nt[0]) or 0, nt[1]), reverse=True)

    staged = coord.gather_and_plan(comm, f"stage {stage_dir}: staged checkpoints", mine, order)
    for name, token in staged:
        final = os.path.join(directory, name)

        def on_disk(final: str = final) -> bool:
            try:
                catalog.check(final)
                return True
            except (CheckpointError, OSError):
                return False

        if coord.bcast_from_root(comm, f"stage {stage_dir}: is {final} valid", on_disk):
            return None  # the newest staged checkpoint is drained already: the parallel file system has it
        piece = checkpoint_dir(stage_dir, final, token)
        other = regroup.drain_other_count(comm, piece, final, writer_factory, drain)  # written by another rank count
        if other is not None:
            if other == "":
                return final
            coord.warn_from_root(comm, f"stage {stage_dir}: {name} not used",
                                 f"ckptio: staged copy of {final} not used: {other}; falling back to an older "
                                 "checkpoint")
            continue

        def check(piece: str = piece, final: str = final) -> tuple[str | None, bool, bool]:
            """Local: (the problem of this rank's piece, its manifest asks for redundancy, its node completed it)"""
            try:
                manifest, _ = read_piece(piece, comm.Get_rank(), comm.Get_size(), final)
                return None, manifest.redundancy is not None, redundancy.completed(piece)
            except CheckpointError as exc:
                return str(exc), False, redundancy.completed(piece)

        def verify(name: str = name, check=check) -> dict[int, str]:
            return coord.gather_and_plan(comm, f"stage {stage_dir}: verify {name}", check, redundancy.piece_problems)

        problems = verify()
        if problems:  # rebuilt from the other nodes' redundancy (ckptio.tiers.redundancy) if it can be
            why = redundancy.rebuild(comm, piece, final, problems)
            if why is None:
                problems = verify()
                why = None if not problems else "the rebuilt pieces do not verify"
            if problems:
                first = min(problems)
                coord.warn_from_root(comm, f"stage {stage_dir}: {name} not usable",
                                     f"ckptio: staged copy of {final} is not usable on every rank ({len(problems)} "
                                     f"rank(s), e.g. rank {first}: {problems[first]}); not restarting from it"
                                     + ("" if why.startswith("no node recorded") else f": cannot be rebuilt: {why}; "
                                        "falling back to an older checkpoint"))
                continue
        try:
            drain(comm, writer_factory, piece, final)
        except CheckpointError as exc:  # agreed: every rank is here (a full destination, a lost file system...)
            coord.warn_from_root(comm, f"stage {stage_dir}: {name} not drained",
                                 f"ckptio: could not drain the staged copy of {final} ({exc}); not restarting from "
                                 "it, falling back to an older checkpoint")
            continue
        try:
            coord.run(comm, f"stage {stage_dir}: mark {name} drained", lambda piece=piece, final=final:
                      mark_drained(piece, final))
        except CheckpointError as exc:
            _warn.warn(f"ckptio: could not mark the staged copy of {final} drained: {exc}", RuntimeWarning)
        return final
    return None
