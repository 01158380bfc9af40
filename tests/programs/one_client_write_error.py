"""The MPI program of ``tests/faults/test_one_client_write_error.py``: a write error on one client only, then the
job goes on and checkpoints again, as a code that catches the failed checkpoint does.

    mpirun -n N python one_client_write_error.py BACKEND DIR RANK

Rank ``RANK`` may write no file past 256 KiB (``RLIMIT_FSIZE``, its soft limit only: Python ignores SIGXFSZ, so
the writes fail with EFBIG; the MPI-IO library reports that on that rank alone, or not at all); with ``$BELOW``, past
the checkpoint's size less that many bytes (learnt from a first, unlimited write of it), so that the write crossing
the limit is cut short by the kernel without an error. Every rank writes
``DIR/chk`` with backend ``BACKEND``: four 2-D float64 variables of ROWS x 1024 (``$ROWS``, default 96: 768 KiB
each), rows cut evenly among the ranks, the last rank's part a strided view, and one int32 variable of 64 values
per rank. Every rank prints
``RAISED <rank> <class> <message>`` (or ``NOT RAISED <rank>``), then rank 0 ``LEFT <names>`` for whatever the failed
checkpoint left in ``DIR``; where the checkpoint succeeded (the limited rank wrote nothing), every rank reads it
back and prints ``FIRST OK <rank>``. The limit is lifted, the same checkpoint is written again at the same path and read
back on every rank, which prints ``NEXT OK <rank>`` once every value it read is right. With PnetCDF and HDF5,
rank 0 then prints ``TRANSFER <collective|independent>`` and (HDF5) ``METADATA WRITERS <who>`` as the checkpoint
records them (``backends.hdf5_mdc``).
"""

from __future__ import annotations

import os
import resource
import sys

import numpy as np
from mpi4py import MPI

import ckptio

ROWS, COLS, BIG, PER_RANK = int(os.environ.get("ROWS", 96)), 1024, 4, 64
LIMIT = 256 << 10
BELOW = int(os.environ.get("BELOW", 0))  # if set: the limit is the checkpoint's size less this many bytes


def big_value(k: int, lo: int, hi: int) -> np.ndarray:
    return (np.arange(lo, hi, dtype=np.float64)[:, None] * COLS + np.arange(COLS)[None, :]) * (k + 1)


def rows(r: int, n: int) -> tuple[int, int]:
    return ROWS * r // n, ROWS * (r + 1) // n


def checkpoint(path: str, comm, backend: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    lo, hi = rows(r, n)
    with ckptio.create(path, comm, backend=backend) as ck:
        for k in range(BIG):
            data = big_value(k, lo, hi)
            if r == n - 1:  # a strided view: the interior of a halo'd array
                halo = np.zeros((hi - lo + 2, COLS + 2))
                halo[1:-1, 1:-1] = data
                data = halo[1:-1, 1:-1]
            ck.write(f"big{k}", data, offset=(lo, 0), global_shape=(ROWS, COLS))
        ck.write("small", np.arange(PER_RANK, dtype=np.int32) + PER_RANK * r, offset=(PER_RANK * r,),
                 global_shape=(PER_RANK * n,))


def read_back(path: str, comm) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    lo, hi = rows(r, n)
    with ckptio.open(path, comm) as ck:
        for k in range(BIG):
            got = ck.read(f"big{k}", (lo, 0), (hi - lo, COLS))
            assert np.array_equal(got, big_value(k, lo, hi)), f"big{k} rows {lo}:{hi}"
        assert np.array_equal(ck.read("small"), np.arange(PER_RANK * n, dtype=np.int32))


def say(*words: object) -> None:
    """One line, in one write (lines of several ranks do not interleave)."""
    os.write(1, (" ".join(str(w) for w in words) + "\n").encode())


def main(backend: str, directory: str, limited: int) -> None:
    comm = MPI.COMM_WORLD
    r = comm.Get_rank()
    path = os.path.join(directory, "chk")
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    limit = LIMIT
    if BELOW:  # just below the file's size: the write that crosses it is cut short, without an error
        checkpoint(path, comm, backend)
        limit = os.path.getsize(path) - BELOW
        comm.Barrier()
        if r == 0:
            os.remove(path)
        comm.Barrier()
    if r == limited:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        checkpoint(path, comm, backend)
        say("NOT RAISED", r)
        failed = False
    except ckptio.CheckpointError as exc:
        say("RAISED", r, type(exc).__name__, str(exc).replace("\n", " ")[:1000])
        failed = True
    if not failed:  # (the same on every rank: the checkpoint's outcome is agreed) a good one must hold the data
        read_back(path, comm)
        say("FIRST OK", r)
    if r == limited:
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    comm.Barrier()
    if r == 0:
        say("LEFT", *sorted(os.listdir(directory)))
    comm.Barrier()
    checkpoint(path, comm, backend)
    read_back(path, comm)
    say("NEXT OK", r)
    if r == 0 and backend != "mpiio":
        with ckptio.open(path, comm=MPI.COMM_SELF) as ck:
            effective = ck.meta["hints"]["effective"]
        say("TRANSFER", effective.get(f"ckptio_{backend}_transfer"))
        if backend == "hdf5":
            say("METADATA WRITERS", effective.get("ckptio_hdf5_metadata_writers"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
