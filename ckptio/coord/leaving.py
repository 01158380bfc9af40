"""How a collective operation ends when one rank's exception may be its alone: the ``__exit__`` of an object
whose close is collective (:func:`close_on_exit`) and a warning of rank 0 that a warnings filter may turn into an
exception (:func:`warn_from_root`). Both keep the rule of :mod:`ckptio.coord.agreement`: no rank is left in a
collective because another raised."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ckptio import _warn
from ckptio.coord.agreement import run
from ckptio.errors import CheckpointError, ClosedCheckpointError, CollectiveError


def warn_from_root(comm, phase: str, message: str | None, category: type[Warning] = RuntimeWarning) -> None:
    """Collective over ``comm``: rank 0 warns ``message`` (nothing when None or empty; the other ranks' values are
    ignored) inside an agreed phase. A warnings filter that turns it into an exception (``python -W error``) then
    raises it on every rank, instead of on rank 0 alone while the others wait in the next collective."""
    def emit() -> None:
        """Local: the warning, on rank 0."""
        if message and comm.Get_rank() == 0:
            _warn.warn(message, category)

    run(comm, phase, emit)


def close_on_exit(close: Callable[[BaseException | None], None], exc: BaseException | None) -> None:
    """Collective over the object's communicator (through ``close``): the ``__exit__`` of an object whose close is
    collective (the readers), ``close(exc)`` on every rank. An
    exception that ends the with-block (also ``sys.exit()`` or Ctrl-C) may be this rank's alone: ``close`` tells
    the other ranks, which are, or will be, in their own close. Then the original exception goes on, unless the
    close raised something new meanwhile (a signal held during it), which wins."""
    try:
        close(exc)
    except BaseException as close_exc:
        if exc is None or (close_exc is not exc and not isinstance(close_exc, CheckpointError)):
            raise


@contextmanager
def noting_ranks_that_left(note: Callable[[str], None]) -> Iterator[None]:
    """Local, around a reader's collective read: when the read fails on every rank because some ranks closed the
    reader meanwhile (their close met this read: :func:`ckptio.coord.agreement.agree` with ``closing``), call
    ``note("rank 1")`` (or ``"ranks 1, 3"``) before the error goes on. Those ranks take part in no further read,
    so the next one must not start a collective they would never enter (:func:`raise_if_left`); the reader's own
    close is still collective with theirs."""
    try:
        yield
    except CollectiveError as exc:
        if isinstance(exc, ClosedCheckpointError):
            ranks = sorted(r for r, failure in exc.failures.items() if failure[0] == "ClosedCheckpointError")
            note(f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}")
        raise


def raise_if_left(path: str, left_by: str | None) -> None:
    """Local: ClosedCheckpointError when other ranks closed the reader of ``path`` during an earlier read
    (:func:`noting_ranks_that_left`): every rank that saw that read fail gets it alike, and only close() is left."""
    if left_by is not None:
        raise ClosedCheckpointError(f"checkpoint {path}: read after {left_by} closed it during an earlier read "
                                    "(a read needs every rank): only close() is left")
