"""The MPI program of ``tests/test_plain_files.py`` (``mpirun -n P python plain_files.py read PATH...``).

``read PATH...``: HDF5 and netCDF files that ckptio did not write restart through the aggregators (only they
open the file), unchecked (no checksums), with a decomposition of their own; ``OK <rank>``.
"""

from __future__ import annotations

import sys

import numpy as np

import ckptio


def read(comm, *paths: str) -> None:
    rank, size = comm.Get_rank(), comm.Get_size()
    dens = np.arange(70, dtype=np.float64).reshape(7, 10)
    for path in paths:
        with ckptio.open(path, comm, aggregators=min(2, size)) as ck:
            lo, hi = rank * 7 // size, (rank + 1) * 7 // size
            cols = slice(rank % 3, 10)
            got, ids = ck.read_many([("dens", (lo, cols.start), (hi - lo, 10 - cols.start)), ("ids", None, None)])
            assert np.array_equal(got, dens[lo:hi, cols]), (path, rank)
            assert np.array_equal(ids, np.arange(12).reshape(3, 4)), (path, rank)
            assert not ck.checksummed
            assert ck.stats.opened_file == (rank in ck.aggregators), (rank, ck.aggregators)
    print("OK", rank)


CASES = {"read": read}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
