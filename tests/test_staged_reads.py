"""Staged restart reads through the distributed directory give exactly what the drained file gives through the
two-phase Reader (tests/staged_reads_app.py): blocks several per rank, a big-endian variable (moved between ranks
as raw bytes, it came back byte-swapped before the directory), segments with an empty one, shifted and whole
reads, a strided ``out=``, overlapping requests in one call."""

from __future__ import annotations

from pathlib import Path

import pytest
from mpi_helpers import run_mpi

APP = str(Path(__file__).with_name("staged_reads_app.py"))


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3, 4])
def test_staged_reads_equal_the_drained_file(nprocs, tmp_path):
    (tmp_path / "out").mkdir()
    proc = run_mpi(nprocs, [APP, str(tmp_path / "out"), str(tmp_path / "stage")], timeout=240)
    assert proc.stdout.count("STAGED READS OK") == nprocs, proc.stdout + proc.stderr
