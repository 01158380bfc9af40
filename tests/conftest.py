import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest


@pytest.fixture(autouse=True)
def _report_dir(tmp_path_factory, monkeypatch):
    """Every test's MPI programs that report per-rank outcomes (the C/Fortran binding test programs) write them
    to their own files in a fresh directory instead of stdout, where the launcher may interleave long lines of
    several ranks (see tests/test_bindings.py ``error_lines``)."""
    folder = tmp_path_factory.mktemp("reports")
    monkeypatch.setenv("CKPTIO_TEST_REPORT_DIR", str(folder))
