"""Running under a batch system: leave cleanly before the wall-clock limit, and requeue (issue 25).

A job with a time limit is killed at the limit (Slurm: SIGCONT + SIGTERM to every process, SIGKILL ``KillWait``
seconds later). With ``#SBATCH --signal=USR1@120`` Slurm warns the tasks first; its limit checks run every 30 s,
so the warning comes 120..150 s before the limit (docs/guide/batch.md has the measured behaviour). This module
turns that into one collective question a simulation asks every step::

    series = ckptio.Series("run", comm)
    series.should_exit()                      # once at start: installs the signal handlers (returns False)
    while step < nsteps:
        step = advance(state)
        if step % every == 0:
            write_checkpoint(series, step)
        if series.should_exit():              # the same answer on every rank
            if step % every:
                write_checkpoint(series, step)  # the final checkpoint
            series.wait()                     # async/staged checkpoints in flight: committed (or raise)
            ckptio.tiers.batch.requeue(comm)        # or leave the requeue to the job script
            break

:func:`should_exit` is true on every rank once

* one of the signals (default SIGUSR1 and SIGTERM; ``signals=`` or ``CKPTIO_EXIT_SIGNALS``) arrived on ANY rank
  since the handlers were installed (with ``mpirun`` inside ``sbatch`` Slurm may signal only some ranks), or
* the remaining wall time of the job is shorter than the last checkpoint's duration plus ``margin`` (default
  30 s, or ``CKPTIO_EXIT_MARGIN``) on any rank. The job's end time is asked from Slurm once per process, by rank 0
  at the first call (``SLURM_JOB_END_TIME`` where Slurm sets it, else ``squeue -j $SLURM_JOB_ID -o %L``, which
  Slurm 22.05 needs: it has no such variable); a time limit changed later is not seen.

Once true, it stays true. Outside a batch system (no ``SLURM_JOB_ID``) only the signals count.

Signals: the handlers are installed by :func:`install` (also by the first :func:`should_exit`) and only from the
main thread (Python runs handlers there only). Each one records the signal and then calls the handler that was
installed before it, if that was a Python callable; SIG_DFL and SIG_IGN are not called (the default action of
SIGUSR1/SIGTERM is to die, which is what the handler is there to prevent). While ckptio writes or reads a
checkpoint, :func:`ckptio.coord.collective_section` holds the signals back and runs the handler at its next
agreement point: the checkpoint in progress is not disturbed.

Ranks: :func:`install`, :func:`uninstall`, :func:`forget_job`, :func:`received`, :func:`last_decision` are local;
:func:`should_exit`, :func:`job_end_time` and :func:`requeue` are collective over ``comm`` (every rank calls them,
in the same order; an error on any rank is raised on every rank, through :mod:`ckptio.coord`).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ckptio import _warn, coord, settings
from ckptio.settings import parse_signals  # noqa: F401 - (the signal names are parsed with the other settings)

SQUEUE_TIMEOUT = 20.0  # seconds: a slurmctld that does not answer makes the time unknown, not the run hang

_UNSET: Any = object()


@dataclass(frozen=True)
class Decision:
    """What the last :func:`should_exit` found (the same on every rank): how many ranks had received a signal,
    how many found the remaining time too short, and this rank's view of the time (None: no time limit known)."""

    signal_ranks: int
    time_ranks: int
    remaining: float | None
    needed: float

    @property
    def exit(self) -> bool:
        return self.signal_ranks > 0 or self.time_ranks > 0

    def __str__(self) -> str:
        why = []
        if self.signal_ranks:
            why.append(f"a signal arrived on {self.signal_ranks} rank(s)")
        if self.time_ranks:
            why.append(f"the remaining wall time is shorter than {self.needed:.1f} s (last checkpoint + margin) "
                       f"on {self.time_ranks} rank(s)")
        if self.remaining is not None:
            why.append(f"{self.remaining:.1f} s left before the time limit")
        return "; ".join(why) or "no reason to exit"


class _State:
    """Process-wide: the installed handlers, the signals received, the job's end time, the sticky decision."""

    previous: dict[int, Any] = {}
    received: list[int] = []
    end_time: Any = _UNSET  # float (epoch seconds), None (no limit / not in a job) or _UNSET (not asked yet)
    decided: Decision | None = None  # the first Decision that said exit (sticky; the same on every rank)
    last: Decision | None = None
    exit_hook = False  # _ignore_at_exit registered (once per process)


def _handler(signum: int, frame) -> None:
    _State.received.append(signum)
    previous = _State.previous.get(signum)
    if callable(previous):
        previous(signum, frame)


def signals_from_env() -> tuple[int, ...]:
    """``CKPTIO_EXIT_SIGNALS`` (e.g. ``USR1,TERM``, ``SIGUSR2``, ``none``; default USR1,TERM, see the table in
    :mod:`ckptio.settings`). Raises DeclarationError (a ValueError) for an unknown or uncatchable name."""
    return settings.get("CKPTIO_EXIT_SIGNALS")


