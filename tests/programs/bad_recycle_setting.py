"""The MPI program of ``tests/test_restart_memory.py``'s bad-setting test: every rank writes its rows of one
variable, then one rank (the last) sets ``CKPTIO_RECYCLE_SECONDS`` to the text given and every rank opens the
checkpoint. Each rank prints ``RESULT {json}``: whether its open failed, with the error's type and message."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
from mpi4py import MPI

import ckptio


def main() -> None:
    comm = MPI.COMM_WORLD
    r, n = comm.Get_rank(), comm.Get_size()
    path, bad = sys.argv[1], sys.argv[2]
    with ckptio.create(path, comm) as ck:
        ck.write("a", np.full((4, 8), float(r)), offset=(4 * r, 0), global_shape=(4 * n, 8))
    if r == n - 1:
        os.environ["CKPTIO_RECYCLE_SECONDS"] = bad
    out: dict[str, object] = {"rank": r}
    try:
        with ckptio.open(path, comm) as ck:
            ck.read("a", (0, 0), (4 * n, 8))
        out["error"] = None
    except Exception as exc:  # what every rank is told
        out["error"] = f"{type(exc).__name__}: {exc}"
    print("RESULT", json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
