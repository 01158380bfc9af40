"""Shared machinery of the fault tests: MPI jobs with hard time limits and orphan checks, backend and mode
parameters, per-rank outcomes, and small tmpfs file systems (root only)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

FAULTS = Path(__file__).resolve().parent
sys.path.insert(0, str(FAULTS.parent))  # tests/ (mpi_helpers)
sys.path.insert(0, str(FAULTS))  # fault_job

from mpi_helpers import BACKENDS, REPO, mpi_env, mpiexec  # noqa: E402

JOB = FAULTS / "fault_job.py"
# How the launcher reports a rank killed by SIGKILL: Open MPI's mpirun (stderr), MPICH's Hydra (stdout).
KILLED_RANK_REPORTS = ("exited on signal 9", "Killed (signal 9)")
NPROCS = 4


def require_backend(name: str) -> None:
    """Fail (not skip) when a backend the project promises is not importable."""
    from ckptio.backends import MISSING, available_backends

    if name not in available_backends():
        pytest.fail(f"backend {name!r} is not available: {MISSING.get(name, 'not registered')}")


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    require_backend(request.param)
    return request.param


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """One 4-rank job writes ``<backend>/chk_000010`` for every available backend, and ``mpiio+zstd/...``
    (compressed native); tests damage copies."""
    root = tmp_path_factory.mktemp("corpus")
    result = run_job(["corpus", str(root)], root, timeout=180)
    assert result.returncode == 0, result.describe()
    return root


def available_modes() -> dict[str, str | None]:
    """Write modes -> None if ckptio offers it, else why not (async and staged arrived after sync)."""
    import inspect

    import ckptio

    params = inspect.signature(ckptio.create).parameters
    return {"sync": None,
            "async": None if "mode" in params else "ckptio.create has no mode= yet",
            "staged": None if "stage_dir" in params else "ckptio.create has no stage_dir= yet"}


@dataclass
class JobResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    outcomes: list[dict] = field(default_factory=list)

    def by_case(self) -> dict[str, dict[int, dict]]:
        """case -> rank -> outcome."""
        out: dict[str, dict[int, dict]] = {}
        for o in self.outcomes:
            out.setdefault(o["case"], {})[o["rank"]] = o
        return out

    def describe(self) -> str:
        return (f"exit {self.returncode} after {self.seconds:.1f} s\nstdout:\n{self.stdout[-3000:]}\n"
                f"stderr:\n{self.stderr[-3000:]}")


def run_job(args: list[str], workdir: Path, nprocs: int = NPROCS, timeout: float = 120,
            env: dict[str, str] | None = None, job: Path = JOB) -> JobResult:
    """``mpirun -n nprocs python fault_job.py ARGS`` (or another program of this directory: ``job``) in its own
    session, killed as a whole on timeout.

    Fails the test if the job outlives ``timeout`` (a hang) or leaves any process behind. Outcomes that the
    ranks record in ``workdir/results`` are returned (and the directory emptied for the next job).
    """
    results = workdir / "results"
    results.mkdir(parents=True, exist_ok=True)
    for old in results.glob("rank*.jsonl"):
        old.unlink()
    full_env = mpi_env({"FAULT_RESULTS": str(results), **(env or {})})
    cmd = [*mpiexec(full_env), "-n", str(nprocs), sys.executable, str(job), *args]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the session this test started: mpirun and its ranks
        stdout, stderr = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} did not finish in {timeout} s (hang)\nstdout:\n{stdout[-3000:]}\n"
                    f"stderr:\n{stderr[-3000:]}")
    seconds = time.monotonic() - t0
    leftover = processes_mentioning(str(workdir))
    assert not leftover, f"processes left behind by {' '.join(cmd)}: {leftover}"
    outcomes = []
    for f in sorted(results.glob("rank*.jsonl")):
        outcomes += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return JobResult(proc.returncode, stdout, stderr, seconds, outcomes)


def processes_mentioning(marker: str, grace: float = 10.0) -> list[str]:
    """Live processes whose command line contains ``marker`` (a test's private directory), after waiting up
    to ``grace`` seconds for them to go away. Zombies are ignored (their parent reaps them)."""
    deadline = time.monotonic() + grace
    while True:
        found = []
        for pid_dir in Path("/proc").glob("[0-9]*"):
            try:
                cmdline = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (pid_dir / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if marker in cmdline and state != "Z" and int(pid_dir.name) != os.getpid():
                found.append(f"{pid_dir.name}: {cmdline.strip()}")
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def assert_every_rank_failed(result: JobResult, case: str, nprocs: int = NPROCS) -> dict[int, dict]:
    """Every rank recorded an outcome for ``case`` and it is a failure; returns rank -> outcome."""
    per_rank = result.by_case().get(case, {})
    assert sorted(per_rank) == list(range(nprocs)), f"{case}: outcomes from ranks {sorted(per_rank)}\n" \
                                                    f"{result.describe()}"
    ok = [r for r, o in per_rank.items() if o["ok"]]
    assert not ok, f"{case}: no error on rank(s) {ok}: {per_rank}"
    return per_rank


# ----------------------------------------------------------------------------------------------- tmpfs
def is_root() -> bool:
    return os.geteuid() == 0


@contextlib.contextmanager
def tmpfs(directory: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` on ``directory`` (created) for the duration; always unmounted."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], check=True,
                   capture_output=True, text=True)
    try:
        yield directory
    finally:
        umount(directory)


def umount(directory: Path) -> None:
    for attempt in range(50):
        proc = subprocess.run(["umount", str(directory)], capture_output=True, text=True)
        if proc.returncode == 0:
            return
        time.sleep(0.1 * (attempt + 1))  # busy: a process of the last job may still be closing files
    raise AssertionError(f"cannot unmount {directory}: {proc.stderr}")


def remount(directory: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(directory)], check=True, capture_output=True, text=True)


needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="mounting a tmpfs needs root")
