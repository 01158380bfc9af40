"""Agreement: collectives that turn an exception on any rank into the same error on every rank.

Every collective phase of ckptio follows the pattern *local work -> agreement -> next collective*, so no
rank ever enters an MPI collective that another rank will not reach because it raised. The public functions
here are collective over ``comm`` (every rank calls them, in the same order) unless their docstring says
"Local". This is today's (and issue 24's "keep what is good") error agreement, moved
unchanged into the coordination package (:mod:`ckptio.coord`): ``from ckptio import coord; coord.run(...)``
reaches it through the package.

*Any* exception counts as a failure, not only :class:`Exception`: ``SystemExit`` (``sys.exit()``),
``KeyboardInterrupt`` (Ctrl-C) and whatever a signal handler raises. The other ranks then raise a
:class:`~ckptio.errors.CollectiveError` naming the rank and the cause, and the rank where it happened gets its
original exception back once the others know, so ``sys.exit(3)`` still exits with status 3 and Ctrl-C is
still a ``KeyboardInterrupt``. (An ordinary ``Exception`` becomes the same CollectiveError on every rank,
its own rank included; one that a held signal's handler raised comes back to its rank when the collective
operation ends: :func:`ckptio.coord.held_signals.collective_section`.)

Signals that arrive during a collective operation are held back and delivered at the agreement points here
(:mod:`ckptio.coord.held_signals`).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ckptio.coord.held_signals import _phase_work, deliver_held_signals
from ckptio.errors import CollectiveError, DeclarationError, collective_error_class

T = TypeVar("T")

_FAILED = "__ckptio_failed__"
def _describe(exc: BaseException) -> tuple[str, str, str]:
    """Local: ``(error class name, message, host)`` of a rank's failure, as the other ranks will be told of it."""
    cls = type(exc)
    name = cls.__name__
    if isinstance(exc, CollectiveError):
        # re-raise of an already collective error: keep the original failures' text
        bases = [b.__name__ for b in cls.__mro__ if b.__module__ == "ckptio.errors" and b is not cls]
        name = next((b for b in bases if b not in ("CollectiveError", "CheckpointError")), name)
    if cls.__module__.startswith("mpi4py"):
        name = "Exception"  # MPI errors: the file system refused (ENOSPC, EACCES, ...)
    message = str(exc)
    if isinstance(exc, SystemExit):
        message = f"the program called sys.exit({exc.code!r}) on this rank"
    elif isinstance(exc, KeyboardInterrupt):
        message = message or "interrupted (Ctrl-C or SIGINT) on this rank"
    elif not isinstance(exc, Exception):
        message = message or f"{name} on this rank"
    return name, message, socket.gethostname()  # (the node a failure happened on)


def _reraise_own(error: BaseException | None) -> None:
    """Local: on the rank where a non-``Exception`` happened (SystemExit, KeyboardInterrupt, ...): raise it again,
    now that every rank knows, so that it keeps its meaning (exit status, interrupt). (What a signal handler raised
    comes back to its rank at the end of the collective operation: coord.held_signals.collective_section.)"""
    if error is not None and not isinstance(error, Exception):
        raise error


_CLOSING = 1 << 20  # in agree()'s sum: one closing rank (a job has fewer than 2**20 ranks failing at once)


def agree(comm, phase: str, error: BaseException | None, closing: bool = False) -> None:
    """Collective over ``comm``: raise on every rank if ``error`` is set on any rank. Cheap when no rank failed.

    A signal held by :func:`collective_section` is delivered first; what its handler raises counts as this
    rank's ``error``. ``closing``: this rank is closing the object the collective belongs to (``Reader.close``)
    and meets the others wherever they are next; if some ranks close while the others are in another phase of
    it (a read), every rank raises, naming the ranks that closed, instead of the readers going on into a
    collective the closed ranks will never enter."""
    from ckptio.coord.mpi import MPI

    if error is None:
        error = deliver_held_signals()
    total = comm.allreduce((1 if error is not None else 0) + (_CLOSING if closing else 0), op=MPI.SUM)
    failed, nclosing = total % _CLOSING, total // _CLOSING
    if failed == 0 and nclosing in (0, comm.Get_size()):
        return
    if failed:
        mine = None if error is None else _describe(error)
    else:  # a mismatch: the closing ranks are the failures
        mine = ("ClosedCheckpointError", "closed it (close() or the end of its `with` block) while other ranks "
                "were still reading; every rank must make the same collective calls") if closing else None
    described = comm.allgather(mine)
    _reraise_own(error)
    if isinstance(error, CollectiveError) and all(d is not None and d[:2] == described[0][:2] for d in described):
        # every rank failed with the same collective error (an inner phase already agreed): name this phase
        # too, without repeating the inner failures once per rank
        raise type(error)(f"{phase}: {error.phase}", error.failures, error.planner) from error
    failures = {rank: d for rank, d in enumerate(described) if d is not None}
    cls = collective_error_class([name for name, *_ in failures.values()])
    raise cls(phase, failures) from error


