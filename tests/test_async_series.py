"""Asynchronous and staged checkpoints, compression, Series retention and fallback (issue: async/staged)."""

from __future__ import annotations

import pytest
from mpi_helpers import BACKENDS, PROGRAMS, REPO, parse_cases, run_mpi

from ckptio.testing import CASES

PROGRAM = str(PROGRAMS / "async_series.py")  # the MPI programs of these tests


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
def test_async_checkpoint_holds_values_at_close_and_reports_errors(backend, tmp_path):
    proc = run_mpi(4, [PROGRAM, "async_snapshot", str(tmp_path / "chk_000001"), backend])
    assert proc.stdout.count("OK") == 4


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_series_keeps_last_k_and_falls_back_past_a_corrupt_newest(backend, mode, tmp_path):
    proc = run_mpi(3, [PROGRAM, "keep_and_fallback", str(tmp_path / "run"), backend, mode])
    assert proc.stdout.count("OK") == 3


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
def test_staged_checkpoint_drains_and_restart_prefers_stage(backend, tmp_path):
    proc = run_mpi(2, [PROGRAM, "staged", str(tmp_path / "run"), str(tmp_path / "stage"), backend])
    assert proc.stdout.count("OK") == 2


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_compression_round_trip_and_capability_error(tmp_path):
    proc = run_mpi(2, [PROGRAM, "compression", str(tmp_path / "chk_000001")])
    assert proc.stdout.count("OK") == 2


_RESULTS: dict = {}


@pytest.mark.mpi
@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", ["async", "staged"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", [name for name, _ in CASES])
def test_conformance_in_background_modes(backend, mode, case, tmp_path_factory):
    key = (backend, mode)
    if key not in _RESULTS:
        d = tmp_path_factory.mktemp(f"conf_{backend}_{mode}")
        proc = run_mpi(4, ["-m", "ckptio.testing", "--backend", backend, "--outdir", str(d), "--mode", mode],
                       timeout=400, check=False)
        _RESULTS[key] = parse_cases(proc.stdout) or {"*": proc.stderr[-3000:]}
    assert _RESULTS[key].get(case) == "PASS", _RESULTS[key].get(case, _RESULTS[key].get("*"))


APP = str(REPO / "examples" / "flash_like" / "flash_like.py")


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
def test_flash_restart_equality_async_and_staged(backend, tmp_path):
    small = ["--nblocks", "12", "--nxb", "8", "--quiet", "--backend", backend]
    run_mpi(2, [APP, "--outdir", str(tmp_path / "a"), "--steps", "20", "--final-state", str(tmp_path / "a.npz"),
                *small])
    out = str(tmp_path / "b")
    run_mpi(4, [APP, "--outdir", out, "--steps", "10", "--mode", "async", *small])
    run_mpi(3, [APP, "--outdir", out, "--steps", "20", "--restart", "--stage-dir", str(tmp_path / "stage"),
                "--final-state", str(tmp_path / "b.npz"), *small])
    import numpy as np

    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
        assert a[k].tobytes() == b[k].tobytes(), k


@pytest.mark.mpi
@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["sync", "async", "staged"])
def test_background_checkpoints_keep_scalars_and_report_stats_and_meta_after_wait(how, tmp_path):
    proc = run_mpi(2, [PROGRAM, "background_results", str(tmp_path), how], timeout=200)
    assert proc.stdout.count("OK") == 2, proc.stdout + proc.stderr
