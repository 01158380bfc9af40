"""Issue 23: a series identity that survives copies and restarts, and every argument agreed before any collective.

Each case is a command of ``series_job.py`` (an importable module, linted like the library), run under mpirun; every
rank prints ``OK <rank>`` after its own checks.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_root, tmpfs
from mpi_helpers import mpi_env, run_mpi

JOB = str(Path(__file__).with_name("series_job.py"))
# Series timelines, retention and leases: rank 0's file logic, the same on every MPI-IO implementation. make test
# runs them; make test-matrix (per MPI stack) runs the cases that go through MPI-IO, agreement or MPI_Finalize.
STACK_INDEPENDENT = pytest.mark.stack_independent


def run_case(nprocs: int, case: str, tmp_path: Path, *args: str) -> None:
    d = tmp_path / "run"
    d.mkdir()
    proc = run_mpi(nprocs, [JOB, case, str(d), *args], timeout=150)
    assert proc.stdout.count("OK") == nprocs, proc.stdout + proc.stderr


@STACK_INDEPENDENT
@pytest.mark.mpi
@pytest.mark.timeout(180)
@pytest.mark.parametrize("keep", ["1", "2"])
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("nprocs", [1, 3])
def test_checkpoints_without_identity_never_cost_the_run_its_own_new_ones(nprocs, mode, keep, tmp_path):
    """Critical 1: chk_10/20/30 by ckptio.create; a Series(keep) run restarting from 20 keeps what it just wrote,
    abandons 30, and latest() is the run's own newest."""
    run_case(nprocs, "identityless", tmp_path, mode, keep)


@STACK_INDEPENDENT
@pytest.mark.mpi
@pytest.mark.timeout(180)
@pytest.mark.parametrize(("mode", "backend"), [("staged", "mpiio"), ("sync", "hdf5"), ("sync", "pnetcdf"),
                                               ("async", "hdf5")])
def test_checkpoints_without_identity_in_every_backend_and_staged(mode, backend, tmp_path):
    """Critical 1 where the series identity is stored by the HDF5 and netCDF formats, and with staged drains."""
    run_case(3, "identityless", tmp_path, mode, "1", backend)


@STACK_INDEPENDENT
@pytest.mark.mpi
@pytest.mark.timeout(180)
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_a_checkpoint_copied_from_another_run_supersedes_nothing_and_is_never_deleted(nprocs, tmp_path):
    """Critical 2: another series' chk_000040 copied into a directory with 60/70/80."""
    run_case(nprocs, "copied", tmp_path)


@STACK_INDEPENDENT
@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_an_older_ckptios_counter_still_orders_its_checkpoints(tmp_path):
    run_case(2, "legacy", tmp_path)


@STACK_INDEPENDENT
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


@pytest.mark.mpi
@pytest.mark.timeout(180)
@pytest.mark.parametrize("verify", ["true", "false"])
@pytest.mark.parametrize("nprocs", [1, 3])
def test_a_checkpoint_replaced_after_open_is_a_clear_error_not_corruption(nprocs, verify, tmp_path):
    """Major 10: read what was opened (the file's identity is checked when the aggregators open it)."""
    run_case(nprocs, "replaced", tmp_path, verify)


@STACK_INDEPENDENT
@pytest.mark.mpi
@pytest.mark.timeout(180)
@pytest.mark.parametrize("nprocs", [1, 2])
def test_one_name_rule_and_near_miss_names_are_reported(nprocs, tmp_path):
    """Major 8: Series(prefix="chk_") and ckptio.latest(prefix="chk_") agree; a restart that finds only names of
    another case, padding or suffix warns (error with must_exist=True) instead of cold-starting silently."""
    run_case(nprocs, "near_miss", tmp_path)


@needs_root
@pytest.mark.mpi
@pytest.mark.timeout(240)
@pytest.mark.parametrize("nprocs", [1, 2])
def test_a_failed_drain_neither_drops_the_next_checkpoint_nor_blocks_the_restart(nprocs, tmp_path):
    """Majors 6 and 7: staged mode in a Series behaves as async does when a drain fails (destination full)."""
    with tmpfs(tmp_path / "fs", "2m") as fs:
        d = fs / "run"
        d.mkdir()
        proc = run_mpi(nprocs, [JOB, "staged_full", str(d), str(tmp_path / "stage")], timeout=200)
        assert proc.stdout.count("OK") == nprocs, proc.stdout + proc.stderr