def count_ranks(comm, phase: str, local: Callable[[], Sequence[bool]]) -> tuple[int, ...]:
    """Collective over ``comm``: ``local()`` runs on every rank and returns a few flags (the same number on every
    rank); for each flag, the number of ranks where it was true, the same on every rank (so
    ``if count_ranks(...)[0]`` takes the same branch everywhere). One allreduce of one integer when no rank
    failed: cheap enough for every time step. A failure of ``local`` (or of a held signal's handler) on any rank
    raises the same error on every rank, as :func:`agree` does; a held signal is delivered after ``local()``
    ran (its collective calls are made on every rank) and counts as this rank's failure."""
    from ckptio.coord.mpi import MPI

    flags: Sequence[bool] = ()
    error: BaseException | None = None
    try:
        with _phase_work():
            flags = tuple(bool(f) for f in local())
    except BaseException as exc:  # see run()
        error = exc
    # a held signal is delivered AFTER local() ran, as run() does: local() may make a collective call the other
    # ranks make too (engine.steps runs a backend's step there, e.g. PnetCDF's wait_all); skipping it on the one
    # rank the signal reached left the others inside that call, and the job hung until the signal's grace ran out
    held = deliver_held_signals()
    error = error if error is not None else held
    packed = (1 if error is not None else 0) + sum(_CLOSING << (20 * i) for i, f in enumerate(flags) if f)
    total = comm.allreduce(packed, op=MPI.SUM)
    if total % _CLOSING:  # some rank failed: every rank knows, and agree() names the failures everywhere
        agree(comm, phase, error)
    return tuple((total >> (20 * (i + 1))) % _CLOSING for i in range(len(flags)))


def sum_min_max(comm, value: int) -> tuple[int, int, int]:
    """Collective over ``comm``: the sum, minimum and maximum of an integer over the ranks, the same on every rank
    (statistics such as the bytes each rank wrote). Two allreduces of int64 arrays; no rank can fail between
    them, so they need no agreement (call it after the phase that produced ``value`` agreed)."""
    import numpy as np

    from ckptio.coord.mpi import MPI

    extremes = np.array([value, -value], np.int64)
    comm.Allreduce(MPI.IN_PLACE, extremes, op=MPI.MAX)
    total = np.array([value], np.int64)
    comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
    return int(total[0]), int(-extremes[1]), int(extremes[0])


def merge_in_rank_order(comm, phase: str, local: Callable[[], T], merge: Callable[[T, T], T]) -> T:
    """Collective over ``comm``: ``local()`` runs on every rank; every rank gets ``merge`` applied over the ranks'
    values in rank order (``merge(merge(v0, v1), v2) ...``, associative, not necessarily commutative). A failure
    of ``local`` (or of ``merge``) on any rank raises the same error on every rank, as :func:`gather_and_plan`.

    One object allreduce: mpi4py reduces Python objects over a binomial tree (``mpi4py.rc.fast_reduce``, its
    default) keeping rank order, then broadcasts the result, so a rank receives O(log P) merged values and no rank
    holds every rank's value: for summaries whose merged size does not grow with the job (a staged checkpoint's
    variables, merged from every rank's manifest)."""
    own: BaseException | None = deliver_held_signals()
    try:
        if own is not None:
            raise own
        with _phase_work():
            value: Any = ("ok", local())
    except BaseException as exc:  # see run()
        own = exc
        value = (_FAILED, {comm.Get_rank(): _describe(exc)})

    def ordered(a: Any, b: Any) -> Any:
        """Local, inside the reduction: merge two partial results, or collect the failures of either."""
        if a[0] == _FAILED or b[0] == _FAILED:
            return (_FAILED, {**(a[1] if a[0] == _FAILED else {}), **(b[1] if b[0] == _FAILED else {})})
        try:
            return ("ok", merge(a[1], b[1]))
        except Exception as exc:  # a bug in merge: every rank that receives this partial result learns of it
            return (_FAILED, {comm.Get_rank(): _describe(exc)})

    return _result(phase, comm.allreduce(value, op=ordered), own)


