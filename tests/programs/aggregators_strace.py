"""The MPI programs of ``tests/test_aggregators_strace.py`` (``python aggregators_strace.py CASE PATH ...``).

* ``write PATH BACKEND``: every rank writes 50 rows of "u" (100 columns), filled with its rank;
* ``read PATH``: every rank reads its share of the rows with 2 aggregators and writes
  ``info.<rank>.json`` (rank, pid, aggregator flag, the Reader's statistics) beside ``PATH``; run under strace,
  which records every process's file accesses by pid.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

import ckptio


def write(comm, path: str, backend: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    with ckptio.create(path, comm, backend=backend) as ck:
        ck.write("u", np.full((50, 100), r, np.float64), offset=(50 * r, 0), global_shape=(50 * n, 100))


def read(comm, path: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    with ckptio.open(path, comm, aggregators=2) as ck:
        rows = ck.variables["u"].shape[0]
        lo, hi = r * rows // n, (r + 1) * rows // n
        got = ck.read("u", offset=(lo, 0), shape=(hi - lo, 100))
        assert (got == (np.arange(lo, hi) // 50)[:, None]).all()
        info = {"rank": r, "pid": os.getpid(), "aggregator": r in ck.aggregators, "stats": ck.stats.to_json()}
    with open(os.path.join(os.path.dirname(path), f"info.{r}.json"), "w") as f:
        json.dump(info, f)


CASES = {"write": write, "read": read}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
