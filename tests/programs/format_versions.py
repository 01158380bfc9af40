"""The MPI programs of ``tests/test_format_versions.py`` (``mpirun -n P python format_versions.py CASE ARGS...``).

* ``read_any_count PATH...``: the version-1 fixtures (``tests/data/format1``) restart on this rank count ("dens"
  by leading-axis pieces, the 0-d "energy", the segment "tracers" where present); ``OK <rank>``;
* ``write_every_backend DIR``: ``DIR/new_<backend>``, "dens" (4, 3) in 2 blocks, for every backend (2 ranks);
* ``empty DIR``: a checkpoint with attributes only (no variable), for every backend, commits and reads back;
  ``OK <rank>``.
"""

from __future__ import annotations

import sys

import numpy as np

import ckptio


def read_any_count(comm, *paths: str) -> None:
    rank, size = comm.Get_rank(), comm.Get_size()
    dens = np.arange(30, dtype=np.float64).reshape(6, 5)
    for path in paths:
        with ckptio.open(path, comm) as ck:
            lo, hi = rank * 6 // size, (rank + 1) * 6 // size
            got, energy = ck.read_many([("dens", (lo, 0), (hi - lo, 5)), ("energy", None, None)])
            assert np.array_equal(got, dens[lo:hi]), (path, rank, got)
            assert float(energy) == 2.5
            if "tracers" in ck.variables:
                np.testing.assert_array_equal(ck.read("tracers", (0,), (5,)), [0, 1, 10, 11, 12])
    print("OK", rank)


def write_every_backend(comm, d: str) -> None:
    rank = comm.Get_rank()
    for backend in ("mpiio", "hdf5", "pnetcdf"):
        with ckptio.create(f"{d}/new_{backend}", comm, backend=backend) as w:
            w.write("dens", np.full((2, 3), rank, np.float64), offset=(2 * rank, 0), global_shape=(4, 3))


def empty(comm, d: str) -> None:
    for backend in ("mpiio", "hdf5", "pnetcdf"):
        path = f"{d}/empty_{backend}"
        with ckptio.create(path, comm, backend=backend, attrs={"step": 3}):
            pass  # attributes only: no variable, no block
        with ckptio.open(path, comm) as ck:
            assert ck.variables == {} and ck.attrs == {"step": 3}, (ck.variables, ck.attrs)
    print("OK", comm.Get_rank())


CASES = {"read_any_count": read_any_count, "write_every_backend": write_every_backend, "empty": empty}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
