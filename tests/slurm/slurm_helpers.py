"""Helpers of the tests under a real Slurm (tests/slurm/conftest.py has the fixtures): the jobs' environment,
sbatch/scontrol/scancel, and the comparison with the uninterrupted run."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SLURM_SH = REPO / "ci" / "slurm.sh"
SLURM_DIR = Path(os.environ.get("CKPTIO_SLURM_DIR", "/var/tmp/ckptio-slurm"))
EXAMPLES = REPO / "examples" / "slurm"
FLASH_PY = REPO / "examples" / "flash_like" / "flash_like.py"
FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
            "PREEMPTED")
SMALL = ("--nblocks", "8", "--nxb", "8", "--checkpoint-every", "5")
STEPS = 20


def skip_reason() -> str | None:
    """Why Slurm's emulated nodes cannot run here (None when they can)."""
    if sys.platform != "linux":
        return "the emulated Slurm nodes need Linux namespaces"
    if os.geteuid() != 0:
        return "ci/slurm.sh runs slurmctld/slurmd as root (apt, namespaces, munge): not root here"
    probe = subprocess.run(["unshare", "--uts", "--ipc", "--mount", "--propagation", "private", "/bin/sh", "-c",
                            "hostname ckptio-probe && mount -t tmpfs tmpfs /dev/shm"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"unshare --uts --ipc --mount is not permitted here: {probe.stderr.strip() or probe.returncode}"
    return None


def job_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """What sbatch passes on to the jobs (--export=ALL): this venv first on PATH, Open MPI as root, SLURM_CONF; no
    OMPI_MCA_plm (mpirun inside sbatch must launch through Slurm), no CKPTIO_* settings of the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CKPTIO_EXIT_", "SLURM_"))}
    env.pop("OMPI_MCA_plm", None)
    env.pop("PYTHONUNBUFFERED", None)
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1", "SLURM_CONF": str(SLURM_DIR / "etc" / "slurm.conf"),
                "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                "CKPTIO_REPO": str(REPO)})
    env.update(extra or {})
    return env


def command(args: Sequence[str | os.PathLike], env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env or job_env(),
                          cwd=REPO, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise AssertionError(f"{shlex.join(map(str, args))} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


@dataclass
class Job:
    """A submitted batch job, watched through scontrol (MinJobAge=600: finished jobs stay visible 10 min)."""

    id: str
    output: Path
    submitted: float = field(default_factory=time.monotonic)

    def info(self) -> dict[str, str]:
        text = command(["scontrol", "show", "job", "-o", self.id]).stdout
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def text(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""

    def wait_for(self, what: str, done: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                info = self.info()
                self.cancel()
                raise AssertionError(f"job {self.id}: {what} not within {timeout:.0f} s (state {info.get('JobState')}, "
                                     f"restarts {info.get('Restarts')})\n--- output:\n{self.text()[-6000:]}")
            time.sleep(0.2)

    def wait_output(self, pattern: str, timeout: float = 120) -> None:
        """Until the job's output matches the regular expression ``pattern``."""
        self.wait_for(f"output {pattern!r}", lambda: re.search(pattern, self.text()) is not None, timeout)

    def wait_finished(self, timeout: float = 240, restarts: int = 0) -> dict[str, str]:
        """Until the job is finished after at least ``restarts`` requeues; its scontrol record."""
        seen: dict[str, str] = {}

        def finished() -> bool:
            seen.update(self.info())
            return seen.get("JobState") in FINISHED and int(seen.get("Restarts", "0")) >= restarts

        self.wait_for(f"end after {restarts} requeue(s)", finished, timeout)
        return seen

    def report(self, info: dict[str, str]) -> str:
        """The end of the job's output, then one line of its record and its launchers' status lines, last (a CI log
        that shows only the end of a failure still says which job ended how)."""
        text = self.text()
        said = [line for line in text.splitlines()
                if re.search(r"exited with status|error|signal|requeue|Killed|CANCELLED|TIME LIMIT", line)]
        record = " ".join(f"{k}={info.get(k)}" for k in ("JobId", "JobName", "JobState", "Reason", "ExitCode",
                                                          "Restarts", "RunTime"))
        return f"{text[-4000:]}\n--- status lines:\n" + "\n".join(said[-12:]) + f"\n--- job: {record}"

    def signal(self, name: str, batch: bool = False) -> None:
        """``scancel -s NAME`` (the job steps' tasks) or, with ``batch``, ``scancel -b -s NAME`` (the batch shell): what
        ``--signal=NAME@T`` and ``--signal=B:NAME@T`` do at the warning time, at once."""
        command(["scancel", *(["-b"] if batch else []), "-s", name, self.id])

    def cancel(self) -> None:
        subprocess.run(["scancel", self.id], capture_output=True, env=job_env(), timeout=60)


def assert_same_state(got: Path, want: Path) -> None:
    """Two --final-state files hold the same arrays, bit for bit."""
    import numpy as np

    a, b = np.load(got), np.load(want)
    assert sorted(a.files) == sorted(b.files)
    for name in a.files:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert a[name].tobytes() == b[name].tobytes(), f"{name} differs from the uninterrupted run"