def install(signals: Iterable[int] | None = None) -> None:
    """Local, main thread only: install the recording handler for ``signals`` (None: :func:`signals_from_env`).
    Idempotent; signals already handled stay handled. Raises RuntimeError outside the main thread (Python runs
    signal handlers only there)."""
    wanted = signals_from_env() if signals is None else tuple(int(s) for s in signals)
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("ckptio.tiers.batch.install: call it from the main thread (Python delivers signals only "
                           "there); the first should_exit() installs the handlers if it runs there")
    for signum in wanted:
        if signum in _State.previous:
            continue
        current = signal.getsignal(signum)
        if current is _handler:  # installed before a reload of this state: nothing to chain to
            current = signal.SIG_DFL
        signal.signal(signum, _handler)
        _State.previous[signum] = current
    if not _State.exit_hook:
        atexit.register(_ignore_at_exit)
        _State.exit_hook = True


def _ignore_at_exit() -> None:
    """Local, at interpreter exit (``atexit``, before the interpreter's signal finalization and MPI's): the signals
    still handled here are ignored from now on. The finalization gives a signal with a Python handler its default
    action back (not an ignored one), and a warning that arrived then ended a job that had finished its work with
    128 + signal (a Slurm test in CI, 2026-12-06: SIGUSR1 while the last requeued run exited; Slurm marked the
    job FAILED). Ignored, not blocked: a signal sent to the process goes to any thread that does not block it."""
    for signum in _State.previous:
        if signal.getsignal(signum) is _handler:
            signal.signal(signum, signal.SIG_IGN)


def uninstall() -> None:
    """Local, main thread only: put back the handlers :func:`install` replaced; forget received signals and the
    decision (the next :func:`should_exit` starts afresh)."""
    for signum, previous in _State.previous.items():
        signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
    _State.previous, _State.received = {}, []
    _State.decided = _State.last = None


def forget_job() -> None:
    """Local: forget the job's end time and the decision, as if this process had just started (the next
    :func:`should_exit` asks Slurm again); the handlers stay. For a process that outlives one job (tests)."""
    _State.end_time = _UNSET
    _State.decided = _State.last = None


def installed() -> tuple[int, ...]:
    """Local: the signals whose handler is installed."""
    return tuple(_State.previous)


def received() -> tuple[int, ...]:
    """Local: the signals received on this rank since :func:`install`, in order."""
    return tuple(_State.received)


def last_decision() -> Decision | None:
    """Local: the outcome of the last :func:`should_exit` (the first one that said exit, once one did)."""
    return _State.decided or _State.last


# ------------------------------------------------------------------------------------------------ wall time
def parse_time_left(text: str) -> float | None:
    """squeue's ``%L`` (``[days-]hours:minutes:seconds``, ``minutes:seconds``) -> seconds; None for
    ``UNLIMITED``/``NOT_SET``/``INVALID``. Raises ValueError for anything else."""
    text = text.strip()
    if text.upper() in ("UNLIMITED", "NOT_SET", "INVALID", "INFINITE"):
        return None
    days, _, clock = text.rpartition("-")
    parts = clock.split(":")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts) or (days and not days.isdigit()):
        raise ValueError(f"squeue time left {text!r}: expected [days-]hours:minutes:seconds")
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return float(seconds + 86400 * int(days or 0))


def lookup_end_time() -> float | None:
    """Local (rank 0 calls it for everyone): the job's end time in epoch seconds, None outside a Slurm job or
    without a limit. ``SLURM_JOB_END_TIME`` if set, else ``squeue``; if squeue fails, a warning and None (the
    run goes on, only the signals count)."""
    env = os.environ.get("SLURM_JOB_END_TIME")
    if env:
        try:
            return float(env)
        except ValueError:
            _warn.warn(f"ckptio.tiers.batch: SLURM_JOB_END_TIME={env!r} is not a number; ignored")
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    squeue = shutil.which("squeue")
    if squeue is None:
        _warn.warn("ckptio.tiers.batch: SLURM_JOB_ID is set but squeue is not on PATH: the job's end time is "
                      "unknown, only the signals count")
        return None
    try:
        now = time.time()
        out = subprocess.run([squeue, "-h", "-j", job, "-o", "%L"], capture_output=True, text=True,
                             timeout=SQUEUE_TIMEOUT, stdin=subprocess.DEVNULL)
        if out.returncode != 0 or not out.stdout.strip():
            raise RuntimeError(out.stderr.strip() or f"exit status {out.returncode}, no output")
        left = parse_time_left(out.stdout.splitlines()[0])
    except (OSError, subprocess.TimeoutExpired, RuntimeError, ValueError) as exc:
        _warn.warn(f"ckptio.tiers.batch: squeue -j {job} failed ({exc}): the job's end time is unknown, only the "
                      "signals count")
        return None
    return None if left is None else now + left


