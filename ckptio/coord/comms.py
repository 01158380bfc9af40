"""Communicator lifecycle: node discovery and the communicators ckptio derives from the user's.

ckptio never sends its own messages on the user's communicator where a user's pending point-to-point calls could
match them, and never keeps a derived communicator past the object that needs it:

* :func:`node_leader`: which ranks share a node (``MPI_COMM_TYPE_SHARED``), for the aggregator choice and the
  stages of node-local staging;
* :func:`members_on_host`: how many ranks of a role share this rank's host, or one of its CPU caches (a
  verification's read windows);
* :func:`subset`: the restart aggregators' sub-communicator (``MPI_Comm_split``), the only ranks that open the
  file;
* :func:`duplicate`: a private copy of a communicator (``MPI_Comm_dup``) for the restart exchange's
  point-to-point messages and for an async I/O thread's collectives;
* :func:`free`: releasing one of these.

Each function says over which communicator it is collective. None of them runs work that can fail between its
collectives, so they need no agreement (:mod:`ckptio.coord.agreement`); their callers place them after an
agreed phase.
"""

from __future__ import annotations

from typing import Any


def node_leader(comm) -> int:
    """Collective over ``comm``: the lowest rank of ``comm`` that shares this rank's node (memory),
    ``MPI_COMM_TYPE_SHARED``.

    Node discovery does no work that can fail between its collectives, so it needs no agreement."""
    from ckptio.coord.mpi import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        return local.bcast(comm.Get_rank(), root=0)
    finally:
        local.Free()


def members_on_host(comm, member: bool, group: int = 0) -> int:
    """Collective over ``comm``: how many ranks of ``comm`` on this rank's host (``MPI_COMM_TYPE_SHARED``, the
    machine's memory and caches, whatever nodes a test emulates) and in its ``group`` there (e.g. the CPU cache
    it uses) have ``member`` true. Each rank receives one pair per rank of its host, never per rank of ``comm``."""
    from ckptio.coord.mpi import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        pairs = local.allgather((int(group), bool(member)))
    finally:
        local.Free()
    return sum(1 for g, m in pairs if m and g == int(group))


def subset(comm, member: bool) -> Any | None:
    """Collective over ``comm``: a communicator of the ranks where ``member`` is true, in ``comm``'s rank order
    (the restart aggregators, the only ranks that open the file); None on the other ranks. Free it with
    :func:`free` (collective over the members)."""
    from ckptio.coord.mpi import MPI

    sub = comm.Split(0 if member else MPI.UNDEFINED, comm.Get_rank())
    return None if sub == MPI.COMM_NULL else sub


def subset_keyed(comm, key: int | None) -> Any | None:
    """Collective over ``comm``: a communicator of the ranks whose ``key`` is not None, numbered by ``key`` (a
    staged checkpoint's writing ranks, see :mod:`ckptio.tiers.regroup`); None on the other ranks. Free it with
    :func:`free` (collective over the members)."""
    from ckptio.coord.mpi import MPI

    sub = comm.Split(0 if key is not None else MPI.UNDEFINED, 0 if key is None else key)
    return None if sub == MPI.COMM_NULL else sub


def duplicate(comm) -> Any:
    """Collective over ``comm``: a private duplicate of ``comm`` (same ranks, a separate matching context), for
    messages no user call can match (the restart exchange) or collectives another thread runs (async I/O). Free
    it with :func:`free`."""
    return comm.Dup()


def free(comm) -> None:
    """Collective over ``comm`` (a communicator made by :func:`subset` or :func:`duplicate`; None does nothing):
    release it. Every rank of ``comm`` calls it, in the same order as its other collectives on ``comm``."""
    if comm is not None:
        comm.Free()
