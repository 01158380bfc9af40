"""The conformance suite (ckptio.testing) against every backend, at 1, 2, 4 and 8 (oversubscribed: 4x the reference
machine's cores, CKPTIO_TEST_OVERSUBSCRIBED) ranks, plus the N-to-M restart matrix: writers {1, 3, 4} x readers
{1, 2, 4, 5}, and a reader at twice the oversubscribed count (16 ranks) restarting what 3 wrote."""

from __future__ import annotations

import pytest
from mpi_helpers import BACKENDS, OVERSUBSCRIBED, RANK_COUNTS, parse_cases, run_mpi

from ckptio.testing import CASES

_RESULTS: dict[tuple[str, int], dict[str, str]] = {}


@pytest.fixture(scope="session")
def conformance_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("conformance")


def _results(backend: str, nprocs: int, outdir) -> dict[str, str]:
    key = (backend, nprocs)
    if key not in _RESULTS:
        d = outdir / f"{backend}_{nprocs}"
        d.mkdir()
        proc = run_mpi(nprocs, ["-m", "ckptio.testing", "--backend", backend, "--outdir", str(d)], timeout=400,
                       check=False)
        failure = f"no output (exit {proc.returncode}): {proc.stderr[-3000:]}"
        _RESULTS[key] = parse_cases(proc.stdout) or {"*": failure}
    return _RESULTS[key]


@pytest.mark.mpi
@pytest.mark.timeout(900)
@pytest.mark.parametrize("nprocs", RANK_COUNTS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", [name for name, _ in CASES])
def test_conformance(backend, nprocs, case, conformance_dir):
    results = _results(backend, nprocs, conformance_dir)
    assert "*" not in results, results["*"]
    assert results.get(case) == "PASS", results.get(case, "case did not run")


@pytest.fixture(scope="module")
def nm_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("nm")


@pytest.mark.mpi
@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", BACKENDS)
def test_n_to_m_matrix(backend, nm_dir):
    d = nm_dir / backend
    d.mkdir()
    for writers in (1, 3, 4):
        proc = run_mpi(writers, ["-m", "ckptio.testing", "--backend", backend, "--outdir", str(d), "--write-nm"])
        assert "SUMMARY 1 passed, 0 failed" in proc.stdout, proc.stdout
        for readers in (1, 2, 4, 5) + ((2 * OVERSUBSCRIBED,) if writers == 3 else ()):
            proc = run_mpi(readers, ["-m", "ckptio.testing", "--backend", backend, "--outdir", str(d), "--read-nm",
                                     str(writers)], check=False)
            detail = f"{writers} -> {readers}: {proc.stdout}{proc.stderr[-2000:]}"
            assert "SUMMARY 1 passed, 0 failed" in proc.stdout, detail
