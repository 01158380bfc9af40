"""Python's cyclic garbage collector paused while a rank runs a collective checkpoint operation. Local.

A checkpoint of 10,000 small variables makes hundreds of thousands of short-lived Python objects on every rank
(declarations, plans, block tables, the document) and on the planning rank holds them all at once: the collector's
generation-2 passes over them, triggered by allocation counts at arbitrary points, took 30% of such a write on a
2-core machine (10,000 x 1 KiB on 4 ranks: 120 against 82 us per variable, 2026-12-03), and at 30,000 ranks made the
planning rank's phases grow faster than the job. ckptio's objects hold no reference cycles; reference counting
frees them as they go, and whatever cycles the caller's code makes meanwhile are collected once the operation
returns.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

F = TypeVar("F", bound=Callable)


_lock = threading.Lock()
_depth = 0  # pauses under way, in every thread (a background checkpoint's I/O thread pauses too)
_was_enabled = False  # whether the collector ran when the first of them began


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Local, any rank, any thread: no cyclic garbage collection inside. Pauses are counted across threads: the
    collector comes back when the last one ends, and only if it ran when the first began (an I/O thread's
    short pause ending inside the main thread's restart leaves the restart paused; a caller's own
    ``gc.disable()`` before the first pause stays)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()


def without_gc(fn: F) -> F:
    """``fn`` run inside :func:`gc_paused` when called from the main thread (the engine's collective entry
    points: a write, a restart's open and read). In a helper thread (a background checkpoint's I/O thread,
    :mod:`ckptio.tiers.async_io`) ``fn`` runs as it is: the collector is the process's, and the simulation goes on
    in the main thread for the whole of a background write (the short phases that pause it themselves still
    do)."""

    @functools.wraps(fn)
    def paused(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            return fn(*args, **kwargs)
        with gc_paused():
            return fn(*args, **kwargs)

    return paused  # type: ignore[return-value]
