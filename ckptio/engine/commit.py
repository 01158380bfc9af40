"""The commit protocol, once for every format (issue 24): how a written temporary file becomes a checkpoint.

Collective over the writing communicator; every arrow is one agreed phase (:mod:`ckptio.coord`), so a failure on
any rank is the same error on every rank and no rank goes on into a collective the others will not enter::

    data written and synced
      -> the data landed          planning rank: no holes where data was written (engine.space.missing_data)
      -> the document's size      planning rank encodes the document; every rank learns its length and checksum
      -> room for the document    every rank: WriteHandle.document_slot (HDF5 creates its dataset)
      -> reserve                  planning rank: fallocate the document's and the mark's bytes
      -> write the document       the backend's steps (the planning rank holds the bytes)
      -> sync
      -> completion mark          the backend's steps (written last: a file without it is incomplete)
      -> sync, close              (the agreement after the close is the vote: every rank's part succeeded)
      -> read back                only where a client's write error may have been lost unseen (the collective
                                  writes of Open MPI's OMPIO) and the file system shows no holes
                                  (:func:`read_back`): the restart aggregators check every block's checksum; where
                                  it shows them, the planning rank reads back the extents too small to leave one
                                  (engine.space.unseen_losses), in "the data landed"
      -> check and rename         planning rank: read the document back from the file as the file system has
                                  it, then rename the temporary file to the final name and sync the directory

When the engine aggregated the data write itself (:mod:`ckptio.engine.write_aggregate`), only the write
aggregators hold a handle (the planning rank is one of them): the others pass None and still join every agreed
phase (a bystander of the backend's steps, :func:`ckptio.engine.steps.run_steps`).

A failure at any arrow leaves the previous checkpoint of that name untouched: :func:`abort` releases the file on
every rank (the planning rank truncates it first, so that a format whose close must write, HDF5, finds room) and
the planning rank removes it. Nothing at the final name ever claims to be complete unless it is.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ckptio import _warn, coord, settings
from ckptio.backends.base import Backend, DocumentSlot, WriteHandle, stored_document_of
from ckptio.engine import damage_marks, space, target_path
from ckptio.engine import faults as _faults
from ckptio.engine.steps import run_steps
from ckptio.errors import CheckpointError, CheckpointIOError
from ckptio.model import meta as metamod
from ckptio.model.document import CheckpointDocument

ROOT = 0  # the planning rank: it holds the whole plan and the document, reserves space and renames


def commit(comm, backend: Backend, handle: WriteHandle | None, tmp: str, path: str,
           document: dict[str, Any] | None, before_rename: Callable[[], None] | None = None,
           typed: CheckpointDocument | None = None, errors_lost: int = 0) -> None:
    """Collective: commit the temporary file ``tmp`` (data written and synced) as the checkpoint ``path``.
    ``document`` is the metadata document on the planning rank and None elsewhere (``typed``: its typed form,
    where the caller has it: the data check reads it instead of typing the dict again); ``handle`` None on a rank
    that holds none (not a write aggregator). ``before_rename`` runs on the
    planning rank right before the rename (a Series checks its lease there). ``errors_lost``: the data went out in
    collective MPI-IO writes that may have lost a client's write error, through this many aggregators (0: not;
    the same on every rank; see :func:`read_back`). Raises the same error on every rank; the caller then calls
    :func:`abort`."""
    where = f"checkpoint {path}"
    root = comm.Get_rank() == ROOT

    directory = os.path.dirname(os.path.abspath(tmp))

    def landed() -> bool:
        """The planning rank: no holes where data was written; then whether to read it all back (see
        :func:`read_back`)."""
        why = space.missing_data(tmp, backend, typed if typed is not None else document)
        if why is not None:
            raise CheckpointIOError(f"{tmp}: the file system lost writes of some rank, found by the planning rank "
                                    f"reading the file back (a write failed on some client: no space left on "
                                    f"{directory}, a quota exceeded, an I/O error, or a rank's file size limit, "
                                    f"ulimit -f?): {why}")
        if settings.get("CKPTIO_READ_BACK") == "always" or (errors_lost and not space.lost_writes_show(directory)):
            return True
        if not errors_lost:
            return False
        below = 4 * errors_lost * os.statvfs(directory).f_bsize  # (only here: a statfs may cost an RPC)
        small_calls = getattr(handle, "in_small_calls", None)  # (optional in the WriteHandle protocol)
        why = space.unseen_losses(tmp, backend, typed if typed is not None else document, below,
                                  small_calls(below) if small_calls is not None else None)
        if why is not None:
            raise CheckpointIOError(f"{tmp}: the file system lost writes of some rank, found by the planning rank "
                                    f"reading the small variables back (a write failed on some client without an "
                                    f"error from the MPI-IO library; Open MPI's OMPIO loses such errors, ROMIO "
                                    f"reports them: OMPI_MCA_io=romio321): {why}")
        return False

    reread = coord.bcast_from_root(comm, f"{where}: check that the data landed", landed, root=ROOT)  # (bool)
    encoded = metamod.dumps(typed if typed is not None else document) if root else None  # (the same text)
    slot = coord.bcast_from_root(comm, f"{where}: encode the metadata document",
                                 lambda: DocumentSlot(len(encoded), metamod.checksum(encoded)), root=ROOT)
    coord.run(comm, f"{where}: make room for the metadata document", lambda: held(handle, "document_slot", slot))
    coord.bcast_from_root(comm, f"{where}: reserve space for the metadata document",
                          lambda: space.reserve_space(tmp, handle.reserved_ranges(), "the metadata document"),
                          root=ROOT)
    _faults.point("write index", comm)
    run_steps(comm, f"{where}: write the metadata document",
              None if handle is None else lambda: handle.write_document(encoded))
    coord.run(comm, f"{where}: sync the metadata document", lambda: held(handle, "sync"))
    run_steps(comm, f"{where}: write the completion mark",
              None if handle is None else lambda: handle.mark_complete(root))
    coord.run(comm, f"{where}: sync the completion mark", lambda: held(handle, "sync"))
    coord.run(comm, f"{where}: close", lambda: (held(handle, "close"), _faults.point("commit vote", comm)))
    if reread:
        read_back(comm, tmp)
    _faults.point("rename", comm)
    coord.bcast_from_root(comm, f"{where}: check and rename", lambda: (
        check_written(backend, tmp, encoded), before_rename and before_rename(), rename_durably(tmp, path)),
        root=ROOT)


def read_back(comm, tmp: str) -> None:
    """Collective: every block of the closed temporary file ``tmp`` read back and its checksum compared, by the
    restart aggregators in parallel (:func:`ckptio.verify.verify_parallel`); the same CheckpointIOError on every
    rank when a block does not hold what was written. For data written where a client's write error may be lost
    (:func:`ckptio.coord.hints.collective_write_errors_lost`) on a file system that would not show the lost bytes
    as a hole (:func:`ckptio.engine.space.lost_writes_show`: CephFS through ceph-fuse, where an outside trial's
    HDF5 and PnetCDF checkpoints with a rank's share missing were committed), or everywhere with
    ``CKPTIO_READ_BACK=always``: a checkpoint is never committed with a block that does not hold the caller's
    data. It costs a read of the checkpoint, mostly from the writers' page cache where they share a node (a
    PnetCDF file's big-endian data are swapped to be checked: 2 GiB on 4 ranks, 1.7-2.5 s on this project's
    2-core VM, against 0.12 s for HDF5's)."""
    from ckptio.verify import verify_parallel  # (the restart's reader: imported only where it is needed)

    problems = verify_parallel(tmp, comm).problems
    if problems:  # (the same Verification on every rank)
        raise CheckpointIOError(f"{tmp}: {len(problems)} block(s) of the data did not land, found by reading the "
                                f"checkpoint back before its commit (a write failed on some client without an error "
                                f"from the MPI-IO library; Open MPI's OMPIO loses such errors, ROMIO reports them: "
                                f"OMPI_MCA_io=romio321): {problems[0]}")


def held(handle: WriteHandle | None, method: str, *args: Any) -> Any:
    """Local: ``handle.method(*args)`` on a rank that holds a handle; nothing on one that holds none."""
    return None if handle is None else getattr(handle, method)(*args)


def abort(comm, handle: WriteHandle | None, tmp: str) -> None:
    """Collective, after a failure every rank agreed on (every rank is here): the planning rank truncates the
    temporary file (its space comes back), every rank holding a handle releases it, the planning rank removes the
    file, and every rank returns once it is gone. Never raises: the agreed failure is what the caller reports."""
    try:
        if comm.Get_rank() == ROOT:
            _truncate_quietly(tmp)
        coord.run(comm, f"{tmp}: release after a failure", lambda: None)  # truncated before any close writes
    except BaseException:  # another failure while cleaning up: the first one is reported
        pass
    if handle is not None:
        handle.abort()
    if comm.Get_rank() == ROOT:
        remove_quietly(tmp)
    try:  # (a rank that listed the directory right after its error saw the file, racing the planning rank)
        coord.run(comm, f"{tmp}: removed after a failure", lambda: None)
    except BaseException:
        pass


def check_written(backend: Backend, tmp: str, encoded: bytes) -> None:
    """Planning rank, before the rename: read the document back from the file as the file system has it (header,
    index or document, completion mark; not the data). Where space could not be reserved (no ``fallocate``), a
    full file system may drop writes without any error (Open MPI's OMPIO ignores short writes): the lost tail then
    shows here, and the checkpoint fails instead of being renamed. ``encoded``: the document's bytes as written;
    where the backend gives the stored bytes (:meth:`Backend.stored_document`) they must be exactly these, else
    the backend decodes and checks the document (:meth:`Backend.read_document`)."""
    try:
        stored = stored_document_of(backend, tmp)
        if stored is None:
            backend.read_document(tmp)
    except CheckpointError as exc:
        raise CheckpointIOError(f"{tmp}: the file as written is not a complete checkpoint, so the file system "
                                f"lost writes (no space left, or quota exceeded?): {exc}") from None
    if stored is not None and stored != encoded:  # complete, checksum and all, yet not what was written
        raise CheckpointIOError(f"{tmp}: the metadata document reads back as {len(stored)} bytes that differ from "
                                f"the {len(encoded)} bytes written (a defect of the {backend.name!r} backend, or "
                                "another process wrote into the file); the checkpoint is not committed")


def rename_durably(tmp: str, path: str) -> None:
    """Planning rank: ``tmp`` becomes ``path`` atomically, and the directory entry is synced. A damaged checkpoint
    now at ``path`` (marked by a lookup, or whose metadata does not read) is first moved aside
    (:func:`ckptio.engine.damage_marks.move_aside`), with a warning: a new checkpoint never destroys what may be
    the only copy of a run's state."""
    aside = damage_marks.move_aside(path, target_path.damaged_checkpoint(path))
    if aside is not None:
        _warn.warn(f"ckptio: {path} was a damaged checkpoint; it is kept as {aside} and the new checkpoint takes "
                   "its name")
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _truncate_quietly(path: str) -> None:
    try:
        os.truncate(path, 0)
    except OSError:
        pass
