"""C and Fortran memory selections (issue 16 item 7): the interior of a guard-celled array is written with
``ckptio_write_sub`` (C) / ``ckptio_write(..., interior_start=, interior_shape=)`` (Fortran) and read back into
the interior of another one with ``ckptio_read_sub`` / ``ckptio_read(..., interior_start=, interior_shape=)``.

The test programs (``selections`` mode of fortran_bindings/tests/ckptio_test_{c,f}) check on every rank that the
interiors hold the other decomposition's values and that no guard cell was written; here Python checks the
files: the global arrays, in C order, hold exactly the interiors (no guard value anywhere), and a box that does
not fit in its array fails the write on its rank and the close on every rank.
"""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import BACKENDS, run_program
from test_bindings import CODES, ensure_build, error_lines

import ckptio

pytestmark = [pytest.mark.mpi, pytest.mark.bindings, pytest.mark.timeout(600)]


@pytest.fixture(scope="session")
def build():
    return ensure_build()


def _failed_everywhere(cases: dict, case: str, nprocs: int) -> str:
    ranks = cases.get(case, {})
    assert sorted(ranks) == list(range(nprocs)), (case, ranks)
    assert {s for s, _ in ranks.values()} == {CODES["CKPTIO_ERR_ARGUMENT"]}, (case, ranks)
    messages = {m for _, m in ranks.values()}
    assert len(messages) == 1, messages
    return messages.pop()


@pytest.mark.parametrize("nprocs", [1, 3])
@pytest.mark.parametrize("backend", BACKENDS)
def test_c_write_sub_and_read_sub(build, tmp_path, backend, nprocs):
    proc = run_program(nprocs, [build / "ckptio_test_c", "selections", tmp_path, backend], timeout=300)
    assert "SELECTIONS OK" in proc.stdout, proc.stdout + proc.stderr
    # the file: u[k, j, i] = 10000 k + 100 j + i over the global (3 * nprocs, 4, 5) array, no guard value (-1)
    k, j, i = np.meshgrid(np.arange(3 * nprocs), np.arange(4), np.arange(5), indexing="ij")
    expected = 10000.0 * k + 100.0 * j + i
    with ckptio.open(tmp_path / "chk_000001") as r:
        assert (r.read("u") == expected).all()
        assert (r.read("uz") == expected).all()
        a = r.read("a")  # written from a column-major a(5+4, 4+4, 3+4) in Fortran order: stored (z, y, x)
        assert a.dtype == np.float32 and (a == expected.astype(np.float32)).all()
    cases = error_lines(proc.stdout)
    last = nprocs - 1
    assert cases["sub_outside"][last][0] == CODES["CKPTIO_ERR_ARGUMENT"]
    assert "starts at 5 with 5 elements, outside the array's 9 elements" in cases["sub_outside"][last][1]
    assert all(cases["sub_outside"][r][0] == 0 for r in range(last))
    message = _failed_everywhere(cases, "close_after_sub_outside", nprocs)
    assert f"rank {last}: ArgumentError: the selection along axis 2" in message
    assert not (tmp_path / "chk_000002").exists()
    message = _failed_everywhere(cases, "read_many_sub_outside", nprocs)
    assert (f"rank {last}: ArgumentError: request 0 (\"u\"): the selection along axis 1 starts at 5 with 4 "
            "elements, outside the array's 8") in message
    # zero-copy: the box is the caller's memory (no copy), so a change of it before the close is caught
    message = _failed_everywhere(cases, "close_after_interior_changed", nprocs)
    assert 'rank 0: ArgumentError: the memory of ckptio_write_sub("u") changed' in message
    assert not (tmp_path / "chk_000003").exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_fortran_interior_write_and_read(build, tmp_path, backend):
    nprocs = 2
    proc = run_program(nprocs, [build / "ckptio_test_f", "selections", tmp_path, backend], timeout=300)
    assert "SELECTIONS OK" in proc.stdout, proc.stdout + proc.stderr
    # Fortran u(i, j, k) = i + 100 j + 10000 k + 0.5 (1-based, global k): stored as the C-order (k, j, i) array
    k, j, i = np.meshgrid(np.arange(1, 2 * nprocs + 1), np.arange(1, 4), np.arange(1, 5), indexing="ij")
    expected = i + 100.0 * j + 10000.0 * k + 0.5
    with ckptio.open(tmp_path / "chk_000001") as r:
        assert (r.read("u") == expected).all()
        assert (r.read("uz") == expected).all()
        b = r.read("b")  # b(0:N1+1, N2) per rank, interior b(1:N1, :): global Fortran (4, 3 * nprocs)
        jj, ii = np.meshgrid(np.arange(3 * nprocs), np.arange(1, 5), indexing="ij")
        assert (b == ii + 10 * (jj % 3 + 1) + 100 * (jj // 3)).all()
        if backend != "pnetcdf":
            assert (r.read("mask") == ((i + j + k) % 3 == 0)).all()
    cases = error_lines(proc.stdout)
    assert cases["interior_outside"][nprocs - 1][0] == CODES["CKPTIO_ERR_ARGUMENT"]
    assert "along dimension 3 starts at 5 (0-based) with 2 elements, outside the array's 6 elements" in \
        cases["interior_outside"][nprocs - 1][1]
    assert cases["interior_outside"][0][0] == 0
    assert all(s == CODES["CKPTIO_ERR_ARGUMENT"] and "give both interior_start= and interior_shape=" in m
               for s, m in cases["interior_half"].values())
    message = _failed_everywhere(cases, "close_after_bad_interior", nprocs)
    assert f"rank {nprocs - 1}: ArgumentError: the selection along dimension 3" in message
    assert not (tmp_path / "chk_000002").exists()
