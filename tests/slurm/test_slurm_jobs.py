"""The FLASH-like example under a real Slurm (issue 25): the warning signal mid-run -> final checkpoint committed,
job requeued, the rerun restarts by itself and ends bit-identical to an uninterrupted run. srun and mpirun inside
sbatch, async and staged checkpoints in flight, SIGTERM at the hard limit, a real time limit, the time rule, the
Fortran example; every backend at least once. Run with ``make test-slurm``."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from slurm_helpers import EXAMPLES, FLASH_PY, REPO, SMALL, STEPS, assert_same_state

SRUN = EXAMPLES / "flash_like_srun.sbatch"
MPIRUN = EXAMPLES / "flash_like_mpirun.sbatch"
FORTRAN = EXAMPLES / "flash_like_fortran.sbatch"


def latest_step(outdir: Path) -> int | None:
    """The step of the newest checkpoint that verifies (every checksum read), asked in a separate process."""
    code = ("import sys, ckptio; p = ckptio.latest(sys.argv[1], 'chk_', verify=True); "
            "print(ckptio.open(p).attrs['step'] if p else 'none')")
    out = subprocess.run([sys.executable, "-c", code, str(outdir)], capture_output=True, text=True, timeout=600,
                         check=True).stdout.strip()
    return None if out == "none" else int(out)


def stopped_at(text: str) -> int:
    found = re.findall(r"stopping at step (\d+)", text)
    assert found, text[-4000:]
    return int(found[0])


def check_requeued_run(job, info: dict[str, str], outdir: Path, reference: Path, final: Path,
                       steps: int = STEPS) -> str:
    """The job ended COMPLETED after >= 1 requeue; its first run stopped on the warning with a committed final
    checkpoint, the rerun restarted from exactly that checkpoint and ended in the reference's state."""
    text = job.text()
    assert info["JobState"] == "COMPLETED" and int(info["Restarts"]) >= 1, job.report(info)
    step = stopped_at(text)
    assert f"final checkpoint {outdir}/chk_{step:06d} committed" in text, text[-4000:]
    assert re.search(rf"restarted from {re.escape(str(outdir))}/chk_{step:06d}: step {step}\b", text), text[-4000:]
    assert text.count("fresh start") == 1, text[-4000:]
    assert_same_state(final, reference / "final.npz")
    assert latest_step(outdir) == steps
    return text


# --time=1 (the shortest limit) with --signal=USR1@15: slurmctld checks limits every 30 s and sends the warning at
# the first check where elapsed >= limit - 15 - 30 s, i.e. 15..45 s into each run, after the ranks installed
# their handlers (flash_like installs them before MPI_Init). With @40 it could come at the very first check, 0..30
# s in, while Python is still starting, and SIGUSR1 before the handler is installed ends the process: seen with
# @20 (10..40 s) on a rerun that started while the machine's load was ~100. 50 steps of 1 s (and 10 checkpoints)
# outlast the first warning. CKPTIO_EXIT_MARGIN=0: only the warning stops these runs (the 30 s default would too).
LIMITED_STEPS = 50


TIMED_JOB = """#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=1
#SBATCH --requeue
#SBATCH --open-mode=append
echo "== $(date -u +%FT%TZ) job $SLURM_JOB_ID run ${{SLURM_RESTART_COUNT:-0}}: start"
srun --mpi=pmix python {app} "$@"
"""


@pytest.fixture(scope="module")
def time_limit_jobs(jobs, tmp_path_factory):
    """Two jobs with --time=1, submitted at the start of the module so that they run beside the other tests:
    (1) --signal=USR1@15, the warning as Slurm itself sends it, margin 0 (pnetcdf, 4 ranks on 2 nodes); (2) no --signal,
    CKPTIO_EXIT_MARGIN=45: should_exit from the remaining wall time alone (squeue, once per run), well before the
    limit (mpiio, 1 rank)."""
    folder = tmp_path_factory.mktemp("time_limit")
    warned = jobs(folder, SRUN, "--steps", LIMITED_STEPS, *SMALL, "--backend", "pnetcdf", "--step-seconds", "1",
                  "--final-state", folder / "warned.npz", options=["--time=1", "--signal=USR1@15"],
                  env={"OUTDIR": str(folder / "warned"), "CKPTIO_EXIT_MARGIN": "0"})
    script = folder / "timed.sbatch"  # flash_like_srun.sbatch without its --signal (sbatch cannot drop it)
    script.write_text(TIMED_JOB.format(app=FLASH_PY))
    timed = jobs(folder, script, "--outdir", folder / "timed", "--resume", "--batch", "--requeue", "--steps", STEPS,
                 *SMALL, "--step-seconds", "1", "--final-state", folder / "timed.npz",
                 env={"CKPTIO_EXIT_MARGIN": "45"})
    return folder, warned, timed, time.monotonic()


