"""The MPI program of ``tests/test_write_control_plane.py``
(``mpirun -n P python write_control_plane.py write_and_look DIR``).

``write_and_look DIR``: for every backend, a checkpoint of "dens" (2 rows per rank) and a segment "parts" (not
on hdf5); after ``close()`` rank 0's document holds the block table and the per-node placement, every other
rank's only the count of blocks; the write statistics (total, least, most bytes of a rank) are right; the data
reads back. Prints ``OK <rank>``.
"""

from __future__ import annotations

import sys

import internals
import numpy as np

import ckptio


def write_and_look(comm, d: str) -> None:
    BlockTable = internals.block_table_type()
    rank, size = comm.Get_rank(), comm.Get_size()
    for backend in ("mpiio", "hdf5", "pnetcdf"):
        w = ckptio.create(f"{d}/chk_{backend}", comm, backend=backend)
        w.write("dens", np.full((2, 3), rank, np.float64), offset=(2 * rank, 0), global_shape=(2 * size, 3))
        segments = backend != "hdf5"  # the hdf5 backend has no per-rank segments
        if segments:
            w.write("parts", np.arange(rank, dtype=np.int32))
        w.close()
        var = w.meta["variables"]["dens"]
        if rank == 0:
            assert isinstance(var["blocks"], BlockTable) and len(var["blocks"]) == size, var
            assert "placement" in w.meta["stats"]["write"]
        else:
            assert "blocks" not in var and var["nblocks"] == size, var
            assert "placement" not in w.meta["stats"]["write"]
        extra = 4 if segments else 0
        total = 48 * size + extra * sum(range(size))
        assert (w.stats.bytes_total, w.stats.bytes_min, w.stats.bytes_max) == (total, 48, 48 + extra * (size - 1)), \
            w.stats
        with ckptio.open(f"{d}/chk_{backend}", comm) as ck:
            assert np.array_equal(ck.read("dens", (2 * rank, 0), (2, 3)), np.full((2, 3), rank))
            if segments:
                assert np.array_equal(ck.read("parts"), np.arange(rank))
    print("OK", rank)


CASES = {"write_and_look": write_and_look}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
