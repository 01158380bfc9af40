"""Signal holding during collective operations (moved out of :mod:`ckptio.coord.agreement`, which delivers the
held signals at its agreement points).

A signal handler's exception can appear between any two bytecodes, also between two collectives of one
operation, where no agreement can catch it. :func:`collective_section` (entered by ``Writer.close`` and by every
collective method of ``Reader``) therefore holds back the signals that have a Python handler while the operation
runs, in the main thread, and :func:`deliver_held_signals` runs their handlers at the next agreement point (every
agreement of :mod:`ckptio.coord.agreement` checks first, except inside the work of another phase, see
:func:`_phase_work`): the handler runs there, and its exception is that rank's failure for the phase. A signal
still held at the end of the section is delivered then, after the last collective. :class:`_Watchdog` bounds the
wait of a rank that holds a signal while the others left. Everything here is local (no MPI).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

# Signals that commonly carry a Python handler (SIGINT: KeyboardInterrupt by default). SIGKILL and SIGSTOP
# cannot be caught; a signal left at SIG_DFL kills the process, which mpirun turns into a job abort.
_HELD_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2",
                                                   "SIGALRM") if hasattr(signal, n))


class _Held:
    """State of the (main-thread) collective section: nesting depth, original handlers, held signals."""

    depth = 0
    handlers: dict[int, Any] = {}
    pending: list[int] = []
    inner = 0  # > 0 while the work of a phase runs: its own (backend-internal) agreements deliver nothing
    serial = 0  # outermost sections entered so far
    progress = 0  # agreement points the main thread reached so far (deliver_held_signals calls)
    raised: BaseException | None = None  # the first ordinary exception a handler raised in this section


def _record(signum: int, frame) -> None:
    """Local (the held signals' handler): remember the signal for the next agreement point."""
    _Held.pending.append(signum)


class _Watchdog:
    """Bounds the wait of a rank that holds a signal inside a collective operation (issue 23: SIGTERM to every
    rank of an async job hung 1 of 65 trials; reproduced here, 2 of 9 under load).

    The hang: a rank whose signal arrives outside any ckptio call runs its handler at once and leaves (its
    ``sys.exit`` ends the program); a rank whose signal arrives inside ``Writer.close()`` holds it until the next
    agreement, which is a collective with the rank that left: it waits inside MPI forever, and Python runs no
    signal handler while the main thread is inside a C call. So the held signal is watched from another thread:
    during a collective section the interpreter's wakeup fd (``signal.set_wakeup_fd``) is a pipe this thread
    reads, which receives the signal's number even while the main thread is blocked in MPI. From then until
    the section ends, the main thread must reach an agreement point at least every ``CKPTIO_SIGNAL_GRACE``
    seconds (default 60; 0: wait forever, the old behaviour); a stall that long (also inside the agreement that
    reports the signal's exception to ranks that left) makes the process say why on stderr and end with status
    128 + signal, as the signal's default action would; mpirun or the batch system then ends the job. The price:
    a single phase longer than the grace (a write of many GiB) after a signal ends the job without its
    checkpoint, which the signal (usually the batch system's SIGTERM before its SIGKILL) was ending anyway. Bytes meant
    for a wakeup fd someone else had set (asyncio) are passed on to it."""

    lock = threading.Lock()
    pipe: tuple[int, int] | None = None
    previous_fd = -1  # the wakeup fd set before the section (forwarded to)
    timer: threading.Timer | None = None

    installed = False  # the wakeup fd is this watchdog's pipe (during a section)
    said_unwatched = False  # _unwatched wrote its line

    @classmethod
    def start_section(cls) -> None:
        """Local, main thread: entering the outermost section. Never raises: it runs before the section's first
        agreement, where an error on one rank would leave the others waiting for it. Without a pipe or a thread
        (no file descriptor or thread left: a process at its limits) the section runs unwatched, as with
        ``CKPTIO_SIGNAL_GRACE=0``, and says so once."""
        if cls.pipe is None:
            try:
                r, w = os.pipe()
            except OSError as exc:
                cls._unwatched(exc)
                return
            try:
                os.set_blocking(w, False)
                threading.Thread(target=cls._watch, args=((r, w),), name="ckptio-signal-watchdog",
                                 daemon=True).start()
            except (OSError, RuntimeError) as exc:  # RuntimeError: "can't start new thread"
                os.close(r)
                os.close(w)
                cls._unwatched(exc)
                return
            cls.pipe = (r, w)
        try:
            cls.previous_fd = signal.set_wakeup_fd(cls.pipe[1], warn_on_full_buffer=False)
            cls.installed = True
        except ValueError:  # pragma: no cover - not the main thread (checked by the caller)
            cls.previous_fd = -1

    @classmethod
    def _unwatched(cls, exc: BaseException) -> None:
        """Local: the section runs without the watchdog (said on stderr the first time)."""
        if not cls.said_unwatched:
            cls.said_unwatched = True
            with contextlib.suppress(Exception):
                sys.stderr.write(f"ckptio: cannot watch held signals during collective operations ({exc}); a "
                                 "signal arriving while other ranks have left may leave this rank waiting\n")

    @classmethod
    def end_section(cls) -> None:
        """Local, main thread: leaving the outermost section (every held signal is delivered right after)."""
        if cls.installed:
            with contextlib.suppress(ValueError):
                signal.set_wakeup_fd(cls.previous_fd)
            cls.installed = False
        cls.previous_fd = -1
        with cls.lock:
            if cls.timer is not None:
                cls.timer.cancel()
                cls.timer = None

    @classmethod
    def _watch(cls, pipe: tuple[int, int]) -> None:
        """Local, the watchdog thread: read signal numbers from the wakeup pipe, arm the timer for held ones."""
        while True:
            try:
                data = os.read(pipe[0], 64)
            except OSError:  # pragma: no cover
                return
            for signum in data:
                if cls.previous_fd >= 0:
                    with contextlib.suppress(OSError):
                        os.write(cls.previous_fd, bytes([signum]))
                if signum in _Held.handlers:
                    cls._arm(signum)

    @classmethod
    def _arm(cls, signum: int) -> None:
        """Local, the watchdog thread: start the grace timer of a held signal (once per section)."""
        from ckptio import settings

        try:
            grace = float(settings.get("CKPTIO_SIGNAL_GRACE"))
        except Exception:  # a bad value: the default (raised where it is read collectively)
            grace = float(settings.TABLE["CKPTIO_SIGNAL_GRACE"].default)
        with cls.lock:
            if grace > 0 and cls.timer is None and _Held.depth > 0:
                cls._start_timer(signum, grace, _Held.serial, _Held.progress)

    @classmethod
    def _start_timer(cls, signum: int, grace: float, serial: int, progress: int) -> None:
        """Local, under ``cls.lock``: (re)start the grace timer."""
        cls.timer = threading.Timer(grace, cls._overdue, args=(signum, grace, serial, progress))
        cls.timer.daemon = True
        cls.timer.start()

    @classmethod
    def _overdue(cls, signum: int, grace: float, serial: int, progress: int) -> None:
        """Local, the timer thread: end the process if the main thread made no progress during the grace."""
        with cls.lock:
            if cls.timer is None or _Held.depth == 0 or _Held.serial != serial:
                return  # the section ended (its signals were delivered)
            if _Held.progress != progress:  # the main thread reached an agreement point since: watch on
                cls._start_timer(signum, grace, serial, _Held.progress)
                return
        name = signal.Signals(signum).name if signum in {s.value for s in signal.Signals} else str(signum)
        try:
            sys.stderr.write(f"ckptio: {name} arrived {grace:g} s ago during a collective operation, which has not "
                             "reached its next agreement point since (other ranks probably left); ending this "
                             f"process (exit status {128 + signum}) instead of waiting forever. "
                             "CKPTIO_SIGNAL_GRACE sets the seconds (0: wait)\n")
            sys.stderr.flush()
        finally:
            os._exit(128 + signum)


@contextlib.contextmanager
def collective_section() -> Iterator[None]:
    """Local: hold back signals with a Python handler for the duration of one collective operation (see the
    module docstring). Re-entrant; does nothing outside the main thread (where Python delivers no signals).

    An ordinary exception a held signal's handler raised at an agreement point is this rank's failure there: every
    rank raises the same CollectiveError (so code inside the operation that falls back on such an error, e.g.
    a restart trying an older staged copy, does so on every rank alike). When the outermost section ends, that
    rank raises the handler's own exception instead (chained to what the operation raised), as the program
    would have seen it without ckptio holding the signal: its ``except Preempted`` catches it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _Held.depth > 0:  # nested (a Reader inside Writer.close): the outer section holds the signals
        _Held.depth += 1
        try:
            yield
        finally:
            _Held.depth -= 1
        return
    handlers: dict[int, Any] = {}
    for signum in _HELD_SIGNALS:
        current = signal.getsignal(signum)
        if callable(current):
            handlers[signum] = current
            signal.signal(signum, _record)
    _Held.depth, _Held.handlers, _Held.pending, _Held.raised = 1, handlers, [], None
    _Held.serial += 1
    if handlers:
        _Watchdog.start_section()
    leaving = False  # the operation ends with SystemExit or KeyboardInterrupt: that is what the rank raises
    try:
        yield
    except BaseException as exc:
        leaving = not isinstance(exc, Exception)
        raise
    finally:
        _Held.depth = 0
        if handlers:
            _Watchdog.end_section()
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        pending, _Held.pending, _Held.handlers = _Held.pending, [], {}
        raised, _Held.raised = _Held.raised, None
        for signum in pending:  # not consumed by an agreement: deliver now, after the last collective
            handler = handlers.get(signum)
            if callable(handler):
                handler(signum, None)
        if raised is not None and not leaving:  # see deliver_held_signals
            raise raised


def deliver_held_signals() -> BaseException | None:
    """Local: run the handlers of the signals held so far; the first exception one raised (this rank's
    failure for the current phase), or None. Called at every agreement point."""
    if threading.current_thread() is not threading.main_thread():
        return None
    _Held.progress += 1  # the main thread is alive at an agreement point (see _Watchdog)
    if not _Held.pending or _Held.inner:
        return None
    pending, _Held.pending = _Held.pending, []
    for signum in pending:
        handler = _Held.handlers.get(signum)
        try:
            if callable(handler):
                handler(signum, None)
        except BaseException as exc:  # whatever the handler raises is this rank's failure
            if isinstance(exc, Exception) and _Held.raised is None:
                _Held.raised = exc  # raised again when the outermost section ends (collective_section)
            return exc
    return None


@contextlib.contextmanager
def _phase_work() -> Iterator[None]:
    """Local: around the local work of a phase: a backend's own agreements inside it (e.g. around creating its file)
    must not turn a held signal into a failure, because the backend may not undo what it did before them (an
    open HDF5 file, whose close is collective). The signal is delivered at the phase's own agreement, where
    the writer or reader cleans up on every rank alike."""
    main = threading.current_thread() is threading.main_thread()
    _Held.inner += main
    try:
        yield
    finally:
        _Held.inner -= main
