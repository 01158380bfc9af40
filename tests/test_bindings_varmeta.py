"""C and Fortran per-variable metadata (issue 16 item 6, parity with Python's ``write(..., dims=, attrs=)``):
``ckptio_set_dims`` (C order or Fortran order, stored reversed like shapes) and ``ckptio_set_var_attr_*`` in C,
``ckptio_set_dims`` / ``ckptio_set_var_attr`` in Fortran, declared before the variable's write. Python reads
them back as ``reader.variables[name].dims`` / ``.attrs``; a declaration after the write fails on its rank and
the close on every rank (nothing committed)."""

from __future__ import annotations

import pytest
from mpi_helpers import BACKENDS, run_program
from test_bindings import CODES, ensure_build, error_lines

import ckptio

pytestmark = [pytest.mark.mpi, pytest.mark.bindings, pytest.mark.timeout(600)]
ARG = CODES["CKPTIO_ERR_ARGUMENT"]


@pytest.fixture(scope="session")
def build():
    return ensure_build()


def _late_declaration(cases: dict, late: str, close: str, nprocs: int, what: str) -> None:
    assert cases[late][nprocs - 1][0] == ARG
    assert f"variable {what!r} was already written on this rank" in cases[late][nprocs - 1][1]
    assert all(cases[late][r][0] == 0 for r in range(nprocs - 1))
    assert sorted(cases[close]) == list(range(nprocs)) and {s for s, _ in cases[close].values()} == {ARG}
    assert f"rank {nprocs - 1}: ArgumentError: variable {what!r} was already written" in cases[close][0][1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_c_dims_and_variable_attributes(build, tmp_path, backend):
    nprocs = 2
    proc = run_program(nprocs, [build / "ckptio_test_c", "varmeta", tmp_path, backend], timeout=300)
    assert "VARMETA OK" in proc.stdout, proc.stdout + proc.stderr
    with ckptio.open(tmp_path / "chk_000001") as r:
        assert r.variables["temp"].dims == ("y", "x")
        assert r.variables["temp"].attrs == {"units": "K", "scale": 0.5, "level": 3}
        assert r.variables["rho"].dims == ("y", "x")  # given in Fortran order ("x", "y")
        assert r.variables["rho"].attrs == {"long_name": "density"}
        assert (r.read("rho") == r.read("temp")).all()
    cases = error_lines(proc.stdout)
    assert {s for s, _ in cases["dims_null"].values()} == {ARG}
    assert "ckptio_set_dims(\"temp2\"): ArgumentError: dims is NULL" in cases["dims_null"][0][1]
    assert sorted(cases["close_after_late_var_attr"]) == [0, 1]
    assert "rank 1: ArgumentError: variable 'temp' was already written" in cases["close_after_late_var_attr"][0][1]
    assert cases["var_attr_after_write"][1][0] == ARG and cases["var_attr_after_write"][0][0] == 0
    assert not (tmp_path / "chk_000002").exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_fortran_dims_and_variable_attributes(build, tmp_path, backend):
    nprocs = 2
    proc = run_program(nprocs, [build / "ckptio_test_f", "varmeta", tmp_path, backend], timeout=300)
    assert "VARMETA OK" in proc.stdout, proc.stdout + proc.stderr
    with ckptio.open(tmp_path / "chk_000001") as r:
        assert r.variables["a"].dims == ("zone", "y", "x")  # a(x, y, zone) in Fortran order, reversed like shapes
        assert r.variables["a"].attrs == {"units": "g/cm^3", "gamma": 1.5, "level": 2}
    _late_declaration(error_lines(proc.stdout), "dims_after_write", "close_after_late_dims", nprocs, "a")
    assert not (tmp_path / "chk_000002").exists()
