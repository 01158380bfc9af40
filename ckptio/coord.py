"""Coordination: collectives that turn an exception on any rank into the same error on every rank.

Every collective phase of ckptio follows the pattern *local work -> agreement -> next collective*, so no
rank ever enters an MPI collective that another rank will not reach because it raised. All functions here
are collective over ``comm``: every rank calls them, in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .errors import CollectiveError, collective_error_class

T = TypeVar("T")

_FAILED = "__ckptio_failed__"


def _describe(exc: BaseException) -> tuple[str, str]:
    cls = type(exc)
    name = cls.__name__
    if isinstance(exc, CollectiveError):
        # re-raise of an already collective error: keep the original failures' text
        bases = [b.__name__ for b in cls.__mro__ if b.__module__ == "ckptio.errors" and b is not cls]
        name = next((b for b in bases if b not in ("CollectiveError", "CheckpointError")), name)
    if cls.__module__.startswith("mpi4py"):
        name = "Exception"  # MPI errors: the file system refused (ENOSPC, EACCES, ...)
    return name, str(exc)


def agree(comm, phase: str, error: BaseException | None) -> None:
    """Collective: raise on every rank if ``error`` is set on any rank. Cheap when no rank failed."""
    from mpi4py import MPI

    failed = comm.allreduce(1 if error is not None else 0, op=MPI.SUM)
    if failed == 0:
        return
    described = comm.allgather(None if error is None else _describe(error))
    if isinstance(error, CollectiveError) and all(d == described[0] for d in described):
        # every rank failed with the same collective error (an inner phase already agreed): name this phase
        # too, without repeating the inner failures once per rank
        raise type(error)(f"{phase}: {error.phase}", error.failures) from error
    failures = {rank: d for rank, d in enumerate(described) if d is not None}
    cls = collective_error_class([name for name, _ in failures.values()])
    raise cls(phase, failures) from error


def run(comm, phase: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` on every rank, then agree: the result on success, the same error on every rank otherwise."""
    result: Any = None
    error: BaseException | None = None
    try:
        result = fn()
    except Exception as exc:
        error = exc
    agree(comm, phase, error)
    return result


def gather_and_plan(comm, phase: str, local: Callable[[], Any], plan: Callable[[list[Any]], T], root: int = 0) -> T:
    """Collective: each rank computes ``local()``; ``root`` runs ``plan(all_locals)``; everyone gets the result.

    A failure of ``local`` on any rank, or of ``plan`` on the root, raises the same error on every rank.
    Only the root sees all local values (O(P) memory there, O(1) elsewhere), as in torch.distributed.checkpoint's
    coordinator step.
    """
    try:
        payload: Any = ("ok", local())
    except Exception as exc:
        payload = (_FAILED, _describe(exc))
    gathered = comm.gather(payload, root=root)
    outcome: Any = None
    if comm.Get_rank() == root:
        failures = {r: p[1] for r, p in enumerate(gathered) if p[0] == _FAILED}
        if failures:
            outcome = (_FAILED, failures)
        else:
            try:
                outcome = ("ok", plan([p[1] for p in gathered]))
            except Exception as exc:
                outcome = (_FAILED, {root: _describe(exc)})
    outcome = comm.bcast(outcome, root=root)
    if outcome[0] == _FAILED:
        failures = outcome[1]
        raise collective_error_class([n for n, _ in failures.values()])(phase, failures)
    return outcome[1]


def bcast_from_root(comm, phase: str, fn: Callable[[], T], root: int = 0) -> T:
    """Collective: ``fn`` runs on ``root`` only; its result (or its error) reaches every rank."""
    outcome: Any = None
    if comm.Get_rank() == root:
        try:
            outcome = ("ok", fn())
        except Exception as exc:
            outcome = (_FAILED, {root: _describe(exc)})
    outcome = comm.bcast(outcome, root=root)
    if outcome[0] == _FAILED:
        failures = outcome[1]
        raise collective_error_class([n for n, _ in failures.values()])(phase, failures)
    return outcome[1]
