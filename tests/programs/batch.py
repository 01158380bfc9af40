"""The MPI program of ``tests/test_batch.py`` (``mpirun -n P python batch.py checks DIR``).

``checks DIR``: ``Series.should_exit`` and ``ckptio.tiers.batch`` outside a batch system, in four parts, each ending
with a line from rank 0 (``SIGNAL OK``, ``TIME OK``, ``ERRORS OK``, ``THREAD OK``): (1) a signal on the last rank
decides for every rank, chained to the application's own handler, SIG_DFL never called; (2) the time rule against
``SLURM_JOB_END_TIME``, the last checkpoint's duration and the margin; (3) bad input on one rank is the same error
on every rank; (4) installing outside the main thread is refused.

``unwatched DIR``: the first checkpoint of a process on which the last rank cannot start a thread (its
``threading.Thread.start`` raises "can't start new thread", as in a process at its memory limit): the collective
section that holds signals runs without its watchdog thread there and the checkpoint completes on every rank (it
raised on that rank alone, before the first agreement, and the others waited forever: an outside trial); prints
``UNWATCHED OK`` from rank 0.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import internals
import numpy as np

import ckptio
from ckptio.tiers import batch


def checks(comm, out: str) -> None:
    rank, size = comm.Get_rank(), comm.Get_size()
    last = size - 1
    for name in ("SLURM_JOB_ID", "SLURM_JOB_END_TIME", "CKPTIO_EXIT_SIGNALS", "CKPTIO_EXIT_MARGIN"):
        os.environ.pop(name, None)

    def say(text):
        if rank == 0:
            print(text, flush=True)

    # 1. outside a batch job: no end time, False; a signal on the last rank only: True on every rank, and it stays
    app_calls = []
    signal.signal(signal.SIGUSR2, lambda s, f: app_calls.append(s))     # the application's own handler
    series = ckptio.Series(out, comm)
    assert series.should_exit() is False and batch.installed() == (signal.SIGUSR1, signal.SIGTERM)
    assert batch.job_end_time(comm) is None and batch.last_decision().remaining is None
    batch.install([signal.SIGUSR2])                                      # chained to the application's handler
    assert series.should_exit() is False
    if rank == last:
        os.kill(os.getpid(), signal.SIGUSR1)                             # SIG_DFL would kill: must not be called
        os.kill(os.getpid(), signal.SIGUSR2)
    time.sleep(0.05)
    assert series.should_exit() is True, batch.last_decision()
    decision = batch.last_decision()
    assert (decision.signal_ranks, decision.time_ranks) == (1, 0), decision
    assert batch.received() == ((signal.SIGUSR1, signal.SIGUSR2) if rank == last else ()), batch.received()
    assert app_calls == ([signal.SIGUSR2] if rank == last else []), app_calls
    assert series.should_exit() is True                                  # sticky
    say("SIGNAL OK")

    # 2. the remaining wall time: SLURM_JOB_END_TIME (Slurm >= 23.02 sets it) against the last checkpoint + margin
    batch.uninstall()
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
    handler = signal.getsignal(signal.SIGUSR2)
    assert not internals.is_batch_signal_handler(handler) and callable(handler)
    batch.forget_job()                                                    # a new job, as far as this process knows
    os.environ["SLURM_JOB_END_TIME"] = str(int(time.time()) + 100)
    with series.create(1) as ck:
        ck.write("x", np.full(4, rank, dtype=np.float64), offset=(4 * rank,), global_shape=(4 * size,))
    took = batch.checkpoint_seconds(ck)
    assert took > 0, ck.stats.seconds
    assert series.should_exit(margin=10) is False, batch.last_decision()
    d = batch.last_decision()
    assert 90 < d.remaining <= 100 and abs(d.needed - (took + 10)) < 1e-9, d
    assert series.should_exit() is False                                  # default margin 30 s < 90 s left
    os.environ["CKPTIO_EXIT_MARGIN"] = "150"
    assert series.should_exit() is True, batch.last_decision()           # 150 s margin > 100 s left
    d = batch.last_decision()
    assert (d.signal_ranks, d.time_ranks) == (0, size), d
    say("TIME OK")

    # 3. bad input on one rank: the same error on every rank, nobody hangs
    batch.uninstall()
    del os.environ["CKPTIO_EXIT_MARGIN"]
    try:
        batch.should_exit(comm, margin=-1 if rank == last else 5)
    except ckptio.CollectiveError as exc:
        text = str(exc)
        assert f"rank {last}" in text and "margin=-1" in text, text
        assert comm.allgather(text) == [text] * size
    else:
        raise AssertionError("margin=-1 on one rank was accepted")
    batch.uninstall()
    os.environ["CKPTIO_EXIT_SIGNALS"] = "USR1,NOSUCH" if rank == 0 else "USR1"
    try:
        batch.should_exit(comm)
    except ckptio.CollectiveError as exc:
        assert "NOSUCH" in str(exc) and "rank 0" in str(exc), str(exc)
    else:
        raise AssertionError("CKPTIO_EXIT_SIGNALS=USR1,NOSUCH on rank 0 was accepted")
    batch.uninstall()
    os.environ["CKPTIO_EXIT_SIGNALS"] = "USR2"
    assert batch.should_exit(comm) is False and batch.installed() == (signal.SIGUSR2,)
    say("ERRORS OK")

    # 4. outside the main thread: installing is refused (Python runs handlers only in the main thread)
    batch.uninstall()
    errors = []

    def _try():
        try:
            batch.install()
        except RuntimeError as exc:
            return str(exc)

    t = threading.Thread(target=lambda: errors.append(_try()))
    t.start()
    t.join()
    assert errors and "main thread" in errors[0], errors
    say("THREAD OK")


def unwatched(comm, out: str) -> None:
    r, last = comm.rank, comm.size - 1
    if r == last:
        def refuse(self, *args, **kwargs):
            raise RuntimeError("can't start new thread")

        threading.Thread.start = refuse  # this process's watchdog is started by its first collective section
    u = np.arange(100.0) + r
    for step in (1, 2):
        with ckptio.create(os.path.join(out, f"chk_{step}"), comm) as ck:
            ck.write("u", u, offset=(100 * r,), global_shape=(100 * comm.size,))
    with ckptio.open(os.path.join(out, "chk_2"), comm) as ck:
        assert np.array_equal(ck.read("u", offset=(100 * r,), shape=(100,)), u)
    comm.Barrier()
    if r == 0:
        print("UNWATCHED OK", flush=True)


CASES = {"checks": checks, "unwatched": unwatched}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
