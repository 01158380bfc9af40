"""`ckptio inspect` and `ckptio plan` from the shell: fields, exit codes, --json, corruption, truncation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_helpers import BACKENDS, mpi_env, run_script

CKPTIO = str(Path(sys.executable).parent / "ckptio")

WRITE = """
import sys, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
with ckptio.create(sys.argv[1], comm, backend=sys.argv[2], attrs={"step": 7, "time": 0.5}) as ck:
    ck.write("dens", np.full((4, 64), r, np.float64), offset=(4 * r, 0), global_shape=(4 * n, 64))
    ck.write("ids", np.arange(r + 1, dtype=np.int64))
"""


def inspect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CKPTIO, "inspect", *args], capture_output=True, text=True, env=mpi_env(), timeout=120)


@pytest.fixture(params=BACKENDS)
def checkpoint(request, tmp_path):
    path = tmp_path / f"chk_{request.param}"
    run_script(2, WRITE, tmp_path, str(path), request.param)
    return path, request.param


@pytest.mark.mpi
def test_inspect_lists_everything_and_verifies(checkpoint):
    path, backend = checkpoint
    proc = inspect(str(path), "--verify", "--stats")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for word in (backend, "complete and verified", "step=7", "dens", "(8, 64)", "ids", "striping_factor=2",
                 "cb_nodes=2", "hints got", "write stats"):
        assert word in proc.stdout, f"{word!r} missing from:\n{proc.stdout}"


@pytest.mark.mpi
def test_inspect_json_schema_is_the_same_for_every_backend(checkpoint):
    path, backend = checkpoint
    proc = inspect(str(path), "--json")
    assert proc.returncode == 0
    doc = json.loads(proc.stdout)
    assert doc["format"] == backend and doc["status"] == "complete"
    assert set(doc) >= {"path", "format", "format_version", "schema", "status", "attrs", "variables", "hints",
                        "layout", "nprocs", "verified", "problems"}
    assert doc["variables"]["dens"]["shape"] == [8, 64] and doc["variables"]["dens"]["nblocks"] == 2
    assert doc["variables"]["ids"]["kind"] == "segment" and doc["variables"]["ids"]["shape"] == [3]
    assert set(doc["hints"]) >= {"requested", "effective", "io_component"}


@pytest.mark.mpi
def test_flipped_data_byte_exit_1_naming_the_block(checkpoint):
    path, _ = checkpoint
    from ckptio.backends import detect_backend

    backend = detect_backend(str(path))
    meta = backend.read_metadata(str(path))
    extent = next(e for e in backend.extents(meta) if e.var == "dens" and e.box.offset[0] == 4)
    with open(path, "r+b") as f:
        f.seek(extent.file_offset + 3)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 1]))
    proc = inspect(str(path), "--verify")
    assert proc.returncode == 1, proc.stdout
    assert "dens" in proc.stdout and "block 1" in proc.stdout and "rank 1" in proc.stdout, proc.stdout
    doc = json.loads(inspect(str(path), "--verify", "--json").stdout)
    assert doc["status"] == "corrupt" and doc["problems"][0]["variable"] == "dens" and doc["problems"][0]["block"] == 1


@pytest.mark.mpi
def test_truncated_file_is_incomplete_and_skipped_by_latest(checkpoint, tmp_path):
    path, _ = checkpoint
    size = path.stat().st_size
    os.truncate(path, size // 2)
    proc = inspect(str(path))
    assert proc.returncode == 1 and ("incomplete" in proc.stdout.lower() or "corrupt" in proc.stdout.lower())
    import warnings

    import ckptio

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert ckptio.latest(path.parent, prefix="chk_") is None


def test_inspect_usage_errors_exit_2(tmp_path):
    assert inspect(str(tmp_path / "missing")).returncode == 2
    junk = tmp_path / "junk"
    junk.write_bytes(b"hello world" * 100)
    proc = inspect(str(junk))
    assert proc.returncode == 2 and "not a ckptio checkpoint" in proc.stdout
    assert subprocess.run([CKPTIO, "inspect"], capture_output=True).returncode == 2


def test_plan_command_prints_and_plots(tmp_path):
    png = tmp_path / "ost.png"
    proc = subprocess.run([CKPTIO, "plan", "--ranks", "512", "--bytes", "8G", "--plot", str(png)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "RESTART" in proc.stdout and "naive" in proc.stdout and png.stat().st_size > 1000
