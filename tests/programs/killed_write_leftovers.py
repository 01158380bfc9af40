"""The MPI program of ``tests/faults/test_killed_write_leftovers.py``
(``mpirun -n 2 python killed_write_leftovers.py write_steps DIR STEPS KILL``).

``write_steps DIR STEPS KILL``: a Series (keep=2) writes the comma-separated STEPS, 1 MiB per rank each; with KILL=1,
rank 1 SIGKILLs itself while the last step's data is written (``CKPTIO_FAULT="write data:1"``). Prints
``OK <rank>`` when every step committed.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import ckptio


def write_steps(comm, d: str, steps_arg: str, kill_arg: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    steps, kill = [int(s) for s in steps_arg.split(",")], kill_arg == "1"
    series = ckptio.Series(d, comm, keep=2)
    for step in steps:
        if kill and step == steps[-1]:
            os.environ["CKPTIO_FAULT"] = "write data:1"
        with series.create(step) as ck:
            ck.write("x", np.full(1 << 16, step, np.float64), offset=(r << 16,), global_shape=(n << 16,))
    print("OK", r, flush=True)


CASES = {"write_steps": write_steps}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
