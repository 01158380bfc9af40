"""The MPI program of ``tests/faults/test_existing_files.py``: every rank writes its part of a checkpoint at PATH
and prints ``WROTE <rank>``, or ``RAISED <rank> <message>`` when ckptio refuses.

    mpirun -n N python existing_file.py PATH
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import ckptio


def main() -> None:
    comm = MPI.COMM_WORLD
    try:
        with ckptio.create(sys.argv[1], comm) as ck:
            ck.write("u", np.full(2, float(comm.rank)), offset=(2 * comm.rank,), global_shape=(2 * comm.size,))
        print("WROTE", comm.rank, flush=True)
    except ckptio.CheckpointError as exc:
        print("RAISED", comm.rank, " ".join(str(exc).split()), flush=True)


if __name__ == "__main__":
    main()
