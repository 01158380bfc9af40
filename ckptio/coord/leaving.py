"""How a collective operation ends when one rank's exception may be its alone: the ``__exit__`` of an object
whose close is collective (:func:`close_on_exit`) and a warning of rank 0 that a warnings filter may turn into an
exception (:func:`warn_from_root`). Both keep the rule of :mod:`ckptio.coord.agreement`: no rank is left in a
collective because another raised."""

from __future__ import annotations

from collections.abc import Callable

from ckptio import _warn
from ckptio.coord.agreement import run
from ckptio.errors import CheckpointError


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
