"""Tests under a real Slurm (issue 25): ``ci/slurm.sh up`` brings up slurmctld and 2 emulated nodes on this machine,
the tests submit the job scripts of ``examples/slurm/`` with sbatch and watch them with scontrol.

Not part of ``make test``: the tests here are marked ``slurm`` and collected only when the marker expression names
slurm (``make test-slurm``: ``pytest tests/slurm -m slurm``) or when tests/slurm is given explicitly. They skip,
with the reason, only where Slurm cannot run at all (no namespaces for the emulated nodes, no munge); a Slurm that
should start and does not is a failure.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from slurm_helpers import FINISHED, FLASH_PY, HERE, SLURM_SH, SMALL, STEPS, Job, command, job_env, skip_reason

sys.path.insert(0, str(HERE.parent))  # tests/ (mpi_helpers, test_bindings)


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "slurm: runs jobs under the real Slurm of ci/slurm.sh (make test-slurm)")


def pytest_collection_modifyitems(config, items) -> None:
    explicit = any(str(HERE) in str(Path(a.split("::")[0]).resolve()) for a in config.args)
    wanted = "slurm" in (config.getoption("markexpr") or "") or explicit
    kept, dropped = [], []
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slurm)
            (kept if wanted else dropped).append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def slurm() -> dict[str, str]:
    """Slurm is up (ci/slurm.sh up, idempotent); the environment for sbatch/scontrol and the jobs."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    t0 = time.monotonic()
    up = subprocess.run(["bash", str(SLURM_SH), "up"], capture_output=True, text=True, timeout=900,
                        stdin=subprocess.DEVNULL)
    if up.returncode != 0:
        if "munge" in up.stderr and "does not" in up.stderr:
            pytest.skip(f"munge cannot run here: {up.stderr.strip()[-500:]}")
        raise AssertionError(f"ci/slurm.sh up failed ({up.returncode}):\n{up.stdout}\n{up.stderr}")
    print(f"\nci/slurm.sh up: {time.monotonic() - t0:.1f} s", file=sys.stderr)
    env = job_env()
    os.environ["SLURM_CONF"] = env["SLURM_CONF"]
    return env


@pytest.fixture(scope="session")
def jobs(slurm):
    """jobs(folder, script, *args, options=[...], env={...}) -> Job: sbatch, the output in folder/job-N.out. Jobs
    still running at the end of the session are cancelled."""
    made: list[Job] = []

    def run(folder: Path, script: str | os.PathLike, *args: str | os.PathLike, options: Sequence[str] = (),
            env: dict[str, str] | None = None) -> Job:
        output = Path(folder) / f"job-{len(made)}.out"
        out = command(["sbatch", "--parsable", f"--output={output}", *options, str(script), *map(str, args)],
                      env=job_env(env))
        job = Job(out.stdout.strip().split(";")[0], output)
        made.append(job)
        return job

    yield run
    for job in made:
        if job.info().get("JobState") not in FINISHED:
            job.cancel()


@pytest.fixture
def submit(jobs, tmp_path):
    """submit(script, *args, options=[...], env={...}) -> Job, its output in the test's tmp_path."""
    return functools.partial(jobs, tmp_path)


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> Callable[[int], Path]:
    """reference(steps) -> a folder with the final state (final.npz) and checkpoints (run/) of an uninterrupted run
    (2 ranks, plain mpirun outside Slurm) of the tests' configuration: what every interrupted, requeued and
    restarted job must end in, bit for bit. Made once per step count."""
    from mpi_helpers import run_mpi

    made: dict[int, Path] = {}

    def get(steps: int = STEPS) -> Path:
        if steps not in made:
            folder = tmp_path_factory.mktemp(f"reference{steps}")
            run_mpi(2, [str(FLASH_PY), "--outdir", str(folder / "run"), "--steps", str(steps), *SMALL, "--quiet",
                        "--final-state", str(folder / "final.npz")])
            made[steps] = folder
        return made[steps]

    return get
