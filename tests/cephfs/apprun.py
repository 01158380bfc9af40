"""Run tests/cephfs/cephfs_app.py under mpirun and read its ``JSON`` line (rank 0's report)."""

from __future__ import annotations

import json
from pathlib import Path

from mpi_helpers import run_mpi

APP = str(Path(__file__).with_name("cephfs_app.py"))


def report(stdout: str) -> dict:
    lines = [line[5:] for line in stdout.splitlines() if line.startswith("JSON ")]
    assert len(lines) == 1, stdout
    return json.loads(lines[0])


def write(nprocs: int, path, backend: str = "mpiio", mode: str = "sync", mib: int = 2, stage_dir=None,
          env: dict[str, str] | None = None) -> dict:
    args = [APP, "write", str(path), backend, mode, str(mib)] + ([str(stage_dir)] if stage_dir else [])
    return report(run_mpi(nprocs, args, timeout=300, env=env).stdout)


def read(nprocs: int, path, env: dict[str, str] | None = None) -> dict:
    return report(run_mpi(nprocs, [APP, "read", str(path)], timeout=300, env=env).stdout)