def _lease(d: Path) -> Path:
    return d / ".chk_.ckptio-lease"


@STACK_INDEPENDENT
@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_checkpoints_kept_on_the_nodes_hold_the_lease(tmp_path):
    """Multi-level (issue 28): a Series whose checkpoints stay on the node level (drain_every) refreshes its lease
    with each one (a live job's lease went stale between drains) and stops, on every rank, once another job took
    the series over (only a drained checkpoint's rename checked the lease)."""
    d = tmp_path / "run"
    d.mkdir()
    proc = run_mpi(2, [JOB, "lease_node_level", str(d), str(tmp_path / "stage")], timeout=200)
    assert proc.stdout.count("OK") == 2, proc.stdout + proc.stderr


@STACK_INDEPENDENT
@pytest.mark.mpi
@pytest.mark.timeout(240)
@pytest.mark.parametrize("stale", [False, True], ids=["live", "stale"])
def test_two_jobs_writing_one_series(stale, tmp_path):
    """Major 9: a second job on a series whose writer is live is refused on every rank, naming the first; one
    that takes over a stale lease makes the old writer's next checkpoint fail before its rename."""
    import os
    import time

    from mpi_helpers import mpiexec

    d, ctl = tmp_path / "run", tmp_path / "ctl"
    d.mkdir()
    ctl.mkdir()
    env = mpi_env()
    a = subprocess.Popen([*mpiexec(env), "-n", "2", sys.executable, JOB, "lease_a", str(d), str(ctl),
                          "taken" if stale else "ok"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, stdin=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 120
        while not (ctl / "a").exists():
            assert a.poll() is None and time.monotonic() < end, a.communicate()
            time.sleep(0.1)
        if stale:  # the first job's last heartbeat an hour ago (as if it had died then)
            os.utime(_lease(d), (time.time() - 3600, time.time() - 3600))
            (ctl / "wait-a2").touch()
        proc = run_mpi(2, [JOB, "lease_b", str(d), str(ctl), "took" if stale else "refused"], timeout=150)
        assert proc.stdout.count("OK") == 2, proc.stdout + proc.stderr
        out, err = a.communicate(timeout=150)
        assert a.returncode == 0 and out.count("OK") == 2, out + err
    finally:
        if a.poll() is None:
            a.kill()
    assert not _lease(d).exists()  # released at the holder's normal exit


@STACK_INDEPENDENT
@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_a_dead_holders_lease_is_taken_over_and_a_live_one_elsewhere_refuses(tmp_path, monkeypatch):
    """A job that died without its exit handlers leaves its lease: on its host, where its process is gone, the next
    job takes it over at once. A fresh lease of a holder on another host (whose liveness cannot be seen from here)
    refuses another job, and is taken over at once by the same batch job, requeued (same job id)."""
    import json
    import os

    d, ctl = tmp_path / "run", tmp_path / "ctl"
    d.mkdir()
    ctl.mkdir()
    (ctl / "a").touch()
    for name in ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "COBALT_JOBID"):
        monkeypatch.delenv(name, raising=False)  # (an empty SLURM_JOB_ID crashes Open MPI's mpirun)
    env: dict[str, str] = {}
    run_mpi(2, [JOB, "lease_dead", str(d)], timeout=120, check=False)
    assert _lease(d).exists()
    proc = run_mpi(2, [JOB, "lease_b", str(d), str(ctl), "took"], env=env, timeout=120)
    assert proc.stdout.count("OK") == 2, proc.stdout + proc.stderr
    (d / "chk_000010").unlink()
    elsewhere = {"run": "f" * 32, "host": "another-node", "pid": os.getpid(), "job": "4242", "interval": 60.0}
    _lease(d).write_text(json.dumps(elsewhere))
    proc = run_mpi(2, [JOB, "lease_b", str(d), str(ctl), "refused"], env={**env, "PBS_JOBID": "4243"}, timeout=120)
    assert proc.stdout.count("OK") == 2, proc.stdout + proc.stderr
    proc = run_mpi(2, [JOB, "lease_b", str(d), str(ctl), "took"], env={**env, "SLURM_JOB_ID": "4242"}, timeout=120)
    assert proc.stdout.count("OK") == 2, proc.stdout + proc.stderr
