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


# A launcher for flash_like.py that sends SIGUSR1 to its own process while `import ckptio` runs: where the batch
# system's warning lands when a job starts on a busy node (the Slurm CI saw a rerun's rank die of it).
SIGNAL_DURING_IMPORT = """
import importlib.abc, os, runpy, signal, sys

class SignalOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "ckptio":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGUSR1)  # blocked, or the process ends here (SIGUSR1's default action)
            print("SIGUSR1 sent during import ckptio", flush=True)
        return None

sys.meta_path.insert(0, SignalOnImport())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def flash_like_batch(launcher, nprocs: int, outdir, steps: int, every: int):
    """examples/flash_like/flash_like.py --batch (8 blocks of 8^3) started by ``launcher`` on ``nprocs`` ranks:
    (the completed process, its stdout and stderr together)."""
    from mpi_helpers import REPO

    proc = run_mpi(nprocs, [str(launcher), str(REPO / "examples" / "flash_like" / "flash_like.py"), "--batch",
                            "--outdir", str(outdir), "--steps", str(steps), "--nblocks", "8", "--nxb", "8",
                            "--checkpoint-every", str(every)], timeout=180, check=False)
    return proc, proc.stdout + proc.stderr


@pytest.mark.parametrize("nprocs", [1, 2])
def test_flash_like_keeps_a_warning_that_arrives_during_its_imports(tmp_path, nprocs):
    """flash_like.py --batch blocks the warning signals before its first import and unblocks them once the handlers
    are installed: a SIGUSR1 during `import ckptio` is not the end of the process but the decision to stop (after
    step 1: its checkpoint is the final one, exit status 3)."""
    launcher = tmp_path / "launch.py"
    launcher.write_text(SIGNAL_DURING_IMPORT)
    outdir = tmp_path / "run"
    proc, out = flash_like_batch(launcher, nprocs, outdir, steps=20, every=5)
    assert proc.stdout.count("SIGUSR1 sent during import ckptio") == nprocs, out
    assert proc.returncode == 3, out
    assert "stopping at step 1" in out and f"final checkpoint {outdir}/chk_000001 committed" in out, out


@pytest.mark.parametrize("nprocs", [1, 2])
def test_flash_like_ends_with_its_own_status_when_a_warning_comes_as_it_exits(tmp_path, nprocs):
    """CI, 2026-12-06 (tests/slurm at load): the job's last requeued run finished its 50 steps and wrote its final
    state, then the time-limit warning (SIGUSR1) arrived while the process exited, after the interpreter's
    finalization had given the signal its default action back: the finished job ended with status 138 and Slurm
    marked it FAILED. ckptio.batch now ignores the signals it handles at exit (an atexit hook, before that
    finalization); the launcher (tests/programs/signal_after_main.py) imitates the finalization after every exit
    hook and sends SIGUSR1."""
    from mpi_helpers import REPO

    launcher = REPO / "tests" / "programs" / "signal_after_main.py"
    proc, out = flash_like_batch(launcher, nprocs, tmp_path / "run", steps=6, every=3)
    assert proc.stdout.count("SIGUSR1 sent after main() returned") == nprocs, out
    assert proc.returncode == 0, out

