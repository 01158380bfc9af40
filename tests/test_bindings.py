"""C and Fortran bindings (fortran_bindings/): compiled programs under mpirun, checked from Python.

The programs are built in build/fortran (ci/install.sh does it; this module configures and builds it itself if
needed, and always brings it up to date with ``cmake --build``). Every file goes to tmp_path.

Covered: C round trip (blocks, Fortran-order arrays, segments, attributes, latest) at 2 and 4 ranks and every
backend; errors come back as status codes with a readable message on every rank (and collectively, without
deadlock, when only one rank is wrong); a Fortran column-major array appears in Python with the documented
reversed shape; the Fortran FLASH-like run writes the same bits as the Python one; Fortran checkpoints restart in
Python on another rank count and vice versa; the README snippets build against an installed copy (CMake package
and pkg-config) and run; the host's MPI error handler survives; the status codes of ckptio.h and the Fortran
module agree; the library reuses a running interpreter (host program in Python, via ctypes).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_helpers import FORTRAN_BUILD, PROGRAMS, REPO, run_mpi, run_program

SRC = REPO / "fortran_bindings"
BUILD = FORTRAN_BUILD  # build/fortran, or build/fortran-mpich in the MPICH stack's venv
FLASH_PY = str(REPO / "examples" / "flash_like" / "flash_like.py")
SMALL = ["--nblocks", "13", "--nxb", "8", "--checkpoint-every", "5", "--quiet"]
# What the compiled programs wrote, as Python reads it (for every test_bindings*.py)
PROGRAM = str(PROGRAMS / "bindings.py")

pytestmark = [pytest.mark.mpi, pytest.mark.bindings, pytest.mark.timeout(600)]


# ------------------------------------------------------------------------------------------------- helpers
def _run(cmd: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {proc.returncode}\n{proc.stdout[-4000:]}\n"
                             f"{proc.stderr[-4000:]}")
    return proc


def ensure_build() -> Path:
    """build/fortran, configured if needed and brought up to date (skips the test without cmake/mpifort)."""
    if shutil.which("cmake") is None or shutil.which("mpifort") is None:
        if not (BUILD / "ckptio_test_c").exists():
            pytest.skip("cmake/mpifort not available and build/fortran not built")
        return BUILD
    if not (BUILD / "CMakeCache.txt").exists():
        _run(["cmake", "-S", str(SRC), "-B", str(BUILD), "-DCMAKE_C_COMPILER=mpicc",
              "-DCMAKE_Fortran_COMPILER=mpifort", f"-DPython3_EXECUTABLE={sys.executable}"], timeout=600)
    _run(["cmake", "--build", str(BUILD)], timeout=900)
    return BUILD


@pytest.fixture(scope="session")
def build() -> Path:
    return ensure_build()


def error_lines(stdout: str) -> dict[str, dict[int, tuple[int, str]]]:
    """``ERR case rank status message`` lines -> {case: {rank: (status, message)}}: from ``stdout`` and from the
    per-rank report files of the last program run (``CKPTIO_TEST_REPORT_DIR``, set for every test by
    tests/conftest.py; read and removed here, so each program's cases are its own)."""
    out: dict[str, dict[int, tuple[int, str]]] = {}
    text = stdout
    folder = os.environ.get("CKPTIO_TEST_REPORT_DIR")
    if folder and os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            if name.startswith("report."):
                path = os.path.join(folder, name)
                with open(path) as f:
                    text += "\n" + f.read()
                os.remove(path)
    for line in text.splitlines():
        if line.startswith("ERR "):
            _, case, rank, status, msg = line.split(" ", 4)
            out.setdefault(case, {})[int(rank)] = (int(status), msg)
    return out


def same_everywhere(cases: dict, case: str, nprocs: int, status: int) -> str:
    """The one message of ``case`` that every rank reported with ``status`` ('-' for CKPTIO_OK)."""
    ranks = cases.get(case, {})
    assert sorted(ranks) == list(range(nprocs)), (case, ranks)
    assert {s for s, _ in ranks.values()} == {status}, (case, ranks)
    messages = {m for _, m in ranks.values()}
    assert len(messages) == 1, (case, messages)
    return messages.pop()


def status_codes() -> dict[str, int]:
    text = (SRC / "include" / "ckptio.h").read_text()
    return {name: int(value) for name, value in re.findall(r"^\s*(CKPTIO_\w+) = (\d+)", text, re.M)}


CODES = status_codes()


def assert_identical(*paths) -> None:
    """Every variable and attribute of the checkpoints ``paths`` is the first one's, bit for bit (1 rank)."""
    proc = run_mpi(1, [PROGRAM, "compare", *map(str, paths)])
    assert "IDENTICAL" in proc.stdout


# ------------------------------------------------------------------------------------------------- C API

@pytest.mark.parametrize("nprocs", [2, 4])
@pytest.mark.parametrize("backend", ["mpiio", "hdf5", "pnetcdf"])
def test_c_roundtrip(build, tmp_path, nprocs, backend):
    # The C program calls MPI_Init (MPI_THREAD_SINGLE) under Open MPI's default OMPIO: the configuration where
    # the hdf5 and pnetcdf backends must switch to independent transfers (ckptio.coord.hints.collective_write_hazard).
    proc = run_program(nprocs, [build / "ckptio_test_c", "roundtrip", tmp_path, backend])
    assert f"ROUNDTRIP OK {nprocs} ranks backend {backend}" in proc.stdout
    other = 3 if nprocs != 3 else 2
    proc = run_mpi(other, [PROGRAM, "c_roundtrip", str(tmp_path / "chk_000007"), str(nprocs)])
    assert "PYTHON OK" in proc.stdout


@pytest.mark.parametrize("nprocs", [2, 4])
def test_c_errors(build, tmp_path, nprocs):
    """Errors are status codes with a readable message on every rank; collective ones agree on all ranks."""
    proc = run_program(nprocs, [build / "ckptio_test_c", "errors", tmp_path], timeout=180)
    cases = error_lines(proc.stdout)
    expected = {
        "unknown_variable": CODES["CKPTIO_ERR_NOT_FOUND"],
        "wrong_dtype": CODES["CKPTIO_ERR_ARGUMENT"],
        "wrong_dtype_one_rank": CODES["CKPTIO_ERR_ARGUMENT"],
        "outside_shape": CODES["CKPTIO_ERR_NOT_FOUND"],
        "missing_attr": CODES["CKPTIO_ERR_NOT_FOUND"],
        "bad_path": CODES["CKPTIO_ERR_IO"],
        "bad_backend": CODES["CKPTIO_ERR_CAPABILITY"],
        "overlap": CODES["CKPTIO_ERR_DECLARATION"],
        "segment_rows_differ": CODES["CKPTIO_ERR_DECLARATION"],
        "close_after_bad_write": CODES["CKPTIO_ERR_ARGUMENT"],
        "null_handle": CODES["CKPTIO_ERR_ARGUMENT"],
    }
    for case, status in expected.items():
        ranks = cases.get(case, {})
        assert sorted(ranks) == list(range(nprocs)), (case, ranks)
        for rank, (got, msg) in ranks.items():
            assert got == status, (case, rank, got, msg)
            assert len(msg) > 20, (case, rank, msg)
    collective = ["unknown_variable", "wrong_dtype", "wrong_dtype_one_rank", "outside_shape", "bad_path", "overlap",
                  "segment_rows_differ", "close_after_bad_write"]
    for case in collective:  # the same message on every rank
        assert len({msg for _, msg in cases[case].values()}) == 1, case
    assert "'nope'" in cases["unknown_variable"][0][1] and "(it has: x)" in cases["unknown_variable"][0][1]
    assert "float64" in cases["wrong_dtype"][0][1] and "float32" in cases["wrong_dtype"][0][1]
    last = nprocs - 1
    assert f"rank {last}: ArgumentError" in cases["wrong_dtype_one_rank"][0][1]
    assert "No such file" in cases["bad_path"][1][1] and "no_such_checkpoint" in cases["bad_path"][1][1]
    assert "overlaps" in cases["overlap"][0][1]
    assert "'tr'" in cases["segment_rows_differ"][0][1] and "rows of shape [1]" in cases["segment_rows_differ"][0][1]
    assert "unknown dtype code 99" in cases["close_after_bad_write"][last][1]
    # the bad write itself failed only on rank 0 (local call)
    assert cases["bad_dtype_code_write"][0][0] == CODES["CKPTIO_ERR_ARGUMENT"]
    assert all(cases["bad_dtype_code_write"][r][0] == 0 for r in range(1, nprocs))


def test_status_codes_match_fortran_module():
    """The enum of ckptio.h and the parameters of module ckptio must not drift apart."""
    text = (SRC / "src" / "ckptio_mod.F90").read_text()
    fortran = {name: int(value) for name, value in re.findall(r"\b(CKPTIO_\w+) = (\d+)", text)}
    for name, value in CODES.items():
        assert fortran.get(name) == value, (name, value, fortran.get(name))


# --------------------------------------------------------------------------------------------------- Fortran

@pytest.mark.parametrize("nprocs", [2, 3])
def test_fortran_layout_seen_from_python(build, tmp_path, nprocs):
    proc = run_program(nprocs, [build / "ckptio_test_f", "layout", tmp_path])
    assert f"LAYOUT OK {nprocs} ranks" in proc.stdout
    proc = run_mpi(2, [PROGRAM, "fortran_layout", str(tmp_path), str(nprocs)])
    assert "PYTHON OK" in proc.stdout


def test_fortran_errors(build, tmp_path):
    nprocs = 2
    proc = run_program(nprocs, [build / "ckptio_test_f", "errors", tmp_path], timeout=180)
    cases = error_lines(proc.stdout)
    expected = {
        "unknown_variable": "CKPTIO_ERR_NOT_FOUND",
        "wrong_dtype": "CKPTIO_ERR_ARGUMENT",
        "wrong_offset_size": "CKPTIO_ERR_ARGUMENT",
        "noncontiguous_read": "CKPTIO_ERR_ARGUMENT",
        "string_too_long": "CKPTIO_ERR_ARGUMENT",
        "double_close": "CKPTIO_ERR_ARGUMENT",
        "bad_path": "CKPTIO_ERR_IO",
        "not_open": "CKPTIO_ERR_ARGUMENT",
        "close_after_noncontiguous": "CKPTIO_ERR_ARGUMENT",
        "inconsistent_shape": "CKPTIO_ERR_DECLARATION",
    }
    for case, name in expected.items():
        ranks = cases.get(case, {})
        assert sorted(ranks) == list(range(nprocs)), (case, ranks)
        for rank, (got, msg) in ranks.items():
            assert got == CODES[name], (case, rank, got, msg)
            assert len(msg) > 20, (case, rank, msg)
    assert "'nope'" in cases["unknown_variable"][1][1]
    assert "float64" in cases["wrong_dtype"][0][1] and "float32" in cases["wrong_dtype"][0][1]
    assert "not contiguous" in cases["noncontiguous_read"][1][1]
    assert "No such file" in cases["bad_path"][0][1]
    assert "declared global shape" in cases["inconsistent_shape"][1][1]
    # the non-contiguous write failed on rank 0 only, but the close on both ranks (nothing committed)
    assert cases["noncontiguous_write"][0][0] == CODES["CKPTIO_ERR_ARGUMENT"]
    assert cases["noncontiguous_write"][1][0] == 0
    assert "rank 0: ArgumentError: the array is not contiguous" in cases["close_after_noncontiguous"][1][1]


def test_fortran_without_ierr_aborts_with_message(build, tmp_path):
    proc = run_program(2, [build / "ckptio_test_f", "abort", tmp_path], check=False, timeout=120)
    assert proc.returncode != 0
    assert "NOT ABORTED" not in proc.stdout
    assert "ckptio: rank" in proc.stderr and "No such file" in proc.stderr, proc.stderr[-2000:]


# ---------------------------------------------------------------------------------------- FLASH-like example
def test_flash_like_fortran_matches_python(build, tmp_path):
    """Same steps, same bits: every variable and attribute of chk_000005 and chk_000010 (Fortran writes HDF5,
    Python the native format: the contents must not depend on it)."""
    run_program(4, [build / "flash_like", "--outdir", tmp_path / "f", "--steps", "10", "--backend", "hdf5", *SMALL])
    run_mpi(2, [FLASH_PY, "--outdir", str(tmp_path / "p"), "--steps", "10", *SMALL])
    for step in ("000005", "000010"):
        assert_identical(tmp_path / "p" / f"chk_{step}", tmp_path / "f" / f"chk_{step}")


def test_flash_like_restart_across_languages(build, tmp_path):
    """Fortran checkpoint (4 ranks) -> Python restart (3 ranks), Python checkpoint (4) -> Fortran restart (3);
    both end bit-identical to a straight Python run (2 ranks)."""
    ref, f2p, p2f = tmp_path / "ref", tmp_path / "f2p", tmp_path / "p2f"
    run_mpi(2, [FLASH_PY, "--outdir", str(ref), "--steps", "20", *SMALL])
    run_program(4, [build / "flash_like", "--outdir", f2p, "--steps", "10", "--backend", "pnetcdf", *SMALL])
    run_mpi(3, [FLASH_PY, "--outdir", str(f2p), "--steps", "20", "--restart", *SMALL])
    run_mpi(4, [FLASH_PY, "--outdir", str(p2f), "--steps", "10", "--backend", "hdf5", *SMALL])
    proc = run_program(3, [build / "flash_like", "--outdir", p2f, "--steps", "20", "--restart",
                      "--checkpoint-every", "5", "--nblocks", "13"])
    assert "restarted from" in proc.stdout and "chk_000010" in proc.stdout
    assert_identical(ref / "chk_000020", f2p / "chk_000020", p2f / "chk_000020")
    assert sorted(p.name for p in p2f.iterdir()) == ["chk_000010", "chk_000015", "chk_000020"]  # retention


# ------------------------------------------------------------------------------------------- README snippets
def snippets() -> dict[str, str]:
    text = (SRC / "README.md").read_text()
    found = dict(re.findall(r"<!-- snippet:(\w+) -->\s*```\w*\n(.*?)```\s*<!-- /snippet -->", text, re.S))
    assert set(found) == {"cmake", "fortran", "c"}, sorted(found)
    return found


def test_readme_snippets_build_against_install(build, tmp_path):
    """Install to a prefix; build the README's Fortran and C snippets with its two CMake lines (and the C one
    also with pkg-config), run them on 2 ranks."""
    prefix = tmp_path / "prefix"
    _run(["cmake", "--install", str(build), "--prefix", str(prefix)])
    for f in ("include/ckptio.h", "include/ckptio.mod", "lib/cmake/ckptio/ckptioConfig.cmake",
              "lib/pkgconfig/ckptio.pc"):
        assert (prefix / f).exists(), f
    code = snippets()
    proj = tmp_path / "user"
    proj.mkdir()
    (proj / "demo.F90").write_text(code["fortran"])
    (proj / "demo_c.c").write_text(code["c"])
    two_lines = code["cmake"].strip()
    c_lines = two_lines.replace("myapp", "demo_c").replace("ckptio::ckptio_f", "ckptio::ckptio_c")
    (proj / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(user LANGUAGES C Fortran)\n"
        "add_executable(myapp demo.F90)\nadd_executable(demo_c demo_c.c)\n"
        + two_lines + "\n" + c_lines.split("\n", 1)[1] + "\n")
    _run(["cmake", "-S", str(proj), "-B", str(proj / "build"), "-DCMAKE_C_COMPILER=mpicc",
          "-DCMAKE_Fortran_COMPILER=mpifort", f"-DCMAKE_PREFIX_PATH={prefix}"], timeout=600)
    _run(["cmake", "--build", str(proj / "build")], timeout=600)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run_program(2, [proj / "build" / "myapp"], cwd=run_dir)
    assert (run_dir / "demo_chk_000010").exists()
    proc = run_program(2, [proj / "build" / "demo_c"], cwd=run_dir)
    assert "last row starts with 30" in proc.stdout
    if shutil.which("pkg-config"):
        env = {**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib" / "pkgconfig")}
        flags = _run(["pkg-config", "--cflags", "--libs", "ckptio"], env=env).stdout.split()
        _run(["mpicc", str(proj / "demo_c.c"), *flags, "-o", str(proj / "demo_pc")])
        proc = run_program(2, [proj / "demo_pc"], cwd=run_dir)
        assert "last row starts with 30" in proc.stdout


def test_ckptio_python_selects_the_interpreter(build, tmp_path):
    """CKPTIO_PYTHON overrides the compiled-in interpreter; a wrong one gives CKPTIO_ERR_INIT and says why."""
    proc = run_program(1, [build / "ckptio_test_c", "roundtrip", tmp_path], env={"CKPTIO_PYTHON": sys.executable})
    assert "ROUNDTRIP OK" in proc.stdout
    proc = run_program(1, [build / "ckptio_test_c", "roundtrip", tmp_path], check=False,
                  env={"CKPTIO_PYTHON": str(tmp_path / "no_venv" / "bin" / "python")})
    assert proc.returncode != 0
    assert f"-> {CODES['CKPTIO_ERR_INIT']} " in proc.stderr, proc.stderr[-2000:]
    assert "no_venv" in proc.stderr and "No module named" in proc.stderr, proc.stderr[-2000:]


# --------------------------------------------------------------------------------- host program is Python

def test_library_reuses_a_running_interpreter(build, tmp_path):
    proc = run_mpi(2, [PROGRAM, "host_is_python", str(build / "libckptio_c.so"), str(tmp_path / "chk_000001")])
    assert proc.stdout.count("HOST OK") == 2
