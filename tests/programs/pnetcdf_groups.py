"""The MPI program of ``tests/test_pnetcdf_groups.py``: a PnetCDF checkpoint whose data write is several
collective ``wait_all`` steps (one per group of variables, ``backends.pnetcdf_write.data_groups``), with ranks that
own nothing of some groups.

    mpirun -n N python pnetcdf_groups.py write PATH     (CKPTIO_WRITEBACK_BYTES from the environment)
    mpirun -n M python pnetcdf_groups.py read PATH

``write``: six 2-D float64 variables of 64 rows x 1024 (512 KiB each): ``big0`` .. ``big5``; rank r owns the rows
of ``bigK`` only when (K + r) % 3 != 0 (so with 3 ranks each rank sits out two of them, and with 64 KiB groups
some groups hold nothing of a rank), cut evenly among the owners, the last owner's part a strided view; ten small
int32 variables ``small0`` .. ``small9`` (4 per rank, contiguous); a scalar ``step`` on rank 0. Every rank prints
``STEPS <rank> <data steps the engine ran>`` (the write-back starts, counted by ``FileWriteback``). ``read``: every
rank restarts its share of every variable and checks each value; rank 0 prints ``READ OK <M>``.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import ckptio

ROWS, COLS, BIG, SMALL = 64, 1024, 6, 10


def big_value(k: int, lo: int, hi: int) -> np.ndarray:
    return (np.arange(lo, hi, dtype=np.float64)[:, None] * COLS + np.arange(COLS)[None, :]) * (k + 1)


def owners(k: int, nprocs: int) -> list[int]:
    mine = [r for r in range(nprocs) if (k + r) % 3 != 0]
    return mine or [0]


def write(path: str, comm) -> None:
    from ckptio.backends.writeback import FileWriteback

    r, n = comm.Get_rank(), comm.Get_size()
    starts: list[int] = []
    original = FileWriteback.close

    def counted(self) -> None:
        starts.append(self.started)
        original(self)

    FileWriteback.close = counted
    with ckptio.create(path, comm, backend="pnetcdf") as ck:
        for k in range(BIG):
            who = owners(k, n)
            if r in who:
                i = who.index(r)
                lo, hi = ROWS * i // len(who), ROWS * (i + 1) // len(who)
                data = big_value(k, lo, hi)
                if i == len(who) - 1:  # a strided view: the interior of a halo'd array
                    halo = np.zeros((hi - lo + 2, COLS + 2))
                    halo[1:-1, 1:-1] = data
                    data = halo[1:-1, 1:-1]
                ck.write(f"big{k}", data, offset=(lo, 0), global_shape=(ROWS, COLS))
        for k in range(SMALL):
            ck.write(f"small{k}", np.arange(4, dtype=np.int32) + 100 * k + 4 * r, offset=(4 * r,),
                     global_shape=(4 * n,))
        if r == 0:
            ck.write("step", np.array(7), offset=(), global_shape=())
    print("STEPS", r, starts[0] if starts else -1, flush=True)


def read(path: str, comm) -> None:
    r, m = comm.Get_rank(), comm.Get_size()
    with ckptio.open(path, comm) as ck:
        n = ck.variables["small0"].shape[0] // 4
        lo, hi = ROWS * r // m, ROWS * (r + 1) // m
        for k in range(BIG):
            got = ck.read(f"big{k}", (lo, 0), (hi - lo, COLS))
            assert np.array_equal(got, big_value(k, lo, hi)), f"big{k} rows {lo}:{hi}"
        for k in range(SMALL):
            assert np.array_equal(ck.read(f"small{k}"), np.arange(4 * n, dtype=np.int32) + 100 * k), k
        assert int(ck.read("step")) == 7
    comm.Barrier()
    if r == 0:
        print("READ OK", m, flush=True)


if __name__ == "__main__":
    {"write": write, "read": read}[sys.argv[1]](sys.argv[2], MPI.COMM_WORLD)