def test_time_limit_jobs_submitted(time_limit_jobs):
    """(Starts the two --time=1 jobs; test_real_time_limit_and_time_rule, the last test, checks them.)"""
    _, warned, timed, _ = time_limit_jobs
    for job in (warned, timed):
        info = job.info()
        assert info["TimeLimit"] == "00:01:00" and info["Requeue"] == "1", info


def test_srun_warning_requeue_restart(submit, reference, tmp_path):
    """srun, 4 ranks on 2 nodes, mpiio: SIGUSR1 to the tasks (what --signal=USR1@T sends) after the first checkpoint;
    the app requeues its own job (ckptio.tiers.batch.requeue)."""
    outdir, final = tmp_path / "run", tmp_path / "final.npz"
    job = submit(SRUN, "--steps", STEPS, *SMALL, "--step-seconds", "0.2", "--final-state", final,
                 env={"OUTDIR": str(outdir)})
    job.wait_output(r"wrote \S+/chk_000005", timeout=120)
    job.signal("USR1")
    info = job.wait_finished(timeout=240, restarts=1)
    text = check_requeued_run(job, info, outdir, reference(), final)
    # srun signals every task, but a rank may take its decision before the signal reached the others: any rank
    # suffices (should_exit agrees on it)
    assert re.search(r"a signal arrived on [1-4] rank\(s\)", text), text[-4000:]
    assert "job requeued" in text


def test_mpirun_in_sbatch_warning_requeue_restart(submit, reference, tmp_path):
    """mpirun inside sbatch, 4 ranks on 2 nodes, hdf5: SIGUSR1 to the batch shell only (what --signal=B:USR1@T
    sends); the trap forwards it to mpirun, mpirun to every rank; the app exits 3 and the script requeues."""
    outdir, final = tmp_path / "run", tmp_path / "final.npz"
    job = submit(MPIRUN, "--steps", STEPS, *SMALL, "--step-seconds", "0.2", "--backend", "hdf5",
                 "--final-state", final, env={"OUTDIR": str(outdir)})
    job.wait_output(r"wrote \S+/chk_000005", timeout=120)
    job.signal("USR1", batch=True)
    info = job.wait_finished(timeout=240, restarts=1)
    text = check_requeued_run(job, info, outdir, reference(), final)
    assert "batch shell: SIGUSR1, forwarded to mpirun" in text
    assert re.search(r"a signal arrived on [1-4] rank\(s\)", text), text[-4000:]  # B: + trap: forwarded by mpirun
    assert "mpirun exited with status 3" in text and "requeueing job" in text


@pytest.mark.parametrize("how", ["async-pnetcdf", "staged-mpiio"])
def test_warning_during_background_checkpoint(submit, reference, tmp_path, how):
    """A checkpoint every step, written in the background (async; or staged to the node-local /dev/shm and drained),
    each larger than a step lasts, so one is in flight when the warning comes: it is finished (Series.wait) before
    the exit, the final checkpoint is committed, the rerun restarts from it. 2 ranks on 2 nodes (staged: the stage
    of each node is its own /dev/shm)."""
    mode, backend = how.split("-")
    outdir, final = tmp_path / "run", tmp_path / "final.npz"
    # a stage of its own: the emulated nodes' /dev/shm outlives the test run, and a staged copy left there by an
    # earlier run for the same final directory would be drained and restarted from (as ckptio.tiers.staging promises)
    stage = f"/dev/shm/ckptio-stage-{tmp_path.name}-{uuid.uuid4().hex[:8]}"
    extra = ["--mode", "async"] if mode == "async" else ["--stage-dir", stage]
    args = ["--steps", STEPS, "--nblocks", "8", "--nxb", "8", "--checkpoint-every", "1", "--backend", backend,
            "--step-seconds", "0.05", *extra, "--final-state", final]
    job = submit(SRUN, *args, options=["--ntasks-per-node=1"], env={"OUTDIR": str(outdir)})
    job.wait_output(r"wrote \S+/chk_000004", timeout=120)
    job.signal("USR1")
    info = job.wait_finished(timeout=240, restarts=1)
    text = check_requeued_run(job, info, outdir, reference(), final)
    assert re.search(r"a signal arrived on [12] rank\(s\)", text), text[-4000:]
    print(f"{how}: {'in flight' if 'still being written' in text else 'NOT in flight'} at the decision")


