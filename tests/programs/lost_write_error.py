"""The MPI program of ``tests/faults/test_write_error_lost_by_mpiio.py``: one client's writes of a checkpoint fail
with EIO (``tests/programs/eio_preload.c``, preloaded), then the job goes on and checkpoints again.

    mpirun -n N python lost_write_error.py BACKEND DIR RANK

Rank ``RANK`` sets ``CKPTIO_TEST_EIO_UNDER`` to ``DIR/`` before the checkpoint, so its writes of the temporary file
fail. Every rank writes ``DIR/chk`` with backend ``BACKEND``: four 2-D float64 variables of ROWS x COLS (``$ROWS``,
default 4096, ``$COLS``, default 1024: 32 MiB each), rows cut evenly among the ranks. Every rank prints
``RAISED <rank> <class> <message>`` or ``NOT RAISED <rank>``; where nothing was raised, every rank reads the
checkpoint back and prints ``FIRST <rank> right`` or ``FIRST <rank> WRONG`` (or what the read raised). Rank 0 prints
``LEFT <names>`` for what ``DIR`` holds after the failed checkpoint. The fault is lifted, the checkpoint is written
again and read back: ``NEXT OK <rank>``.
"""

from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

import ckptio

ROWS, COLS = int(os.environ.get("ROWS", 4096)), int(os.environ.get("COLS", 1024))


def value(k: int, lo: int, hi: int) -> np.ndarray:
    return (np.arange(lo, hi, dtype=np.float64)[:, None] * COLS + np.arange(COLS)[None, :]) * (k + 1)


def checkpoint(path: str, comm, backend: str, lo: int, hi: int) -> None:
    with ckptio.create(path, comm, backend=backend) as ck:
        for k in range(4):
            ck.write(f"big{k}", value(k, lo, hi), offset=(lo, 0), global_shape=(ROWS, COLS))


def right(path: str, comm, lo: int, hi: int) -> bool:
    with ckptio.open(path, comm) as ck:
        return all(np.array_equal(ck.read(f"big{k}", (lo, 0), (hi - lo, COLS)), value(k, lo, hi)) for k in range(4))


def say(*words: object) -> None:
    os.write(1, (" ".join(str(w) for w in words) + "\n").encode())


def main(backend: str, directory: str, failing: int) -> None:
    comm = MPI.COMM_WORLD
    r, n = comm.Get_rank(), comm.Get_size()
    lo, hi = ROWS * r // n, ROWS * (r + 1) // n
    path = os.path.join(directory, "chk")
    if r == failing:
        os.environ["CKPTIO_TEST_EIO_UNDER"] = os.path.realpath(directory) + "/"
    try:
        checkpoint(path, comm, backend, lo, hi)
        say("NOT RAISED", r)
        raised = False
    except Exception as exc:  # (what every rank got is the test's subject)
        say("RAISED", r, type(exc).__name__, " ".join(str(exc).split())[:400])
        raised = True
    os.environ.pop("CKPTIO_TEST_EIO_UNDER", None)
    comm.Barrier()
    if r == 0:
        say("LEFT", *sorted(os.listdir(directory)))
    if not comm.allreduce(raised, MPI.LOR):
        try:
            say("FIRST", r, "right" if right(path, comm, lo, hi) else "WRONG")
        except Exception as exc:
            say("FIRST", r, "raised", type(exc).__name__)
    checkpoint(path, comm, backend, lo, hi)
    if right(path, comm, lo, hi):
        say("NEXT OK", r)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
