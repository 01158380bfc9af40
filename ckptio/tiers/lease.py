"""One writer per series: a lease file naming the job that writes a series (issue 23, item 9). Rank 0 only.

Two jobs writing one series (a job resubmitted while the previous one still runs, a job array sharing one output
directory) would each report every checkpoint good while replacing the other's files. So a :class:`ckptio.Series`
holds a lease, ``{directory}/.{prefix}_{suffix}.ckptio-lease`` (JSON: run id, host, pid, batch job id, the
interval between its commits), taken when its first checkpoint starts and checked on rank 0 right before each of
its checkpoints is renamed onto its name:

* **Taking it.** The holder is a process (all Series objects of one program are one writer) or a batch job. A
  lease whose holder is known to be gone is taken over at once: its process no longer exists (the lease was
  written on this host), or Slurm says its job is no longer running (``squeue``, where the lease names a Slurm job
  and ``squeue`` answers). Otherwise a lease of another holder that is *live* (refreshed less than
  ``max(MIN_STALE, 3 x its commit interval)`` ago) refuses the new writer with a :class:`~ckptio.CheckpointIOError`
  naming the holder. Ages are measured on the file system's own clock (the lease's mtime against a probe file's,
  both set by the same server), never against a node's clock. A lease of the same batch job (a requeued Slurm
  job keeps its ``SLURM_JOB_ID``) is taken over at once: the previous incarnation is gone. A stale lease (a killed
  job elsewhere) is taken over.
* **Holding it.** Rewritten after each commit (its mtime is the heartbeat). If another writer took it meanwhile
  (it found the lease stale), the next checkpoint of the old holder fails before its rename, on every rank,
  naming the new holder: nothing of the new writer is replaced.
* **Releasing it.** Removed at the process's normal exit if still held. A job killed with SIGKILL leaves it; the
  next job takes it over at once where the holder is known to be gone (above), else after staleness or when the
  file is removed (the error says which file).
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import tempfile
from dataclasses import asdict, dataclass

from ckptio.errors import CheckpointIOError

MIN_STALE = 120.0  # seconds: a lease refreshed more recently than this (or 3 commit intervals) is live
JOB_ID_VARIABLES = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "COBALT_JOBID")


@dataclass(frozen=True)
class Lease:
    run: str
    host: str
    pid: int
    job: str | None
    interval: float | None = None  # seconds between the holder's last two commits
    start: int | None = None  # the holder process's start time (Linux: clock ticks after boot), against pid reuse

    @classmethod
    def mine(cls, run: str) -> Lease:
        job = next((os.environ[v] for v in JOB_ID_VARIABLES if os.environ.get(v)), None)
        return cls(run, socket.gethostname(), os.getpid(), job, None, _process_start(os.getpid()))

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
                     data.get("interval"), data.get("start")), mtime
    except (OSError, ValueError, KeyError, TypeError):
        return None, 0


def _write(path: str, lease: Lease) -> None:
    """Atomically (a temporary in the same directory, then a rename); CheckpointIOError naming the lease file
    where it cannot be written (a full file system, a file size limit)."""
    def unwritable(exc: OSError) -> CheckpointIOError:
        return CheckpointIOError(f"{path}: cannot write the series' lease: {os.strerror(exc.errno or 0)}")

    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".ckptio-lease-")
    except OSError as exc:
        raise unwritable(exc) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(asdict(lease), f)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise unwritable(exc) from None
        raise


def _file_system_now(directory: str) -> int:
    """The file system's clock (ns): the mtime of a probe file it just created."""
    fd, probe = tempfile.mkstemp(dir=directory, prefix=".ckptio-clock-")
    try:
        return os.fstat(fd).st_mtime_ns
    finally:
        os.close(fd)
        os.unlink(probe)


def holder_gone(held: Lease) -> bool:
    """Local: whether ``held``'s writer is known to have ended (False when it cannot be told from here)."""
    if held.host == socket.gethostname():
        try:
            os.kill(held.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        state = _process_state(held.pid)
        if state == "Z" or (held.start is not None and _process_start(held.pid) not in (None, held.start)):
            return True  # exited, not yet reaped (a killed MPI job's rank), or the pid now names another process
    if held.job and os.environ.get("SLURM_JOB_ID"):  # inside a Slurm job: ask Slurm for the holder's job
        try:
            proc = subprocess.run(["squeue", "-h", "-j", str(held.job), "-o", "%T"], capture_output=True, text=True,
                                  timeout=20, check=False)
        except (OSError, subprocess.SubprocessError):
            return False
        state = proc.stdout.strip()
        if proc.returncode != 0:
            return "Invalid job id" in proc.stderr  # purged from Slurm's memory: long gone
        return state not in ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED")
    return False


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (Linux), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _process_state(pid: int) -> str | None:
    fields = _proc_stat(pid)
    return fields[0] if fields else None


def _process_start(pid: int) -> int | None:
    fields = _proc_stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def acquire(path: str, mine: Lease) -> None:
    """Rank 0, inside an agreed phase: take the lease for ``mine`` or raise CheckpointIOError naming its live
    holder."""
    held, mtime = _read(path)
    if held is not None and not held.same_holder(mine) and not holder_gone(held):
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
