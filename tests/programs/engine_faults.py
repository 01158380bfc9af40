"""The MPI program of ``tests/test_engine_steps.py``: the engine facing a storage backend that breaks the contract
on one rank only. The native format is subclassed (registered in this process only, :func:`ckptio.backends.register`)
with its handle's ``write`` changed, and without ``placed_bytes`` (so the engine runs the handle's own collective
steps, as for every format whose bytes ckptio does not place, instead of its own collective buffering):

``raise-preparing``        rank 1's ``write()`` raises before it returns its steps (it once hung every other rank);
``raise-preparing-later``  rank 1's steps are a generator that raises while preparing its second step;
``extra-step``             rank 1 makes one collective step more than the others.

``mpirun -n N python engine_faults.py CASE PATH``: every rank prints ``RAISED <rank> <error class>`` (or
``NO ERROR <rank>``), then ``LEFT <rank> <names in the directory>`` after the job agreed.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
from ckptio.backends import register
from ckptio.backends.mpiio import NativeBackend
from mpi4py import MPI

import ckptio


def faulty_backend(case: str) -> type[NativeBackend]:
    class Faulty(NativeBackend):
        name = f"faulty-{case}"
        capabilities = dataclasses.replace(NativeBackend.capabilities, placed_bytes=False)

        def create(self, *args, **kw):
            handle = super().create(*args, **kw)
            write = handle.write
            rank = MPI.COMM_WORLD.Get_rank()

            def broken(blocks, tables):
                steps = list(write(blocks, tables))
                if case == "raise-preparing" and rank == 1:
                    raise RuntimeError("rank 1 cannot prepare its write")
                if case == "extra-step" and rank == 1:
                    return [*steps, ("one more", lambda: None)]
                if case == "raise-preparing-later":
                    return later(steps)
                return steps

            def later(steps):
                yield ("nothing yet", lambda: None)
                if rank == 1:
                    raise MemoryError("rank 1 cannot prepare its second step")
                yield from steps

            handle.write = broken
            return handle

    return register(Faulty)


def main(case: str, path: str) -> None:
    comm = MPI.COMM_WORLD
    backend = faulty_backend(case)
    rank = comm.Get_rank()
    try:
        with ckptio.create(path, comm, backend=backend.name) as ck:
            ck.write("u", np.full(4, float(rank)), offset=(4 * rank,), global_shape=(4 * comm.size,))
        print(f"NO ERROR {rank}", flush=True)
    except ckptio.CheckpointError as exc:
        print(f"RAISED {rank} {type(exc).__name__}", flush=True)
    comm.Barrier()
    print(f"LEFT {rank} {sorted(os.listdir(os.path.dirname(path)))}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
