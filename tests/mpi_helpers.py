"""Launch Python (or a compiled program) under ``mpirun`` from tests, with a hard timeout so a deadlock
fails instead of hanging CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OMPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_plm": "isolated",
}
BACKENDS = ("mpiio", "hdf5", "pnetcdf")
RANK_COUNTS = (1, 2, 4, 16)  # 16 ranks on 2 cores: oversubscribed


def mpi_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, **OMPI_ENV, **(extra or {})}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


def run_program(nprocs: int, argv: list, timeout: float = 240, env: dict[str, str] | None = None,
                check: bool = True, cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run the program ``argv`` (paths allowed) on ``nprocs`` ranks; on timeout the whole job is killed and the
    test fails; with ``check``, a non-zero exit fails it too."""
    cmd = ["mpirun", "-n", str(nprocs), *map(str, argv)]
    try:
        proc = subprocess.run(cmd, cwd=cwd or REPO, env=mpi_env(env), capture_output=True, text=True,
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


def run_script(nprocs: int, script: str, tmp_path: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    """Write ``script`` into tmp_path and run it under mpirun (for one-off MPI test programs)."""
    path = tmp_path / f"script_{abs(hash(script)) % 10**8}.py"
    path.write_text(script)
    return run_mpi(nprocs, [str(path), *args], **kw)


def parse_cases(stdout: str) -> dict[str, str]:
    """``CASE name PASS|FAIL reason`` lines of ckptio.testing -> {name: "PASS" or the failure}."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("CASE "):
            _, name, rest = line.split(" ", 2)
            out[name] = rest
    return out
