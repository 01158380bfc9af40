"""C and Fortran multi-level checkpoints on emulated nodes (issue 28): ``ckptio_series_create_ml`` (Fortran:
``ckptio_series_create(..., redundancy=, drain_every=, failure_group=)``) protects node-local checkpoints with
partner copies or XOR parity, drains every k-th; after one node's stage is wiped, ``ckptio_latest_verified_ex``
(Fortran: ``ckptio_latest_verified(..., stage_dir=)``) rebuilds its pieces, drains the newest checkpoint and the
data reads back bit-identical. A bad option on one rank is the same clear error on every rank."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from multinode import node_dir, node_local, run_nodes, skip_reason
from test_bindings import CODES, ensure_build, error_lines

import ckptio

pytestmark = [pytest.mark.mpi, pytest.mark.bindings, pytest.mark.nodes, pytest.mark.timeout(600),
              pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))]

LAYOUT = (2, 1, 1)  # nodeA: ranks 0-1, nodeB: rank 2, nodeC: rank 3 (its stage is wiped)


@pytest.fixture(scope="session")
def build():
    return ensure_build()


def expected(step: int, nprocs: int) -> np.ndarray:
    """x of the test programs: rank r holds 3 + r rows of 5; element (row, col) = (1000 step + 7 row + col) / 3."""
    rows = sum(3 + r for r in range(nprocs))
    row, col = np.meshgrid(np.arange(rows), np.arange(5), indexing="ij")
    return (1000.0 * step + 7.0 * row + col) / 3.0


def same_error(cases: dict, case: str, nprocs: int, text: str) -> None:
    ranks = cases.get(case, {})
    assert sorted(ranks) == list(range(nprocs)), (case, ranks)
    assert {s for s, _ in ranks.values()} == {CODES["CKPTIO_ERR_DECLARATION"]}, (case, ranks)
    messages = {m for _, m in ranks.values()}
    assert len(messages) == 1 and text in messages.pop(), (case, ranks)


def wipe_and_restart(program, tmp_path, scheme: str, *extra) -> str:
    """Write steps 1-3 (``write``), check the levels, wipe nodeC's stage, restart (``restart``); the restart's
    stderr (warnings). Returns the write job's stdout."""
    out, stage = tmp_path / "out", node_local(tmp_path) / "stage"
    out.mkdir()
    wrote = run_nodes(LAYOUT, [program, "multilevel", out, stage, scheme, "write", *extra], tmp_path, timeout=300)
    assert "ML_WRITE OK" in wrote.stdout, wrote.stdout + wrote.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["chk_000002"]  # drain_every=2; nothing of the bad calls
    levels = [p for n in ("nodeA", "nodeB", "nodeC") for p in (node_dir(tmp_path, n) / "stage").rglob("level.json")]
    assert len(levels) == 3, levels  # step 3 complete at the node-local level on every node
    recorded = json.loads(levels[0].read_text())
    assert "rack0" in json.dumps(recorded) and "rack1" in json.dumps(recorded), recorded  # failure_group arrived
    shutil.rmtree(node_dir(tmp_path, "nodeC") / "stage")
    back = run_nodes(LAYOUT, [program, "multilevel", out, stage, scheme, "restart", *extra], tmp_path, timeout=300)
    assert f"ML_RESTART OK {out}/chk_000003" in back.stdout, back.stdout + back.stderr[-3000:]
    assert "rebuilt node nodeC" in back.stderr, back.stderr[-3000:]
    with ckptio.open(out / "chk_000003") as r:  # N-to-M: one process reads what 4 ranks wrote
        assert r.attrs["step"] == 3
        assert np.array_equal(r.read("x"), expected(3, sum(LAYOUT)))
    return wrote.stdout


@pytest.mark.parametrize("scheme", ["xor", "partner"])
def test_c_multilevel_wiped_node_restarts_bit_identical(build, tmp_path, scheme):
    stdout = wipe_and_restart(build / "ckptio_test_c", tmp_path, scheme)
    cases = error_lines(stdout)
    n = sum(LAYOUT)
    same_error(cases, "ml_bad_scheme", n, "redundancy='raid'")
    same_error(cases, "ml_bad_drain", n, "drain_every")
    same_error(cases, "ml_no_stage", n, "need stage_dir")


def test_fortran_multilevel_wiped_node_restarts_bit_identical(build, tmp_path):
    stdout = wipe_and_restart(build / "ckptio_test_f", tmp_path, "xor")
    same_error(error_lines(stdout), "ml_bad_scheme", sum(LAYOUT), "redundancy='raid'")
