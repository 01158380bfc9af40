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
from mpi_helpers import PROGRAMS, run_mpi

PROGRAM = str(PROGRAMS / "killed_write_leftovers.py")  # the MPI program of this test


LOOKALIKES = [".chk_000003.ckptio-tmp-notours", ".chk_fine_000003.ckptio-tmp-0123456789ab", "chk_000003.ckptio-tmp"]


@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_killed_write_leftover_is_removed_by_the_next_commit(tmp_path):
    d = tmp_path / "run"
    killed = run_mpi(2, [PROGRAM, "write_steps", str(d), "1,2,3", "1"], timeout=60, check=False)
    assert killed.returncode != 0, killed.stdout
    leftovers = [f for f in os.listdir(d) if f.startswith(".chk_000003.ckptio-tmp-")]
    assert len(leftovers) == 1 and os.path.getsize(d / leftovers[0]) >= 2 * 8 << 16, os.listdir(d)
    for name in LOOKALIKES:
        (d / name).write_bytes(b"not ckptio's")
        os.utime(d / name, (1, 1))
    run_mpi(2, [PROGRAM, "write_steps", str(d), "3", "0"], timeout=60)
    assert sorted(os.listdir(d)) == sorted(["chk_000002", "chk_000003", *LOOKALIKES]), os.listdir(d)
