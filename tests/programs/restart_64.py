"""The MPI programs of ``tests/test_restart_64.py`` (``mpirun -n P python restart_64.py write|read DIR``).

* ``write DIR`` (6 ranks): ``DIR/mpiio`` and ``DIR/hdf5``, "u" (97, 12, 5) in uneven leading-axis blocks (one
  per writer), a per-rank segment "seg" and a 0-d "t"; prints ``WROTE <rank>``;
* ``read DIR`` (64 ranks): an 8 x 8 grid of readers over axes 0 and 1 with 8 aggregators, every element
  checked; prints ``READ <rank>``.
"""

from __future__ import annotations

import sys

import numpy as np

import ckptio

G = (97, 12, 5)


def write(comm, d: str) -> None:
    r = comm.Get_rank()
    cuts = [0, 9, 30, 31, 55, 80, 97]          # uneven leading-axis blocks, one per writer
    lo, hi = cuts[r], cuts[r + 1]
    full = np.arange(np.prod(G), dtype=np.float64).reshape(G)
    for backend in ("mpiio", "hdf5"):
        with ckptio.create(f"{d}/{backend}", comm, backend=backend) as ck:
            ck.write("u", full[lo:hi].copy(), offset=(lo, 0, 0), global_shape=G)
            ck.write("seg", np.arange(r * 10, r * 10 + r + 2, dtype=np.int32))
            if r == 0:
                ck.write("t", np.array(3.5), offset=(), global_shape=())
    print("WROTE", r, flush=True)


def read(comm, d: str) -> None:
    from mpi4py import MPI

    r, n = comm.Get_rank(), comm.Get_size()
    full = np.arange(np.prod(G), dtype=np.float64).reshape(G)
    # readers: an 8 x 8 grid over axes 0 and 1 (some boxes empty, none aligned with the writers' blocks)
    i, j = divmod(r, 8)
    a0, a1 = i * G[0] // 8, (i + 1) * G[0] // 8
    b0, b1 = j * G[1] // 8, (j + 1) * G[1] // 8
    for backend in ("mpiio", "hdf5"):
        with ckptio.open(f"{d}/{backend}", comm, aggregators=8) as ck:
            assert len(ck.aggregators) == 8
            got, seg, whole, t = ck.read_many([("u", (a0, b0, 0), (a1 - a0, b1 - b0, 5)), ("seg", None, None),
                                               ("u", (r % 97, 0, 0), (1, 12, 5)), ("t", None, None)])
            assert (got == full[a0:a1, b0:b1]).all(), (backend, r)
            assert (whole == full[r % 97:r % 97 + 1]).all(), (backend, r)
            assert float(t) == 3.5
            writer = r * 6 // n
            if (r + 1) * 6 // n > writer:  # this reader gets writer `writer`'s segment
                assert (seg == np.arange(writer * 10, writer * 10 + writer + 2)).all(), (backend, r, seg)
            else:
                assert seg.size == 0, (backend, r, seg)
            assert ck.stats.rounds >= 1
            assert ck.stats.aggregator == (r in ck.aggregators) and ck.stats.host == MPI.Get_processor_name()
    print("READ", r, flush=True)


CASES = {"write": write, "read": read}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
