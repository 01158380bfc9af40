"""The engine runs a backend's collective steps one agreed phase at a time (``ckptio/engine/steps.py``): a backend
that fails or miscounts its steps on ONE rank is the same CheckpointError on every rank, never a hang, and the
temporary file is removed. (``raise-preparing`` hung the job before the steps were made inside an agreement.)
A step that raises on one rank BEFORE its collective call cannot be rescued (the others are in the library's
collective by then): the contract asks backends to prepare in the iterator, which the engine agrees on."""

from __future__ import annotations

from pathlib import Path

import pytest
from mpi_helpers import run_mpi

PROGRAM = Path(__file__).resolve().parent / "programs" / "engine_faults.py"


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", ["raise-preparing", "raise-preparing-later", "extra-step"])
def test_a_backend_failing_on_one_rank_fails_every_rank_without_a_hang(case, tmp_path):
    out = run_mpi(3, [str(PROGRAM), case, str(tmp_path / "chk_000001")], timeout=120).stdout
    raised = sorted(line for line in out.splitlines() if line.startswith(("RAISED", "NO ERROR")))
    assert [line.split()[0] for line in raised] == ["RAISED"] * 3, out
    left = [line for line in out.splitlines() if line.startswith("LEFT")]
    assert len(left) == 3 and all(line.endswith(" []") for line in left), out
