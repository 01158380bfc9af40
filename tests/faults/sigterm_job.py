"""SIGTERM to every rank while asynchronous checkpoints are written (issue 23, the unconfirmed hang).

``mpirun -n P python sigterm_job.py DIR BACKEND HANDLER``: every rank prints ``PID <rank> <pid>``, then writes
``mode="async"`` checkpoints ``DIR/chk_<step>`` back to back (a little uneven compute between them, so the ranks
are in different places when the signal lands) until it is signalled. ``HANDLER``: ``exit`` installs a SIGTERM
handler that calls ``sys.exit(143)`` (what batch scripts do to leave cleanly), ``default`` leaves SIGTERM at its
default action (the process dies). Rank 0 prints ``READY`` after the third checkpoint. :func:`trial` (used by
``test_sigterm_async.py`` and runnable by hand: ``python sigterm_job.py --trials N DIR``) starts the job, sends
SIGTERM to every rank at a random moment and reports whether the job ended within the time limit.
"""

from __future__ import annotations

import faulthandler
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def program(directory: str, backend: str, handler: str) -> int:
    from mpi4py import MPI

    import ckptio

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    faulthandler.register(signal.SIGUSR2, all_threads=True)  # trial() asks a hung job where it is
    if handler == "exit":
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    print(f"PID {rank} {os.getpid()}", flush=True)
    data = np.arange(4096, dtype=np.float64) + rank
    rng = random.Random(rank)
    for step in range(100000):
        with ckptio.create(os.path.join(directory, f"chk_{step % 4:06d}"), comm, backend=backend,
                           mode="async") as ck:
            ck.write("x", data, offset=(4096 * rank,), global_shape=(4096 * size,))
        if step == 3 and rank == 0:
            print("READY", flush=True)
        time.sleep(rng.random() * 0.004)
    return 0


def left_behind(directory: str, backend: str) -> int:
    """The mechanism of the hang, made deterministic: every rank but 0 leaves the program outside any ckptio call
    (as a rank whose SIGTERM handler ran during its computation does); rank 0 is in ``close()`` of a checkpoint,
    waiting in its first collective for ranks that will never come, when its own SIGTERM arrives and is held by
    the collective section. Before: rank 0 waited forever (the handler cannot run inside MPI). Now: after
    CKPTIO_SIGNAL_GRACE seconds it says why on stderr and ends with status 143; mpirun ends the job."""
    import threading

    from mpi4py import MPI

    import ckptio

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    comm.Barrier()
    if rank != 0:
        sys.exit(0)  # left: its signal handler ran outside ckptio
    ck = ckptio.create(os.path.join(directory, "chk_000001"), comm, backend=backend, mode="async")
    ck.write("x", np.zeros(4), offset=(0,), global_shape=(4 * comm.Get_size(),))
    threading.Timer(1.0, os.kill, args=(os.getpid(), signal.SIGTERM)).start()
    print("CLOSING", flush=True)
    ck.close()
    return 0


def trial(directory: Path, backend: str = "mpiio", handler: str = "exit", nprocs: int = 4,
          limit: float = 60.0, seed: int | None = None) -> dict:
    """Start the job, SIGTERM every rank at a random moment after READY, wait up to ``limit`` seconds for mpirun.
    Returns ``{"ended": bool, "seconds": ..., "returncode": ...}``; a job still running is killed (its session)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from mpi_helpers import REPO, mpi_env, mpiexec

    directory.mkdir(parents=True, exist_ok=True)
    env = mpi_env()
    cmd = [*mpiexec(env), "-n", str(nprocs), sys.executable, str(Path(__file__).resolve()), str(directory), backend,
           handler]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    pids: dict[int, int] = {}
    lines = []
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("PID "):
            _, r, p = line.split()
            pids[int(r)] = int(p)
        if line.startswith("READY") or time.monotonic() > deadline:
            break
    time.sleep(random.Random(seed).random() * 0.5)
    for p in pids.values():
        try:
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    t0 = time.monotonic()
    try:
        rest, _ = proc.communicate(timeout=limit)
        ended = True
    except subprocess.TimeoutExpired:
        for p in pids.values():  # where is every rank? (faulthandler, every thread, to the job's output)
            try:
                os.kill(p, signal.SIGUSR2)
            except ProcessLookupError:
                pass
        time.sleep(2)
        os.killpg(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate()
        ended = False
    return {"ended": ended, "seconds": time.monotonic() - t0, "returncode": proc.returncode,
            "ranks": len(pids), "output": ("".join(lines) + (rest or ""))[-12000:]}


if __name__ == "__main__":
    if sys.argv[1] == "--trials":
        import json
        import tempfile

        n, out = int(sys.argv[2]), Path(sys.argv[3])
        handler = sys.argv[4] if len(sys.argv) > 4 else "exit"
        nprocs = int(sys.argv[5]) if len(sys.argv) > 5 else 4
        for i in range(n):
            with tempfile.TemporaryDirectory(dir=out) as d:
                r = trial(Path(d), handler=handler, nprocs=nprocs, limit=30.0, seed=i)
            r.pop("output") if r["ended"] else None
            print(json.dumps({"trial": i, **r}), flush=True)
        sys.exit(0)
    if sys.argv[1] == "--left-behind":
        sys.exit(left_behind(*sys.argv[2:4]))
    sys.exit(program(*sys.argv[1:4]))
