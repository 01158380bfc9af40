"""ckptio.tiers.batch and Series.should_exit outside a batch system (issue 25): real MPI jobs at 1, 2 and 4 ranks, real
signals. The same under a real Slurm: tests/slurm/ (make test-slurm)."""

from __future__ import annotations

import signal

import pytest
from mpi_helpers import PROGRAMS, run_mpi, run_program
from test_bindings import CODES, error_lines, same_everywhere

from ckptio.tiers import batch

pytestmark = pytest.mark.mpi
PROGRAM = str(PROGRAMS / "batch.py")  # the MPI program of these tests


@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_should_exit_signals_time_and_errors(tmp_path, nprocs):
    """Signals on one rank decide for all (chained to the application's handler, SIG_DFL never called); the time
    rule uses the last checkpoint's duration plus the margin; bad input fails every rank alike."""
    proc = run_mpi(nprocs, [PROGRAM, "checks", str(tmp_path / "run")], timeout=180)
    for word in ("SIGNAL OK", "TIME OK", "ERRORS OK", "THREAD OK"):
        assert word in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.mpi
def test_no_thread_for_the_signal_watchdog_on_one_rank(tmp_path):
    """The collective section runs unwatched on that rank (said once on stderr) instead of raising alone."""
    (tmp_path / "run").mkdir()
    proc = run_mpi(2, [PROGRAM, "unwatched", str(tmp_path / "run")], timeout=120)
    assert "UNWATCHED OK" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.count("cannot watch held signals") == 1, proc.stderr


def test_parse_time_left_and_signals():
    assert batch.parse_time_left("1-02:03:04") == 93784.0
    assert batch.parse_time_left("5:07") == 307.0
    assert batch.parse_time_left("59") == 59.0
    assert batch.parse_time_left("UNLIMITED") is None
    for bad in ("", "1:2:3:4", "x-1:00", "1:xx"):
        with pytest.raises(ValueError):
            batch.parse_time_left(bad)
    assert batch.parse_signals("USR1, sigterm") == (signal.SIGUSR1, signal.SIGTERM)
    assert batch.parse_signals("none") == ()
    for bad in ("KILL", "STOP", "NOPE"):
        with pytest.raises(ValueError, match="CKPTIO_EXIT_SIGNALS"):
            batch.parse_signals(bad)


# ----------------------------------------------------------------------------------- C and Fortran bindings
@pytest.mark.parametrize("nprocs", [2, 4])
def test_c_should_exit(tmp_path, nprocs):
    from test_bindings import ensure_build

    build = ensure_build()
    proc = run_program(nprocs, [build / "ckptio_test_c", "should_exit", tmp_path], timeout=180)
    assert "SHOULD_EXIT OK" in proc.stdout, proc.stdout + proc.stderr
    message = same_everywhere(error_lines(proc.stdout), "should_exit_null", nprocs, CODES["CKPTIO_ERR_ARGUMENT"])
    assert "should_exit is NULL" in message and "rank 0" in message, message


def test_fortran_should_exit(tmp_path):
    from test_bindings import ensure_build

    build = ensure_build()
    proc = run_program(3, [build / "ckptio_test_f", "should_exit", tmp_path], timeout=180)
    assert "SHOULD_EXIT OK" in proc.stdout, proc.stdout + proc.stderr
