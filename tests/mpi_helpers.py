"""Launch Python (or a compiled program) under ``mpirun`` from tests, with a hard timeout so a deadlock
fails instead of hanging CI.

Which launcher: the one selection point is :func:`mpiexec`. ``CKPTIO_MPIEXEC`` (split like a shell word list,
e.g. ``"mpiexec.mpich"`` or ``"srun --mpi=pmi2"``) wins; otherwise ``mpirun`` found first on a PATH that starts
with the running interpreter's venv: the MPICH stack's venv (``make install MPI=mpich``) has its own ``mpirun``
linked to MPICH's Hydra, the default venv has none, so Debian's ``mpirun`` (Open MPI) is used. A job must be
launched by the MPI its mpi4py was built for; a mismatch shows up as N singletons of rank 0.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The MPI programs the tests run, one module per test file (tests/programs/read_out.py for tests/test_read_out.py):
# ``run_mpi(n, [str(PROGRAMS / "read_out.py"), CASE, *args])``.
PROGRAMS = REPO / "tests" / "programs"
OMPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_plm": "isolated",
    # Ranks waiting in MPI yield the core instead of spinning. Open MPI turns this on by itself only when one job
    # has more ranks than the slots it sees; a 2-rank job beside anything else (its own ranks' I/O threads,
    # another job of .ci/run's parallel lanes) otherwise spins against them: two concurrent 116-test runs took
    # 367 s spinning, 149 s yielding (84 s each alone, either way).
    "OMPI_MCA_mpi_yield_when_idle": "1",
    # PMIx's own uid check between mpirun and its ranks, not munge: Debian's libpmix2 loads the munge plugin, which
    # retries a munge socket that no munged answers (one left by a killed munged, e.g. of ci/slurm.sh) for ~2.3 s
    # in every mpirun (0.07 s with this). mpirun's ranks are this user's processes on this machine either way.
    "PMIX_MCA_psec": "native",
}
BACKENDS = ("mpiio", "hdf5", "pnetcdf")


def _stack_key() -> str:
    """The MPI stack ci/install.sh built this venv for ("debian-openmpi", "debian-mpich", "cluster ...")."""
    key = Path(sys.prefix) / ".ckptio-stack"
    return key.read_text().strip() if key.exists() else "debian-openmpi"


# Where ci/install.sh builds the Fortran/C bindings for this venv's MPI (one build directory per MPI stack).
FORTRAN_BUILD = REPO / "build" / ("fortran-mpich" if _stack_key() == "debian-mpich" else "fortran")
# The oversubscribed count: 8 ranks, 4x the 2 cores of the reference machine (CKPTIO_TEST_OVERSUBSCRIBED=16 for more).
# It was 16 in make test: the 16-rank conformance jobs and 32-reader restarts took ~110 s each and added ~5 min to
# .ci/run; 8 still has more ranks than aggregators and 16 readers of 3 writers. The large counts are
# tests/test_restart_64.py's (make test-slow: 64 ranks restart what 6 wrote) and the 100,000-rank simulation's.
# Under Debian's MPICH 4.0 (ch4:ucx) it is 5: its waiting ranks busy-poll and 4.0 has no setting to make them yield
# (MPIR_CVAR_CH4_PROGRESS_THROTTLE came later), so an 8-rank job holds both cores for its whole run: the
# roundtrip_every_dtype conformance case on hdf5 took 42 s wall and 81 CPU-s at 8 ranks, 24 s at 5 (Open MPI,
# yielding: 9 s at 8). 5 is still oversubscribed, and odd.
OVERSUBSCRIBED = int(os.environ.get("CKPTIO_TEST_OVERSUBSCRIBED", "5" if _stack_key() == "debian-mpich" else "8"))
RANK_COUNTS = (1, 2, 4, OVERSUBSCRIBED)


def mpi_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a test job: the caller's, Open MPI's root/oversubscription settings, this venv first.

    ``PYTHONUNBUFFERED`` (set by many CI runners) is removed unless ``extra`` asks for it: unbuffered, one ``print``
    is several write()s, and the launcher then interleaves two ranks' output inside a line ("REFUSEDREFUSED ...").
    Block-buffered, a flushed print reaches the launcher as one write, so each line stays whole."""
    env = {**os.environ, **OMPI_ENV}
    env.pop("PYTHONUNBUFFERED", None)
    env.update(extra or {})
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


def mpiexec(env: dict[str, str] | None = None) -> list[str]:
    """The launcher command (without ``-n``) for jobs of this interpreter; see the module docstring."""
    env = mpi_env() if env is None else env
    if env.get("CKPTIO_MPIEXEC", "").strip():
        return shlex.split(env["CKPTIO_MPIEXEC"])
    found = shutil.which("mpirun", path=env["PATH"])
    if found is None:
        raise AssertionError("no mpirun on PATH (set CKPTIO_MPIEXEC)")
    return [found]


def mpi_flavour() -> str:
    """``"mpich"`` or ``"openmpi"``: the MPI this interpreter's mpi4py is built for (from its library, without
    initialising MPI: asked in a subprocess so the test process never calls MPI_Init)."""
    out = subprocess.run([sys.executable, "-c", "import mpi4py; mpi4py.rc.initialize = False; "
                          "from mpi4py import MPI; print(MPI.Get_library_version())"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return "openmpi" if "Open MPI" in out else "mpich"


def run_program(nprocs: int, argv: list, timeout: float = 240, env: dict[str, str] | None = None,
                check: bool = True, cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run the program ``argv`` (paths allowed) on ``nprocs`` ranks; on timeout the whole job is killed and the
    test fails; with ``check``, a non-zero exit fails it too."""
    full_env = mpi_env(env)
    cmd = [*mpiexec(full_env), "-n", str(nprocs), *map(str, argv)]
    try:
        proc = subprocess.run(cmd, cwd=cwd or REPO, env=full_env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{' '.join(cmd)} did not finish in {timeout} s (deadlock?)\n"
                             f"stdout: {exc.stdout}\nstderr: {exc.stderr}") from None
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\n"
                             f"stderr:\n{proc.stderr[-4000:]}")
    return proc


def run_mpi(nprocs: int, args: list[str], timeout: float = 240, env: dict[str, str] | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` on ``nprocs`` ranks (see :func:`run_program`)."""
    return run_program(nprocs, [sys.executable, *args], timeout=timeout, env=env, check=check)


def parse_cases(stdout: str) -> dict[str, str]:
    """``CASE name PASS|FAIL reason`` lines of ckptio.testing -> {name: "PASS" or the failure}."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("CASE "):
            _, name, rest = line.split(" ", 2)
            out[name] = rest
    return out


def eio_preload(directory: str | os.PathLike) -> str:
    """``tests/programs/eio_preload.c`` built into ``directory`` (once): the library a test preloads so that one
    rank's writes of a checkpoint fail with EIO (see that file). Needs a C compiler (``cc``), as the bindings do."""
    out = Path(directory) / "libeio_preload.so"
    if not out.exists():
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(PROGRAMS / "eio_preload.c"), "-ldl"],
                       check=True, capture_output=True, text=True)
    return str(out)
