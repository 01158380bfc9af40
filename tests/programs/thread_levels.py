"""The MPI program of ``tests/test_thread_levels.py``
(``mpirun -n P python thread_levels.py tiles THREAD_LEVEL DIR BACKEND``).

``tiles``: MPI initialised at ``THREAD_LEVEL`` (mpi4py's names); 4 files of side-by-side tiles (the pattern that
Open MPI's OMPIO corrupts through collective HDF5/PnetCDF writes below MPI_THREAD_MULTIPLE), each read back and
compared. Rank 0 prints ``RESULT {"thread": the level MPI gave, "bad": files that read back wrong, "transfer":
the transfer mode the checkpoint records (hint ckptio_<backend>_transfer), "warned": whether ckptio warned about
independent transfers}``.
"""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np


def tiles(comm, thread_level: str, d: str, backend: str) -> None:
    """(``thread_level`` is applied by :func:`main`, before MPI is initialised.)"""
    from mpi4py import MPI

    import ckptio

    rank, size = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng(rank)
    bad = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for trial in range(4):
            path = f"{d}/tiles{trial}"
            w = ckptio.create(path, comm, backend=backend)
            mine = {}
            for v, (rows, cols) in enumerate([(8, 8), (16, 24), (3, 5), (100, 7)]):
                left, right = rng.random((rows, cols)), rng.random((rows, cols))
                w.write(f"v{v}", left, offset=(rows * rank, 0), global_shape=(rows * size, 2 * cols))
                w.write(f"v{v}", right, offset=(rows * rank, cols), global_shape=(rows * size, 2 * cols))
                mine[f"v{v}"] = np.concatenate([left, right], axis=1)
            w.close()
            with ckptio.open(path, comm) as r:
                ok = all(np.array_equal(r.read(k, offset=(x.shape[0] * rank, 0), shape=x.shape), x)
                         for k, x in mine.items())
                transfer = r.meta["hints"]["effective"].get(f"ckptio_{backend}_transfer")
            bad += comm.allreduce(0 if ok else 1)
    if rank == 0:
        print("RESULT", json.dumps({"thread": MPI.Query_thread(), "bad": bad, "transfer": transfer,
                                    "warned": any("independent data transfers" in str(c.message) for c in caught)}))


CASES = {"tiles": tiles}


def main(argv: list[str]) -> int:
    import mpi4py

    mpi4py.rc.thread_level = argv[1]  # before MPI is initialised (by the first import of mpi4py.MPI)
    from mpi4py import MPI

    CASES[argv[0]](MPI.COMM_WORLD, *argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
