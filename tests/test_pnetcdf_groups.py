"""PnetCDF's data write in steps of variable groups (``backends.pnetcdf_steps.data_groups``): the engine starts
the write-back after each, so the storage works while PnetCDF copies the next group (FLASH-IO's shape on 2 ranks:
0.089 s in one ``wait_all``, 0.073 s in groups; direct PnetCDF 0.084: benchmarks/README.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ckptio.backends.pnetcdf_steps import data_groups
from mpi_helpers import run_mpi

from ckptio.model.variable_plan import VariablePlan

PROGRAM = str(Path(__file__).resolve().parent / "programs" / "pnetcdf_groups.py")
MiB = 1 << 20


def plans(sizes: dict[str, int]) -> dict[str, VariablePlan]:
    """Variables of ``sizes`` bytes each (uint8, 1-D) as the write plan describes them."""
    return {name: VariablePlan(name, "uint8", (n,), "array") for name, n in sizes.items()}


def test_each_variable_of_the_group_size_is_a_group_and_smaller_ones_go_together():
    v = plans({"a": 5 * MiB, "b": 5 * MiB, "t1": 100, "t2": 3 * MiB, "t3": 2 * MiB, "c": 8 * MiB, "tail": 10})
    names = list(v)
    assert data_groups(v, names, 4 * MiB) == [["a"], ["b"], ["t1", "t2", "t3"], ["c", "tail"]]
    assert data_groups(v, names, 0) == [names]  # no early write-back: one wait_all, as before
    assert data_groups(v, names, 64 * MiB) == [names]  # everything under one group's size
    assert data_groups(v, [], 4 * MiB) == [[]]  # nothing stored: still one (empty) collective step


def test_many_small_variables_make_few_steps():
    v = plans({f"x{i}": 1024 for i in range(10_000)})
    groups = data_groups(v, list(v), 4 * MiB)
    assert len(groups) == 2 and sum(len(g) for g in groups) == 10_000  # 10,000 KiB: one 4 MiB group + the rest
    assert [n for g in groups for n in g] == list(v)  # every variable once, in order


def test_the_groups_are_the_same_on_every_rank_whatever_it_owns():
    """From the plan's global shapes only (a rank's own blocks never enter): what makes the steps collective."""
    v = plans({"a": 3 * MiB, "b": 3 * MiB, "c": 3 * MiB})
    mine = dict(v)
    mine["a"] = VariablePlan("a", "uint8", (3 * MiB,), "array", rank=np.array([2], np.int64))  # rank 2's view
    assert data_groups(mine, list(mine), 4 * MiB) == data_groups(v, list(v), 4 * MiB) == [["a", "b", "c"]]


@pytest.mark.mpi
@pytest.mark.parametrize("setting,started,steps", [("64K", 6, 6), ("1K", 6, 6), ("0", 0, 1)])
def test_ranks_that_own_nothing_of_a_group_still_write_every_step_and_restart(tmp_path, setting, started, steps):
    """3 ranks, six 512 KiB variables each owned by two of them, ten small ones: a step per large variable (the
    small ones with the last; a setting under 64 KiB is taken as 64 KiB, as for the native writers, so 1K does
    not make a collective step per small variable); 0: one wait_all, no write-back started."""
    path = tmp_path / "chk_000001"
    out = run_mpi(3, [PROGRAM, "write", str(path)], timeout=300, env={"CKPTIO_WRITEBACK_BYTES": setting}).stdout
    counted = sorted(line.split()[1:] for line in out.splitlines() if line.startswith("STEPS "))
    assert counted == [[str(r), str(started), str(steps)] for r in range(3)], out
    for m in (2, 4):
        assert f"READ OK {m}" in run_mpi(m, [PROGRAM, "read", str(path)], timeout=300).stdout


@pytest.mark.mpi
@pytest.mark.parametrize("step", [0, 2, 5])
def test_a_failure_in_any_group_fails_every_rank_and_restores_the_arrays(tmp_path, step):
    """Rank 1's wait_all of group ``step`` (of 6; it owns nothing of group 2, where the error is an exception as
    pnetcdf-python raises, elsewhere a failed request's status) fails: every rank raises, none
    hangs in a later group's wait_all, the arrays PnetCDF byte-swapped in place hold their own bytes again, the
    temporary file is gone and the next checkpoint at the same path writes and restarts."""
    path = tmp_path / "chk_000001"
    out = run_mpi(3, [PROGRAM, "fail", str(path), str(step)], timeout=300,
                  env={"CKPTIO_WRITEBACK_BYTES": "64K"}).stdout
    raised = [line.split()[1:3] for line in out.splitlines() if line.startswith("RAISED ")]
    assert sorted(r for r, _ in raised) == ["0", "1", "2"] and "NOT RAISED" not in out, out
    assert all("Error" in cls for _, cls in raised), raised
    for r in range(3):
        assert f"RESTORED {r}" in out and f"NEXT OK {r}" in out, out
    assert "LEFT" not in out, out
    assert list(tmp_path.iterdir()) == [path], list(tmp_path.iterdir())


@pytest.mark.mpi
def test_a_write_error_on_one_rank_only_fails_every_rank_without_a_hang(tmp_path):
    """Rank 1 may not write past 256 KiB of a file (RLIMIT_FSIZE): Open MPI's OMPIO logs the failed pwritev and
    reports nothing to PnetCDF's wait_all, and its MPI_File_sync failed on rank 1 alone while the other ranks
    waited in it (found by an outside trial: the job hung). The data is now synced with each rank's own fsync
    (engine.write._sync_data) and what did not land is found by the planning rank, for every rank alike."""
    path = tmp_path / "chk_000001"
    proc = run_mpi(3, [PROGRAM, "limit", str(path)], timeout=180, check=False)
    raised = [line.split(" ", 3) for line in proc.stdout.splitlines() if line.startswith("RAISED ")]
    assert sorted(r[1] for r in raised) == ["0", "1", "2"] and "NOT RAISED" not in proc.stdout, \
        proc.stdout + proc.stderr
    assert all("lost writes" in r[3] or "File too large" in r[3] or "file size limit, ulimit -f" in r[3]
               for r in raised), raised
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())  # the temporary file is gone
