"""Issue 23: a series identity that survives copies and restarts, and every argument agreed before any collective.

Each case is a command of ``series_job.py`` (an importable module, linted like the library), run under mpirun; every
rank prints ``OK <rank>`` after its own checks.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mpi_helpers import mpi_env, run_mpi

JOB = str(Path(__file__).with_name("series_job.py"))


def run_case(nprocs: int, case: str, tmp_path: Path, *args: str) -> None:
    d = tmp_path / "run"
    d.mkdir()
    proc = run_mpi(nprocs, [JOB, case, str(d), *args], timeout=150)
    assert proc.stdout.count("OK") == nprocs, proc.stdout + proc.stderr


@pytest.mark.mpi
@pytest.mark.timeout(180)
@pytest.mark.parametrize("keep", ["1", "2"])
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("nprocs", [1, 3])
def test_checkpoints_without_identity_never_cost_the_run_its_own_new_ones(nprocs, mode, keep, tmp_path):
    """Critical 1: chk_10/20/30 by ckptio.create; a Series(keep) run restarting from 20 keeps what it just wrote,
    abandons 30, and latest() is the run's own newest."""
    run_case(nprocs, "identityless", tmp_path, mode, keep)


@pytest.mark.mpi
@pytest.mark.timeout(180)
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_a_checkpoint_copied_from_another_run_supersedes_nothing_and_is_never_deleted(nprocs, tmp_path):
    """Critical 2: another series' chk_000040 copied into a directory with 60/70/80."""
    run_case(nprocs, "copied", tmp_path)


@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_an_older_ckptios_counter_still_orders_its_checkpoints(tmp_path):
    run_case(2, "legacy", tmp_path)


@pytest.mark.mpi
@pytest.mark.timeout(180)
@pytest.mark.parametrize("nprocs", [1, 2])
def test_creating_the_restart_step_is_refused_on_every_rank(nprocs, tmp_path):
    """Major 11: the restart source is never replaced."""
    run_case(nprocs, "restart_step", tmp_path)


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_a_bad_argument_on_one_rank_is_the_same_error_on_every_rank(nprocs, tmp_path):
    """Major 4 and issue 27 item 4: Series(...), Series.create, ckptio.create and ckptio.latest with a bad value
    on the last rank only raise on every rank (no hang); Series options are checked at construction."""
    run_case(nprocs, "bad_arguments", tmp_path)


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["hdf5", "pnetcdf", "mpiio"])
@pytest.mark.parametrize(("nprocs", "count"), [(2, "3"), (4, "3"), (2, "1")])
def test_background_checkpoints_in_flight_at_exit_are_all_committed(nprocs, count, backend, tmp_path):
    """Critical 3: with mode="async" and no wait(), every checkpoint is committed at interpreter exit, for every
    backend (h5py's own exit handler used to run first: 'Operation not defined for data type class', and a
    one-checkpoint script crashed in MPI_Finalize)."""
    run_case(nprocs, "exit_in_flight", tmp_path, backend, count)
    d = tmp_path / "run"
    names = [f"chk_{s:06d}" for s in range(1, int(count) + 1)]
    assert sorted(p.name for p in d.iterdir()) == names
    check = subprocess.run([sys.executable, "-m", "ckptio", "inspect", "--verify", *(str(d / n) for n in names)],
                           capture_output=True, text=True, env=mpi_env(), timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.mpi
@pytest.mark.timeout(180)
@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_collective_settings_that_differ_or_are_misspelt_fail_on_every_rank(nprocs, tmp_path):
    """Major 5: CKPTIO_READ_IO=posix on one rank and mpiio on another hung the restart; CKPTIO_READ_THREAD=maybe
    was taken silently. One settings table (ckptio.settings), compared in the first agreed phase."""
    run_case(nprocs, "settings", tmp_path)