def job_end_time(comm) -> float | None:
    """Collective (the first call; later calls are local and return the cached value): the job's end time,
    looked up by rank 0 (:func:`lookup_end_time`) and broadcast."""
    if _State.end_time is _UNSET:
        _State.end_time = coord.bcast_from_root(comm, "ckptio.tiers.batch: the job's end time", lookup_end_time)
    return _State.end_time


def checkpoint_seconds(writer: Any) -> float:
    """Local: how long the checkpoint of ``writer`` (a Writer, or None) took on this rank, from its statistics:
    the whole close of a synchronous one; stage plus drain of a staged one; the background write of an
    asynchronous one once committed (0 while it runs, or for None)."""
    if writer is None:
        return 0.0
    seconds = getattr(getattr(writer, "stats", None), "seconds", None) or {}
    return float(seconds.get("stage", 0.0)) + float(seconds.get("total", 0.0))


def margin_from_env() -> float:
    """``CKPTIO_EXIT_MARGIN`` (seconds, >= 0) (default 30: :mod:`ckptio.settings`)."""
    return settings.get("CKPTIO_EXIT_MARGIN")


# ------------------------------------------------------------------------------------------------ the check
def should_exit(comm, last_checkpoint: Any = None, margin: float | None = None,
                signals: Iterable[int] | None = None) -> bool:
    """Collective: True on every rank if the job should write its final checkpoint and leave now (see the module
    docstring); the same answer on every rank, sticky once true.

    ``last_checkpoint``: the Writer of the last checkpoint (its duration is estimated by
    :func:`checkpoint_seconds`); ``margin``: seconds on top (None: :func:`margin_from_env`); ``signals``: those
    to install handlers for at the first call (None: :func:`signals_from_env`). Cost after the first call: one
    allreduce of one integer. A bad argument or environment variable on any rank (or a call outside the main
    thread) raises the same error on every rank."""
    end = job_end_time(comm)  # collective at the first call only (rank 0 asks Slurm), then cached
    found: dict[str, Any] = {"remaining": None, "needed": 0.0}

    def local() -> tuple[bool, bool]:
        if not _State.previous:
            install(signals)
        wanted = margin_from_env() if margin is None else float(margin)
        if not wanted >= 0:
            raise ValueError(f"should_exit: margin={margin!r} must be a number of seconds >= 0")
        found["needed"] = checkpoint_seconds(last_checkpoint) + wanted
        if end is not None:
            found["remaining"] = end - time.time()
        late = found["remaining"] is not None and found["remaining"] < found["needed"]
        return bool(_State.received), late

    # one allreduce: how many ranks received a signal, how many found the time too short
    signal_ranks, time_ranks = coord.count_ranks(comm, "ckptio.tiers.batch.should_exit", local)
    _State.last = Decision(signal_ranks, time_ranks, found["remaining"], found["needed"])
    if _State.decided is None and _State.last.exit:
        _State.decided = _State.last
    return _State.decided is not None  # sticky: decided is the same on every rank


# ------------------------------------------------------------------------------------------------ requeue
def requeue(comm, job_id: str | None = None) -> None:
    """Collective: rank 0 runs ``scontrol requeue JOB`` (default ``$SLURM_JOB_ID``) after every rank got here;
    its failure (not in a Slurm job, a job submitted without ``--requeue`` on a cluster with ``JobRequeue=0``,
    scontrol missing) is raised on every rank.

    Call it last, after :meth:`ckptio.Series.wait` committed the final checkpoint: Slurm ends the running job at
    once (SIGTERM to every process, SIGKILL ``KillWait`` s later) and starts it again from the job script. The
    alternative is to leave it to the job script (``scontrol requeue $SLURM_JOB_ID`` after the launcher returned
    with the application's "stopped early" status): docs/guide/batch.md shows both."""
    coord.agree(comm, "ckptio.tiers.batch.requeue: every rank is done", None)

    def run() -> None:
        job = job_id or os.environ.get("SLURM_JOB_ID")
        if not job:
            raise RuntimeError("ckptio.tiers.batch.requeue: not in a Slurm job (SLURM_JOB_ID is not set)")
        scontrol = shutil.which("scontrol")
        if scontrol is None:
            raise RuntimeError("ckptio.tiers.batch.requeue: scontrol is not on PATH")
        out = subprocess.run([scontrol, "requeue", str(job)], capture_output=True, text=True,
                             timeout=SQUEUE_TIMEOUT, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            raise RuntimeError(f"ckptio.tiers.batch.requeue: scontrol requeue {job} failed: "
                               f"{out.stderr.strip() or out.returncode}")

    coord.bcast_from_root(comm, "ckptio.tiers.batch.requeue", run)