SIGTERM_JOB = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=10:00
srun --mpi=pmix python {app} "$@"
echo "== srun exited with status $?"
"""


def test_sigterm_at_the_hard_limit(submit, reference, tmp_path):
    """No warning, only what Slurm does at the limit (scancel does the same): SIGCONT + SIGTERM to everything,
    SIGKILL KillWait (5) s later. (1) SIGTERM in the middle of a step longer than KillWait: killed before it could
    checkpoint; the previous checkpoint stays the newest valid one, nothing else counts. (2) SIGTERM with short
    steps: ckptio's handler turns it into should_exit, the final checkpoint is committed within KillWait. The
    resumed run ends bit-identical. hdf5, 2 ranks on 2 nodes."""
    outdir, final = tmp_path / "run", tmp_path / "final.npz"
    script = tmp_path / "sigterm.sbatch"
    script.write_text(SIGTERM_JOB.format(app=FLASH_PY))
    common = ["--outdir", outdir, "--resume", "--batch", "--steps", STEPS, "--nblocks", "8", "--nxb", "8",
              "--backend", "hdf5", "--final-state", final]

    # (1) steps of 8 s: SIGKILL comes 5 s after SIGTERM, before the step ends
    job = submit(script, *common, "--checkpoint-every", "1", "--step-seconds", "8")
    job.wait_output(r"wrote \S+/chk_000001", timeout=120)
    job.cancel()
    info = job.wait_finished(timeout=120)
    text = job.text()
    assert info["JobState"] == "CANCELLED", job.report(info)
    assert "stopping at step" not in text and "final checkpoint" not in text, text[-4000:]
    assert latest_step(outdir) == 1
    leftovers = [p.name for p in outdir.iterdir() if p.name != "chk_000001" and not p.name.endswith(".ckptio-lease")]
    assert all(".ckptio-tmp-" in name for name in leftovers), leftovers  # a killed write: never a checkpoint

    # (2) short steps: SIGTERM -> should_exit -> final checkpoint within KillWait
    job = submit(script, *common, "--checkpoint-every", "5", "--step-seconds", "0.2")
    job.wait_output(r"wrote \S+/chk_000005", timeout=120)
    job.cancel()
    info = job.wait_finished(timeout=120)
    text = job.text()
    assert "restarted from" in text and "chk_000001" in text, text[-4000:]
    step = stopped_at(text)
    assert f"final checkpoint {outdir}/chk_{step:06d} committed" in text, text[-4000:]
    assert latest_step(outdir) == step

    # the rest of the run
    job = submit(script, *common, "--checkpoint-every", "5")
    info = job.wait_finished(timeout=120)
    assert info["JobState"] == "COMPLETED" and f"chk_{step:06d}: step {step}" in job.text(), job.report(info)
    assert_same_state(final, reference() / "final.npz")


def test_fortran_warning_requeue_restart(submit, reference, tmp_path):
    """The Fortran example (ckptio_should_exit) under srun, 4 ranks on 2 nodes: SIGUSR1 after the first checkpoint,
    exit status 3, the job script requeues, the rerun resumes; its last checkpoint is bit-identical to the Python
    reference's."""
    from test_bindings import assert_identical, ensure_build

    build = ensure_build()
    outdir = tmp_path / "run"
    job = submit(FORTRAN, "--steps", STEPS, *SMALL, "--step-ms", "250",
                 env={"OUTDIR": str(outdir), "FLASH_LIKE_BIN": str(build / "flash_like")})
    job.wait_output(r"wrote \S+/chk_000005", timeout=120)
    job.signal("USR1")
    info = job.wait_finished(timeout=240, restarts=1)
    text = job.text()
    assert info["JobState"] == "COMPLETED" and int(info["Restarts"]) >= 1, job.report(info)
    step = stopped_at(text)
    assert "srun exited with status 3" in text and "requeueing job" in text, text[-4000:]
    assert f"restarted from {outdir}/chk_{step:06d}" in text, text[-4000:]
    assert_identical(reference() / "run" / f"chk_{STEPS:06d}", outdir / f"chk_{STEPS:06d}")


def test_job_scripts_are_the_documented_ones():
    """The guide shows the job scripts' #SBATCH lines: they must be what examples/slurm/ holds."""
    guide = (REPO / "docs" / "guide" / "batch.md").read_text()
    for script in (SRUN, MPIRUN):
        for line in script.read_text().splitlines():
            if line.startswith("#SBATCH --signal"):
                assert line in guide, (script.name, line)


def test_real_time_limit_and_time_rule(time_limit_jobs, reference):
    """The two --time=1 jobs of time_limit_jobs: each is stopped (by Slurm's own warning; by the time rule), requeued
    until done, and ends in the reference's state."""
    folder, warned, timed, t0 = time_limit_jobs
    info = warned.wait_finished(timeout=480, restarts=1)
    text = check_requeued_run(warned, info, folder / "warned", reference(LIMITED_STEPS), folder / "warned.npz",
                              LIMITED_STEPS)
    assert re.search(r"a signal arrived on [1-4] rank\(s\)", text), text[-4000:]
    info = timed.wait_finished(timeout=480, restarts=1)
    text = check_requeued_run(timed, info, folder / "timed", reference(), folder / "timed.npz")
    assert re.search(r"the remaining wall time is shorter than \S+ s \(last checkpoint \+ margin\) on 1 rank", text), \
        text[-4000:]
    assert "signal arrived" not in text, text[-4000:]
    print(f"time-limit jobs: {time.monotonic() - t0:.0f} s from submission")
