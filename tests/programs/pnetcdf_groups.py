"""The MPI program of ``tests/test_pnetcdf_groups.py``: a PnetCDF checkpoint whose data write is several
collective ``wait_all`` steps (one per group of variables, ``backends.pnetcdf_steps.data_groups``), with ranks that
own nothing of some groups.

    mpirun -n N python pnetcdf_groups.py write PATH     (CKPTIO_WRITEBACK_BYTES from the environment)
    mpirun -n N python pnetcdf_groups.py fail PATH K    (rank 1's K-th data wait_all fails, K from 0)
    mpirun -n N python pnetcdf_groups.py limit PATH     (rank 1 may write no file past 256 KiB: RLIMIT_FSIZE)
    mpirun -n M python pnetcdf_groups.py read PATH

``write``: six 2-D float64 variables of 64 rows x 1024 (512 KiB each): ``big0`` .. ``big5``; rank r owns the rows of
``bigK`` only when (K + r) % 3 != 0 (so with 3 ranks each rank sits out two of them, and with 64 KiB groups some
groups hold nothing of a rank), cut evenly among the owners, the last owner's part a strided view; ten small int32
variables ``small0`` .. ``small9`` (64 per rank, contiguous: 768 bytes each on 3 ranks); a scalar ``step`` on rank
0. Every rank prints ``STEPS <rank> <write-backs started> <data wait_all steps>``. ``fail``: the same write, where
rank 1's K-th data ``wait_all`` reports a failed request in its status array (or, where rank 1 posted nothing in
that group, raises as pnetcdf-python does); every rank prints ``RAISED <rank> <class>``, then ``RESTORED <rank>``
once its arrays hold their own bytes again (PnetCDF swaps them in place while it writes), and ``NEXT OK <rank>``
after a checkpoint at the same path wrote and restarted. ``limit``: the same write, with rank 1 unable to write past
256 KiB of any file (a write error on one client only: the MPI-IO library reports it on that rank alone, or not at
all); every rank prints ``RAISED <rank> <class> <message>`` or ``NOT RAISED``. ``read``: every rank restarts its
share of every variable and checks each value; rank 0 prints ``READ OK <M>``.
"""

from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

import ckptio

ROWS, COLS, BIG, SMALL, PER_RANK = 64, 1024, 6, 10, 64


def big_value(k: int, lo: int, hi: int) -> np.ndarray:
    return (np.arange(lo, hi, dtype=np.float64)[:, None] * COLS + np.arange(COLS)[None, :]) * (k + 1)


def owners(k: int, nprocs: int) -> list[int]:
    mine = [r for r in range(nprocs) if (k + r) % 3 != 0]
    return mine or [0]


def arrays_of(r: int, n: int) -> dict[str, tuple[np.ndarray, tuple[int, ...], tuple[int, ...]]]:
    """This rank's blocks: name -> (array, offset, global shape)."""
    out = {}
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
            out[f"big{k}"] = (data, (lo, 0), (ROWS, COLS))
    for k in range(SMALL):
        out[f"small{k}"] = (np.arange(PER_RANK, dtype=np.int32) + 1000 * k + PER_RANK * r, (PER_RANK * r,),
                            (PER_RANK * n,))
    if r == 0:
        out["step"] = (np.array(7), (), ())
    return out


def checkpoint(path: str, comm, blocks) -> None:
    with ckptio.create(path, comm, backend="pnetcdf") as ck:
        for name, (data, offset, shape) in blocks.items():
            ck.write(name, data, offset=offset, global_shape=shape)


class FailingFile:
    """Rank 1's PnetCDF file, whose ``fail``-th data ``wait_all`` (explicit requests) reports a failed request."""

    def __init__(self, file, fail: int):
        object.__setattr__(self, "_file", file)
        object.__setattr__(self, "_calls", 0)
        object.__setattr__(self, "_fail", fail)

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __setattr__(self, name, value):
        setattr(self._file, name, value)

    def wait_all(self, num=None, requests=None, status=None):
        if num is None:  # (abort's wait for everything still pending)
            return self._file.wait_all()
        call = self._calls
        object.__setattr__(self, "_calls", call + 1)
        self._file.wait_all(num, requests, status)
        if call == self._fail:
            if status:
                status[0] = -33  # NC_EFILE's neighbourhood: any non-zero request status
            else:
                raise RuntimeError("injected: the data write failed on rank 1")


