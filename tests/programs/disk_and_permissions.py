"""The MPI program of ``tests/faults/test_disk_and_permissions.py``
(``mpirun -n 2 python disk_and_permissions.py stage_fill DIR STAGE``).

``stage_fill DIR STAGE``: a Series staged on a 2 MiB STAGE: two steps of 1.5 MiB do not fit, one of 16 KiB does
(a failed staged write must leave nothing in the stage). Prints ``STEP <step> OK|FULL <rank>``, then from rank 0
``PROBES <n> FILES <n>`` (what the stage still holds).
"""

from __future__ import annotations

import os
import sys

import numpy as np

import ckptio


def stage_fill(comm, d: str, stage: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    series = ckptio.Series(d, comm, keep=1, stage_dir=stage)
    for step, count in ((1, 200000), (2, 200000), (3, 2000)):     # 2 x 1.5 MiB do not fit a 2 MiB stage; 16 KiB do
        try:
            with series.create(step) as ck:
                ck.write("x", np.full(count, step, np.float64), offset=(count * r,), global_shape=(count * n,))
            ck.wait()
            print("STEP", step, "OK", r, flush=True)
        except ckptio.CheckpointError as exc:
            assert "No space left" in str(exc) or "no space" in str(exc).lower(), exc
            print("STEP", step, "FULL", r, flush=True)
    series.wait()
    comm.Barrier()
    if r == 0:
        left = [os.path.join(p, f) for p, _, fs in os.walk(stage) for f in fs if not f.startswith(".ckptio-probe")]
        probes = [f for p, _, fs in os.walk(stage) for f in fs if f.startswith(".ckptio-probe")]
        print("PROBES", len(probes), "FILES", len(left), flush=True)


CASES = {"stage_fill": stage_fill}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
