"""The MPI program of ``tests/test_placement_stats.py`` (``mpirun -n 2 python placement_stats.py write PATH MODE``).

``write PATH sync|async``: 1 MiB per rank written, then read back with one aggregator; every rank prints
``JSON {"rank", "written": ckptio.coord.placement.write_report, "read": ckptio.coord.placement.read_report}``.
"""

from __future__ import annotations

import json
import sys

import numpy as np

import ckptio
from ckptio.coord import placement


def write(comm, path: str, mode: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    ck = ckptio.create(path, comm, mode=mode)
    ck.write("u", np.full((128, 1024), r, np.float64), offset=(128 * r, 0), global_shape=(128 * n, 1024))
    ck.close()
    ck.wait()
    written = placement.write_report(ck)
    with ckptio.open(path, comm, aggregators=1) as rd:
        rd.read("u")
        read = placement.read_report(rd)
    print("JSON " + json.dumps({"rank": r, "written": written, "read": read}), flush=True)


CASES = {"write": write}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
