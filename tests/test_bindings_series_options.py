"""C and Fortran series with the options of ``ckptio_create_ex`` (issue 16 item 6): ``ckptio_series_create_ex``
/ ``ckptio_series_create(..., mode=, stage_dir=, compression=)`` make background checkpoints whose retention
runs after each commit, and ``ckptio_open_ex`` / ``ckptio_open(..., stage_dir=)`` restart from the node-local
stage (Python's ``ckptio.open(..., stage_dir=)``)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from mpi_helpers import run_program
from test_bindings import CODES, ensure_build, error_lines

import ckptio

pytestmark = [pytest.mark.mpi, pytest.mark.bindings, pytest.mark.timeout(600)]


@pytest.fixture(scope="session")
def build():
    return ensure_build()


def _damage_data_keep_mtime(path) -> None:
    """Flip the first 8 data bytes of a native checkpoint (rank 0's block) without changing its mtime: silent
    corruption on the parallel file system, which the stage (not older than the file) does not share."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(4096)
        data = f.read(8)
        f.seek(4096)
        f.write(bytes(b ^ 0xFF for b in data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_c_background_series_and_restart_from_the_stage(build, tmp_path):
    nprocs = 2
    proc = run_program(nprocs, [build / "ckptio_test_c", "series_bg", tmp_path], timeout=300)
    assert f"SERIES_BG OK {tmp_path}/chk_000004" in proc.stdout, proc.stdout + proc.stderr
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith("chk")) == ["chk_000003", "chk_000004"]
    with ckptio.open(tmp_path / "chk_000004") as r:
        assert (r.read("x") == 400.0 + np.arange(4 * nprocs)).all()
    _damage_data_keep_mtime(tmp_path / "chk_000004")
    proc = run_program(nprocs, [build / "ckptio_test_c", "stage_restart", tmp_path], timeout=300)
    assert "STAGE_RESTART OK" in proc.stdout, proc.stdout + proc.stderr
    damaged = error_lines(proc.stdout)["read_damaged"]
    assert {s for s, _ in damaged.values()} == {CODES["CKPTIO_ERR_CORRUPT"]} and sorted(damaged) == [0, 1]
    assert "not restarting" not in proc.stderr  # the stage was used (no fallback warning)


def test_fortran_background_series_and_stage_open(build, tmp_path):
    nprocs = 2
    proc = run_program(nprocs, [build / "ckptio_test_f", "series_bg", tmp_path], timeout=300)
    assert f"SERIES_BG OK {tmp_path}/run/chk_000003" in proc.stdout, proc.stdout + proc.stderr
    assert "not restarting" not in proc.stderr
    assert sorted(os.listdir(tmp_path / "run")) == ["chk_000002", "chk_000003"]
    with ckptio.open(tmp_path / "run" / "chk_000003") as r:
        assert (r.read("x") == 300.0 + np.arange(4 * nprocs)).all()
