"""Run a reference MPI program (IOR, PnetCDF's FLASH-IO benchmark, ``ckptio inspect``) as its own MPI job from
inside the benchmark's job, so its rounds interleave with ckptio's in the same run.

Rank 0 of the case's communicator starts ``mpirun -n N PROGRAM ...`` with the environment of the outer launcher,
not of an MPI rank: the variables the launcher sets for its ranks (Open MPI's ``OMPI_COMM_WORLD_*``,
``OMPI_MCA_orte_*``, ``PMIX_*``; MPICH's ``PMI_*``, ``HYDRA_*``) would make the inner ``mpirun`` try to join the
outer job. The user's own settings (``OMPI_ALLOW_RUN_AS_ROOT``, ``OMPI_MCA_plm``, ``OMPI_MCA_io``, ...) are kept.
The child also gets back every core: Open MPI binds the ranks of a job of at most one rank per core, and a child
inherits its parent's binding, which would put the whole inner job on rank 0's core. The other ranks of the
communicator wait in a sleeping barrier, so the inner job has the machine's cores to itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from .common import BenchError, sleeping_barrier

# set by the launcher for its ranks (never by a user): dropped from the inner mpirun's environment
_LAUNCHER_PREFIXES = ("PMIX_", "OMPI_COMM_WORLD_", "OMPI_APP_CTX", "OMPI_MCA_orte_", "OMPI_MCA_ess", "OMPI_MCA_pmix",
                      "PMI_", "HYDRA_", "MPI_LOCALNRANKS", "MPI_LOCALRANKID", "MPIR_CVAR_CH3_INTERFACE_HOSTNAME")
_LAUNCHER_NAMES = {"OMPI_NUM_APP_CTX", "OMPI_ARGV", "OMPI_COMMAND", "OMPI_FILE_LOCATION", "OMPI_FIRST_RANKS",
                   "OMPI_UNIVERSE_SIZE", "OMPI_MCA_initial_wdir", "OMPI_MCA_mpi_oversubscribe",
                   "OMPI_MCA_shmem_RUNTIME_QUERY_hint"}


def launcher_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without what an MPI launcher set for its ranks (plus ``extra``). Local."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER_PREFIXES) and k not in _LAUNCHER_NAMES}
    env.update(extra or {})
    return env


def mpirun() -> str | None:
    """The launcher for inner jobs: ``$MPIRUN``, else ``mpirun`` on PATH (the Makefile puts the venv's first, which
    is the MPI that mpi4py and the references were built with). None when there is none. Local."""
    given = os.environ.get("MPIRUN")
    return given if given else shutil.which("mpirun")


def _unbind() -> None:
    """In the child before exec: every core of the machine (see the module docstring)."""
    try:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    except OSError:
        pass  # a cpuset narrower than the machine: keep what the kernel allows


@dataclass
class JobResult:
    returncode: int
    stdout: str
    stderr: str


def run_local(nprocs: int, argv: Sequence[str], timeout: float, env: dict[str, str] | None = None) -> JobResult:
    """Rank 0 (Local): ``mpirun -n nprocs argv`` to completion. Raises BenchError when it cannot start, times out
    or exits non-zero (with the end of its output)."""
    launcher = mpirun()
    if launcher is None:
        raise BenchError("no mpirun on PATH (set MPIRUN=/path/to/mpirun)")
    cmd = [launcher, "-n", str(nprocs), *argv]
    try:
        proc = subprocess.run(cmd, env=launcher_env(env), capture_output=True, text=True, timeout=timeout,
                              preexec_fn=_unbind, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"{' '.join(cmd)}: no result after {timeout:.0f} s") from exc
    except OSError as exc:
        raise BenchError(f"{' '.join(cmd)}: {exc}") from exc
    if proc.returncode != 0:
        tail = (proc.stdout[-1500:] + "\n" + proc.stderr[-1500:]).strip()
        raise BenchError(f"{' '.join(cmd)} exited with {proc.returncode}: {tail}")
    return JobResult(proc.returncode, proc.stdout, proc.stderr)


def run_job(comm, nprocs: int, argv: Sequence[str], timeout: float = 1800.0,
            env: dict[str, str] | None = None) -> JobResult | None:
    """Collective over ``comm``: rank 0 runs the inner job (:func:`run_local`) while the others sleep; an error
    is raised on every rank (BenchError). Returns the result on rank 0, None elsewhere."""
    result, error = None, None
    if comm.Get_rank() == 0:
        try:
            result = run_local(nprocs, argv, timeout, env)
        except BenchError as exc:
            error = str(exc)
    sleeping_barrier(comm)
    error = comm.bcast(error, root=0)
    if error:
        raise BenchError(error)
    return result
