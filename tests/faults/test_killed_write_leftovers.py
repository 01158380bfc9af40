"""Retention after a killed write (issue 11 item 5): the killed job's space-reserved temporary is removed by the
next run's retention once a newer checkpoint of the series committed -- and nothing else is.

Job 1 (2 ranks): a Series writes steps 1 and 2, then rank 1 SIGKILLs itself while step 3's data is written
(``CKPTIO_FAULT="write data:1"``), leaving ``.chk_000003.ckptio-tmp-*`` behind. Job 2 (2 ranks) reruns step 3
through a new Series: after its commit the leftover is gone, the hand-made look-alikes are still there.
"""

from __future__ import annotations

import os

import pytest
from conftest import REPO  # noqa: F401  (tests/ on sys.path)
from mpi_helpers import run_script

JOB = """
import os, sys, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
d, steps, kill = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], sys.argv[3] == "1"
series = ckptio.Series(d, comm, keep=2)
for step in steps:
    if kill and step == steps[-1]:
        os.environ["CKPTIO_FAULT"] = "write data:1"
    with series.create(step) as ck:
        ck.write("x", np.full(1 << 16, step, np.float64), offset=(r << 16,), global_shape=(n << 16,))
print("OK", r, flush=True)
"""

LOOKALIKES = [".chk_000003.ckptio-tmp-notours", ".chk_fine_000003.ckptio-tmp-0123456789ab", "chk_000003.ckptio-tmp"]


@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_killed_write_leftover_is_removed_by_the_next_commit(tmp_path):
    d = tmp_path / "run"
    killed = run_script(2, JOB, tmp_path, str(d), "1,2,3", "1", timeout=60, check=False)
    assert killed.returncode != 0, killed.stdout
    leftovers = [f for f in os.listdir(d) if f.startswith(".chk_000003.ckptio-tmp-")]
    assert len(leftovers) == 1 and os.path.getsize(d / leftovers[0]) >= 2 * 8 << 16, os.listdir(d)
    for name in LOOKALIKES:
        (d / name).write_bytes(b"not ckptio's")
        os.utime(d / name, (1, 1))
    run_script(2, JOB, tmp_path, str(d), "3", "0", timeout=60)
    assert sorted(os.listdir(d)) == sorted(["chk_000002", "chk_000003", *LOOKALIKES]), os.listdir(d)
