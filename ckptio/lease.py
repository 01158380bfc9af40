"""One writer per series: a lease file naming the job that writes a series (issue 23, item 9). Rank 0 only.

Two jobs writing one series (a job resubmitted while the previous one still runs, a job array sharing one output
directory) would each report every checkpoint good while replacing the other's files. So a :class:`ckptio.Series`
holds a lease, ``{directory}/.{prefix}_{suffix}.ckptio-lease`` (JSON: run id, host, pid, batch job id, the
interval between its commits), taken when its first checkpoint starts and checked on rank 0 right before each of
its checkpoints is renamed onto its name:

* **Taking it.** The holder is a process (all Series objects of one program are one writer) or a batch job. A
  lease of another holder that is *live* (refreshed less than ``max(MIN_STALE, 3 x its commit
  interval)`` ago) refuses the new writer with a :class:`~ckptio.CheckpointIOError` naming the holder. Ages are
  measured on the file system's own clock (the lease's mtime against a probe file's, both set by the same
  server), never against a node's clock. A lease of the same batch job (a requeued Slurm job keeps its
  ``SLURM_JOB_ID``) is taken over at once: the previous incarnation is gone. A stale lease (a killed job) is
  taken over.
* **Holding it.** Rewritten after each commit (its mtime is the heartbeat). If another writer took it meanwhile
  (it found the lease stale), the next checkpoint of the old holder fails before its rename, on every rank,
  naming the new holder: nothing of the new writer is replaced.
* **Releasing it.** Removed at the process's normal exit if still held. A job killed with SIGKILL leaves it; the
  next job of another id waits for staleness or removes the file (the error says which file).
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import tempfile
from dataclasses import asdict, dataclass

from .errors import CheckpointIOError

MIN_STALE = 120.0  # seconds: a lease refreshed more recently than this (or 3 commit intervals) is live
JOB_ID_VARIABLES = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "COBALT_JOBID")


@dataclass(frozen=True)
class Lease:
    run: str
    host: str
    pid: int
    job: str | None
    interval: float | None = None  # seconds between the holder's last two commits

    @classmethod
    def mine(cls, run: str) -> Lease:
        job = next((os.environ[v] for v in JOB_ID_VARIABLES if os.environ.get(v)), None)
        return cls(run, socket.gethostname(), os.getpid(), job)

    def same_holder(self, other: Lease) -> bool:
        """The same writer: the same process (several Series objects of one program are one writer, it orders
        their checkpoints itself) or the same batch job (a requeued job keeps its id; its old incarnation is
        gone)."""
        return (self.host, self.pid) == (other.host, other.pid) or bool(self.job and self.job == other.job)

    def describe(self) -> str:
        job = f", batch job {self.job}" if self.job else ""
        return f"run {self.run[:12]} on {self.host} (pid {self.pid}{job})"


def lease_path(directory: str, stem: str, suffix: str) -> str:
    return os.path.join(directory, f".{stem}{suffix}.ckptio-lease")


def _read(path: str) -> tuple[Lease | None, int]:
    """The lease at ``path`` and its mtime (ns); (None, 0) when there is none or it is unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
            mtime = os.fstat(f.fileno()).st_mtime_ns
        return Lease(str(data["run"]), str(data["host"]), int(data["pid"]), data.get("job"),
                     data.get("interval")), mtime
    except (OSError, ValueError, KeyError, TypeError):
        return None, 0


def _write(path: str, lease: Lease) -> None:
    """Atomically (a temporary in the same directory, then a rename)."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".ckptio-lease-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(asdict(lease), f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _file_system_now(directory: str) -> int:
    """The file system's clock (ns): the mtime of a probe file it just created."""
    fd, probe = tempfile.mkstemp(dir=directory, prefix=".ckptio-clock-")
    try:
        return os.fstat(fd).st_mtime_ns
    finally:
        os.close(fd)
        os.unlink(probe)


def acquire(path: str, mine: Lease) -> None:
    """Rank 0, inside an agreed phase: take the lease for ``mine`` or raise CheckpointIOError naming its live
    holder."""
    held, mtime = _read(path)
    if held is not None and not held.same_holder(mine):
        age = (_file_system_now(os.path.dirname(path)) - mtime) / 1e9
        stale = max(MIN_STALE, 3 * (held.interval or 0.0))
        if age < stale:
            raise CheckpointIOError(
                f"series {os.path.dirname(path)} is being written by another job: {held.describe()}, lease "
                f"refreshed {age:.0f} s ago. Two jobs writing one series replace each other's checkpoints. If "
                f"that job is no longer running, remove {path} (or wait {stale - age:.0f} s more)")
    _write(path, mine)
    atexit.register(release, path, mine.run)


def check(path: str, mine: Lease) -> None:
    """Rank 0, right before a checkpoint of ``mine`` is renamed: raise CheckpointIOError if another writer took
    the lease (the checkpoint is then not renamed). A lease removed by hand is taken back."""
    held, _ = _read(path)
    if held is None:
        _write(path, mine)
    elif not held.same_holder(mine):
        raise CheckpointIOError(f"series {os.path.dirname(path)}: another job took over this series "
                                f"({held.describe()}; it found this job's lease stale); this checkpoint was not "
                                "renamed onto its name, so nothing of that job's is replaced")


def refresh(path: str, mine: Lease) -> None:
    """Rank 0, after a commit: the heartbeat (and the commit interval that sets how long the lease stays live)."""
    held, _ = _read(path)
    if held is None or held.same_holder(mine):
        _write(path, mine)


def release(path: str, run: str) -> None:
    """Local (rank 0, at exit): remove the lease if ``run`` still holds it."""
    held, _ = _read(path)
    if held is not None and held.run == run:  # (another Series object of this process may hold it now: keep)
        try:
            os.unlink(path)
        except OSError:
            pass
