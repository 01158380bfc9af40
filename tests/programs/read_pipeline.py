"""The MPI programs of ``tests/test_read_pipeline.py`` (``mpirun -n P python read_pipeline.py CASE ARGS...``).

* ``rounds PATH BACKEND THREAD_LEVEL``: MPI initialised at ``THREAD_LEVEL`` (mpi4py's names: single, funneled,
  serialized, multiple); two variables read back in many rounds (4 KiB buffer) with an uneven, shifted
  decomposition; every rank prints ``STATS {json}`` (rank, aggregator flag, the thread level MPI gave, the
  Reader's statistics);
* ``corrupt PATH``: one byte of the last extent (read in a late round) changed; every rank prints
  ``CORRUPT <rank> <message names the checksum and the variable> <rounds>``, then ``AFTER <rank>``.
"""

from __future__ import annotations

import json
import sys

import internals
import numpy as np

import ckptio


def field(lo, hi):
    return np.arange(lo * 64, hi * 64, dtype=np.float64).reshape(hi - lo, 8, 8) * 1.5


def rounds(comm, path: str, backend: str, thread_level: str) -> None:
    """(``thread_level`` is applied by :func:`main`, before MPI is initialised.)"""
    from mpi4py import MPI

    r, n = comm.Get_rank(), comm.Get_size()
    rows = 96
    with ckptio.create(path, comm, backend=backend) as ck:
        lo, hi = r * rows // n, (r + 1) * rows // n
        ck.write("u", field(lo, hi), offset=(lo, 0, 0), global_shape=(rows, 8, 8))
        ck.write("w", -field(lo, hi)[:, :4], offset=(lo, 0, 0), global_shape=(rows, 4, 8))
    with ckptio.open(path, comm, buffer_bytes="4K") as ck:     # 1.5 blocks of 8 rows per round: many rounds
        lo = (r * rows // n + 5) % rows
        cnt = min(rows - lo, rows // n + 3)                       # uneven, shifted: pieces of several writers
        u, w = ck.read_many([("u", (lo, 0, 0), (cnt, 8, 8)), ("w", (lo, 0, 0), (cnt, 4, 8))])
        assert np.array_equal(u, field(lo, lo + cnt)) and np.array_equal(w, -field(lo, lo + cnt)[:, :4])
        s = ck.stats.to_json()
        agg = r in ck.aggregators
    print("STATS", json.dumps({"rank": r, "aggregator": agg, "thread": MPI.Query_thread(), **s}), flush=True)


def corrupt(comm, path: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    with ckptio.create(path, comm) as ck:
        for b in range(4):  # 4 blocks per rank, 2 KiB each
            ck.write("u", np.full((32, 8), float(4 * r + b)), offset=(32 * (4 * r + b), 0),
                     global_shape=(128 * n, 8))
    if r == 0:
        last = int(internals.extent_table(path, "mpiio").file_offset.max())  # read in a late round
        with open(path, "r+b") as f:
            f.seek(last + 100)
            f.write(b"\xff")
    comm.Barrier()
    with ckptio.open(path, comm, buffer_bytes="4K", aggregators=1) as ck:
        try:
            ck.read("u")
            print("READ", r, flush=True)
        except ckptio.CorruptCheckpointError as exc:
            print("CORRUPT", r, "checksum mismatch" in str(exc) and "'u'" in str(exc), ck.stats.rounds, flush=True)
    assert comm.allreduce(1) == n
    print("AFTER", r, flush=True)


CASES = {"rounds": rounds, "corrupt": corrupt}


def main(argv: list[str]) -> int:
    if argv[0] == "rounds":  # the thread level is chosen before MPI is initialised
        import mpi4py

        mpi4py.rc.thread_level = argv[3]
    from mpi4py import MPI

    CASES[argv[0]](MPI.COMM_WORLD, *argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
