"""The MPI program of ``tests/faults/test_lost_writes.py``
(``mpirun -n P python lost_writes.py commit FS BACKEND OUT``, with space reservation off).

``commit FS BACKEND OUT``: a 3 MB checkpoint into the small file system FS, where ``FS/filler`` takes the space it
needs until rank 0 deletes it at the start of the commit: space comes back before the index is written, the data
was lost. Every rank writes ``OK`` or ``ERR <exception classes> | <message>`` to ``OUT/rank<rank>``.
"""

from __future__ import annotations

import os
import sys

import internals
import numpy as np

import ckptio


def commit(comm, fs: str, backend: str, out: str) -> None:
    filler = os.path.join(fs, "filler")

    def free_space():  # the backend's commit starts by deleting the filler: space comes back before the index
        if comm.Get_rank() == 0:
            os.unlink(filler)

    internals.run_before_commit(backend, free_space)
    n = 3_000_000 // 8 // comm.size
    try:
        with ckptio.create(os.path.join(fs, "chk_000020"), comm, backend=backend) as ck:
            ck.write("big", np.full(n, float(comm.rank + 1)), offset=(n * comm.rank,), global_shape=(n * comm.size,))
        line = "OK"
    except ckptio.CheckpointError as exc:
        line = f"ERR {' '.join(c.__name__ for c in type(exc).__mro__)} | {exc}"
    with open(os.path.join(out, f"rank{comm.rank}"), "w") as f:
        f.write(line)


CASES = {"commit": commit}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
