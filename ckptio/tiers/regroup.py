"""Restart from the node-local level on another rank count (issue 28): a staged checkpoint written by N ranks,
restarted by a job of M ranks on nodes that hold every piece.

The pieces of a staged checkpoint are per writing rank (``rank-R-of-N``), on the node that rank ran on. When the
restarting job has a different rank count but, on every node that holds pieces, at least as many ranks as there
are pieces, each piece gets one rank of its own node (the node's lowest ranks, in the pieces' rank order); those
N ranks form a sub-communicator numbered like the writing job and drain the checkpoint exactly as that job would
have (:func:`ckptio.tiers.staging.drain`: the same blocks, the same per-rank segments), every checksum verified.
The N-to-M read then proceeds from the parallel file system. Otherwise (fewer ranks on a node than its pieces, a
piece on no node of this job, a damaged piece, an unfinished redundancy exchange) the reason is returned and the
caller falls back to an older checkpoint; a lost node is rebuilt only by a job of the writing rank count.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ckptio import coord
from ckptio.coord import comms
from ckptio.errors import CheckpointError
from ckptio.tiers import redundancy
from ckptio.tiers.stage_files import host_name, piece_names, read_manifest

_PIECE = re.compile(r"rank-(\d{6})-of-(\d{6})\.json$")


@dataclass(frozen=True)
class Regroup:
    """How a job drains a staged checkpoint of ``nprocs`` writing ranks: ``ranks[new rank] = writing rank``."""

    nprocs: int
    ranks: dict[int, int]


def pieces_here(directory: str) -> list[tuple[int, int]]:
    """Local: ``(rank, nprocs)`` of every piece manifest in this node's copy of a staged checkpoint."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted((int(m[1]), int(m[2])) for m in map(_PIECE.match, names) if m)


def plan(views: Sequence[tuple[str, list[tuple[int, int]], bool]], nprocs: int) -> Regroup | str | None:
    """Pure (rank 0): from every rank's ``(host, pieces seen on its node, its node completed the redundancy)``,
    None when the pieces are of ``nprocs`` ranks (or there are none: the usual path), else the :class:`Regroup`
    or why there is none."""
    counts = {n for _, seen, _ in views for _, n in seen}
    if not counts or counts == {nprocs}:
        return None
    if len(counts) > 1:
        return f"pieces of {sorted(counts)} ranks in one staged checkpoint"
    writers = counts.pop()
    by_host: dict[str, list[int]] = {}
    new_ranks: dict[str, list[int]] = {}
    for r, (host, seen, _) in enumerate(views):
        by_host.setdefault(host, sorted({w for w, _ in seen}))
        new_ranks.setdefault(host, []).append(r)
    missing = sorted(set(range(writers)) - {w for ws in by_host.values() for w in ws})
    if missing:
        return (f"written by {writers} ranks, this job has {nprocs}, and the pieces of rank(s) "
                f"{', '.join(map(str, missing[:5]))} are on no node of this job (a lost node is rebuilt "
                f"only by a job of {writers} ranks)")
    ranks: dict[int, int] = {}
    for host, ws in by_host.items():
        if len(new_ranks[host]) < len(ws):
            return (f"written by {writers} ranks, this job has {nprocs}: node {host} holds {len(ws)} "
                    f"pieces but runs {len(new_ranks[host])} rank(s) of this job (each piece needs one)")
        ranks.update(zip(new_ranks[host], ws, strict=False))
    return Regroup(writers, ranks)


def drain_other_count(comm, directory: str, final: str, writer_factory: Any,
                      drain: Callable[[Any, Any, str, str], None]) -> str | None:
    """Collective over ``comm``: drain the staged checkpoint ``directory`` (of ``final``) if it was written by
    another rank count and this job's nodes hold every piece (see the module docstring). Returns None when the
    checkpoint is of this job's rank count (nothing done), "" once ``final`` is drained, else why it cannot be
    (nothing was written). Agreed on every rank. ``drain``: :func:`ckptio.tiers.staging.drain`."""
    nprocs = comm.Get_size()
    here = pieces_here(directory)

    def local() -> tuple[str, list[tuple[int, int]], bool, bool]:
        return host_name(), here, redundancy.completed(directory), _asks_redundancy(directory, here)

    def planned(views: list[Any]) -> Regroup | str | None:
        out = plan([v[:3] for v in views], nprocs)
        if isinstance(out, Regroup) and any(v[3] for v in views) and not any(v[2] for v in views):
            return "its redundancy exchange never completed (the job ended inside close())"
        return out

    decided = coord.gather_and_plan(comm, f"stage {final}: rank count of the staged pieces", local, planned)
    if not isinstance(decided, Regroup):
        return decided
    writer = decided.ranks.get(comm.Get_rank())
    sub = comms.subset_keyed(comm, writer)
    failed: BaseException | None = None
    if sub is not None:  # numbered like the writing job: its drain reads (and verifies) the pieces
        try:
            drain(sub, writer_factory, directory, final)
        except CheckpointError as exc:  # agreed within the sub-communicator
            failed = exc
        finally:
            comms.free(sub)
    try:
        coord.run(comm, f"stage {final}: drained by {decided.nprocs} of {nprocs} ranks", lambda: _raise(failed))
    except CheckpointError as exc:
        return f"written by {decided.nprocs} ranks, drained by as many of this job's {nprocs}: {exc}"
    return ""


def _asks_redundancy(directory: str, here: list[tuple[int, int]]) -> bool:
    """Local: whether a piece manifest on this node asks for redundancy (a Series' multi-level checkpoint)."""
    for rank, n in here[:1]:
        try:
            return read_manifest(os.path.join(directory, piece_names(rank, n)[1])).redundancy is not None
        except CheckpointError:
            return False
    return False


def _raise(error: BaseException | None) -> None:
    if error is not None:
        raise error