def run(comm, phase: str, fn: Callable[[], T]) -> T:
    """Collective over ``comm``: run ``fn`` on every rank, then agree: the result on success, the same error on
    every rank otherwise."""
    result: Any = None
    error: BaseException | None = None
    try:
        with _phase_work():
            result = fn()
    except BaseException as exc:  # any exception is a failure every rank must learn of
        error = exc
    agree(comm, phase, error)
    return result


def gather_and_plan(comm, phase: str, local: Callable[[], Any], plan: Callable[[list[Any]], T], root: int = 0) -> T:
    """Collective over ``comm``: each rank computes ``local()``; ``root`` runs ``plan(all_locals)``; everyone gets
    the result.

    A failure of ``local`` on any rank, or of ``plan`` on the root, raises the same error on every rank.
    Only the root sees all local values (O(P) memory there, O(1) elsewhere), as in torch.distributed.checkpoint's
    coordinator step.
    """
    own: BaseException | None = deliver_held_signals()
    try:
        if own is not None:
            raise own
        with _phase_work():
            payload: Any = ("ok", local())
    except BaseException as exc:  # see run()
        own = exc
        payload = (_FAILED, _describe(exc))
    gathered = comm.gather(payload, root=root)
    outcome: Any = None
    if comm.Get_rank() == root:
        failures = {r: p[1] for r, p in enumerate(gathered) if p[0] == _FAILED}
        if failures:
            outcome = (_FAILED, failures)
        else:
            outcome, own = _on_root(comm, root, lambda: plan([p[1] for p in gathered]), planning=True)
    return _result(phase, comm.bcast(outcome, root=root), own)


def _on_root(comm, root: int, fn: Callable[[], T], planning: bool = False) -> tuple[Any, BaseException | None]:
    """Local, ``root`` only: run ``fn`` (after delivering a held signal) -> ``(("ok", result) or (failed, who[,
    planner]), own exception or None)``; other ranks get ``(None, None)``. ``planning``: ``fn`` checks and plans
    what every rank gave, so a :class:`ckptio.errors.DeclarationError` it raises is the root's finding about the
    ranks' declarations (:class:`ckptio.errors.CollectiveError` ``planner``), not the root's own failure; any
    other failure there (a file system refusing rank 0, a held signal's handler, a bug) stays rank 0's."""
    if comm.Get_rank() != root:
        return None, None
    try:
        own = deliver_held_signals()
        if own is not None:
            raise own
        with _phase_work():
            return ("ok", fn()), None
    except BaseException as exc:  # see run()
        failed = {root: _describe(exc)}
        return ((_FAILED, failed, root) if planning and isinstance(exc, DeclarationError) else (_FAILED, failed)), exc


def _result(phase: str, outcome: Any, own: BaseException | None) -> Any:
    """Local, every rank alike: the result of an ``("ok", value)`` outcome, or the same error as every rank."""
    if outcome[0] == _FAILED:
        _reraise_own(own)
        failures = outcome[1]
        planner = outcome[2] if len(outcome) > 2 else None
        raise collective_error_class([n for n, *_ in failures.values()])(phase, failures, planner)
    return outcome[1]


def bcast_from_root(comm, phase: str, fn: Callable[[], T], root: int = 0) -> T:
    """Collective over ``comm``: ``fn`` runs on ``root`` only; its result (or its error) reaches every rank.

    A signal held on another rank stays held until the next agreement point (or the end of the section)."""
    outcome, own = _on_root(comm, root, fn)
    return _result(phase, comm.bcast(outcome, root=root), own)


def scatter_from_root(comm, phase: str, fn: Callable[[], list[Any]], root: int = 0) -> Any:
    """Collective over ``comm``: ``fn`` runs on ``root`` only and returns one payload per rank; rank ``r`` gets
    the ``r``-th (or, if ``fn`` failed, the same error as every rank). Each rank receives only its own payload, so
    what a rank receives does not grow with the job unless its own share does (the restart aggregators' rows)."""
    size = comm.Get_size()

    def payloads() -> list[Any]:
        """Local, root only: ``fn``'s payloads, one per rank."""
        values = fn()
        if len(values) != size:
            raise ValueError(f"{phase}: {len(values)} payloads for {size} ranks")
        return values

    outcome, own = _on_root(comm, root, payloads)
    if outcome is not None:
        outcome = [("ok", v) for v in outcome[1]] if outcome[0] == "ok" else [outcome] * size
    return _result(phase, comm.scatter(outcome, root=root), own)
