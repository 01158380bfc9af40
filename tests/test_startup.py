"""Startup cost (issue 16, item 8): ``import ckptio`` loads no format or tool library until a backend or command
needs it; each rank of a large job then opens and stats far fewer files at startup (figures in
``benchmarks/README.md``, measured by ``benchmarks/startup.py``).

Every check runs in a fresh interpreter (``sys.modules`` of the test process already holds h5py): a case of
``tests/programs/startup.py``. No timing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from mpi_helpers import PROGRAMS, REPO

PROGRAM = str(PROGRAMS / "startup.py")


def loaded_after(*case: str) -> list[str]:
    """The heavy modules (``HEAVY`` of the program) in ``sys.modules`` after the program's ``case`` ran in a fresh
    interpreter."""
    proc = subprocess.run([sys.executable, PROGRAM, *case], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", ["import_ckptio", "import_tool_modules", "get_backend"])
def test_import_loads_no_format_library(case):
    assert loaded_after(case) == []


def test_missing_is_computed_on_first_use():
    """``ckptio.backends.MISSING`` still answers (the backends' libraries are imported to find out) and agrees with
    ``available_backends``; the h5py module then is loaded, because asking about hdf5 needs it."""
    loaded = loaded_after("missing")
    hdf5_writable = subprocess.run([sys.executable, "-c", "import h5py"], capture_output=True).returncode == 0
    assert ("h5py" in loaded) == hdf5_writable


def test_hdf5_written_by_ckptio_reads_without_h5py_in_sys_modules_first(tmp_path):
    """A write through the hdf5 backend imports h5py on demand (the first ``create``), and the file reads back."""
    loaded_after("hdf5_roundtrip", str(tmp_path / "c"))


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_startup_benchmark_runs(tmp_path):
    """``benchmarks/startup.py`` at 1 rank, Python caller (its figures are not checked, only that they exist and
    that ``import ckptio`` loaded none of the libraries); the syscall columns when strace is installed."""
    cmd = [sys.executable, "-m", "benchmarks.startup", "--ranks", "1", "--repeats", "1", "--c-program", "none",
           "--workdir", str(tmp_path), "--json", str(tmp_path / "r.json")]
    # env given explicitly (os.environ as Python knows it): once a test has initialised MPI in this process (the
    # CLI tests open checkpoints on COMM_SELF), Open MPI's singleton has added variables to the C-level
    # environment, which a child started with env=None inherits, and an mpirun started under them exits 1
    # without a word (seen in every full `make test`, never alone)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=280, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    entry = json.loads((tmp_path / "r.json").read_text())["by_ranks"]["python/1"]
    assert entry["heavy_loaded"] == [] and entry["total_s"] > 0 and entry["rss_delta_mib"] > 0
    if shutil.which("strace"):
        assert entry["open_per_rank"] > entry["open_ckptio_per_rank"] > 0
    assert "| python | 1 |" in proc.stdout