def write(path: str, comm, fail: int | None = None) -> None:
    from ckptio.backends import pnetcdf_write
    from ckptio.backends.writeback import FileWriteback

    r, n = comm.Get_rank(), comm.Get_size()
    starts: list[int] = []
    steps: list[int] = []
    close, make_steps, init = FileWriteback.close, pnetcdf_write.PnetCDFWriteHandle.write, \
        pnetcdf_write.PnetCDFWriteHandle.__init__

    def counted(self) -> None:
        starts.append(self.started)
        close(self)

    def listed(self, *args, **kw):
        made = make_steps(self, *args, **kw)
        steps.append(len(made))
        return made

    def failing(self, *args, **kw):
        init(self, *args, **kw)
        if r == 1:
            self.file = FailingFile(self.file, fail)

    FileWriteback.close = counted
    pnetcdf_write.PnetCDFWriteHandle.write = listed
    if fail is not None:
        pnetcdf_write.PnetCDFWriteHandle.__init__ = failing
    blocks = arrays_of(r, n)
    if fail is None:
        checkpoint(path, comm, blocks)
        print("STEPS", r, starts[0] if starts else -1, steps[0] if steps else -1, flush=True)
        return
    before = {name: data.copy() for name, (data, _, _) in blocks.items()}
    try:
        checkpoint(path, comm, blocks)
        print("NOT RAISED", r, flush=True)
    except ckptio.CheckpointError as exc:
        print("RAISED", r, type(exc).__name__, str(exc).replace("\n", " ")[:300], flush=True)
    pnetcdf_write.PnetCDFWriteHandle.__init__ = init
    if all(np.array_equal(data, before[name]) for name, (data, _, _) in blocks.items()):
        print("RESTORED", r, flush=True)
    comm.Barrier()
    if os.path.exists(path):
        print("LEFT", r, path, flush=True)
    checkpoint(path, comm, blocks)
    read(path, comm, quiet=True)
    print("NEXT OK", r, flush=True)


def read(path: str, comm, quiet: bool = False) -> None:
    r, m = comm.Get_rank(), comm.Get_size()
    with ckptio.open(path, comm) as ck:
        n = ck.variables["small0"].shape[0] // PER_RANK
        lo, hi = ROWS * r // m, ROWS * (r + 1) // m
        for k in range(BIG):
            got = ck.read(f"big{k}", (lo, 0), (hi - lo, COLS))
            assert np.array_equal(got, big_value(k, lo, hi)), f"big{k} rows {lo}:{hi}"
        for k in range(SMALL):
            want = np.arange(PER_RANK * n, dtype=np.int32) + 1000 * k
            assert np.array_equal(ck.read(f"small{k}"), want), k
        assert int(ck.read("step")) == 7
    comm.Barrier()
    if r == 0 and not quiet:
        print("READ OK", m, flush=True)


def limited(path: str, comm) -> None:
    import resource

    if comm.Get_rank() == 1:  # (Python ignores SIGXFSZ: the write fails with EFBIG instead)
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))
    try:
        checkpoint(path, comm, arrays_of(comm.Get_rank(), comm.Get_size()))
        print("NOT RAISED", comm.Get_rank(), flush=True)
    except ckptio.CheckpointError as exc:
        print("RAISED", comm.Get_rank(), type(exc).__name__, str(exc).replace("\n", " ")[:400], flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "limit":
        limited(sys.argv[2], MPI.COMM_WORLD)
    elif sys.argv[1] == "fail":
        write(sys.argv[2], MPI.COMM_WORLD, int(sys.argv[3]))
    else:
        {"write": write, "read": read}[sys.argv[1]](sys.argv[2], MPI.COMM_WORLD)
