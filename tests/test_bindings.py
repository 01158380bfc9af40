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
from mpi_helpers import FORTRAN_BUILD, REPO, run_mpi, run_program, run_script

SRC = REPO / "fortran_bindings"
BUILD = FORTRAN_BUILD  # build/fortran, or build/fortran-mpich in the MPICH stack's venv
FLASH_PY = str(REPO / "examples" / "flash_like" / "flash_like.py")
SMALL = ["--nblocks", "13", "--nxb", "8", "--checkpoint-every", "5", "--quiet"]

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(600)]


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

# Compare every variable and attribute of checkpoints, bit for bit (run on 1 rank, COMM_SELF).
COMPARE = r"""
import sys
from mpi4py import MPI
import ckptio
first, *others = sys.argv[1:]
SERIES_ONLY = "ckptio_series_seq"  # the commit counter an older ckptio.Series added as an attribute (Fortran: none)
with ckptio.open(first, MPI.COMM_SELF) as a:
    ref = {n: a.read(n) for n in a.variables}
    attrs = {k: v for k, v in a.attrs.items() if k != SERIES_ONLY}
for other in others:
    with ckptio.open(other, MPI.COMM_SELF) as b:
        assert sorted(b.variables) == sorted(ref), (other, sorted(b.variables), sorted(ref))
        assert {k: v for k, v in b.attrs.items() if k != SERIES_ONLY} == attrs, (other, b.attrs, attrs)
        for n, x in ref.items():
            y = b.read(n)
            assert x.dtype == y.dtype and x.shape == y.shape, (other, n, x.dtype, y.dtype, x.shape, y.shape)
            assert x.tobytes() == y.tobytes(), f"{other}: variable {n} differs from {first}"
print("IDENTICAL", len(ref), "variables")
"""


def assert_identical(tmp_path: Path, *paths) -> None:
    proc = run_script(1, COMPARE, tmp_path, *map(str, paths))
    assert "IDENTICAL" in proc.stdout


# ------------------------------------------------------------------------------------------------- C API
# The checkpoint of ckptio_test_c roundtrip, as Python sees it (on another rank count than the writer's).
CHECK_C_FILE = r"""
import sys
import numpy as np
from mpi4py import MPI
import ckptio
path, writers = sys.argv[1], int(sys.argv[2])
comm = MPI.COMM_WORLD
with ckptio.open(path, comm) as ck:
    assert ck.attrs["step"] == 7 and ck.attrs["time"] == 0.125
    label = ck.attrs["label"]
    assert (label.decode() if isinstance(label, bytes) else label) == "c roundtrip"
    rows = ck.read("rows")
    i, j = np.indices((3 * writers, 5))
    assert rows.dtype == np.float64 and (rows == 1000.0 * i + j + 0.25).all()
    f3 = ck.read("fortran3d")   # Fortran a(i,j,k), column-major: stored with the reversed shape (k, j, i)
    k, j, i = np.indices((2 * writers, 3, 4))
    assert f3.dtype == np.int32 and f3.shape == (2 * writers, 3, 4)
    assert (f3 == 10000 * k + 100 * j + i).all()
    seg = ck.read("seg", offset=(0,), shape=(writers * (writers + 1) // 2,))
    assert seg.tolist() == [100 * r + q for r in range(writers) for q in range(r + 1)]
if comm.rank == 0:
    print("PYTHON OK")
"""


@pytest.mark.parametrize("nprocs", [2, 4])
@pytest.mark.parametrize("backend", ["mpiio", "hdf5", "pnetcdf"])
def test_c_roundtrip(build, tmp_path, nprocs, backend):
    # The C program calls MPI_Init (MPI_THREAD_SINGLE) under Open MPI's default OMPIO: the configuration where
    # the hdf5 and pnetcdf backends must switch to independent transfers (ckptio.hints.collective_write_hazard).
    proc = run_program(nprocs, [build / "ckptio_test_c", "roundtrip", tmp_path, backend])
    assert f"ROUNDTRIP OK {nprocs} ranks backend {backend}" in proc.stdout
    other = 3 if nprocs != 3 else 2
    proc = run_script(other, CHECK_C_FILE, tmp_path, str(tmp_path / "chk_000007"), str(nprocs))
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
CHECK_F_LAYOUT = r"""
import sys
import numpy as np
from mpi4py import MPI
import ckptio
d, writers = sys.argv[1], int(sys.argv[2])
N1, N2, NK = 4, 3, 2
with ckptio.open(f"{d}/chk_000003", MPI.COMM_WORLD) as ck:
    # Fortran a(N1, N2, NK*writers) -> C-order global shape (NK*writers, N2, N1); a(i,j,k) == x[k-1, j-1, i-1]
    assert ck.variables["a"].shape == (NK * writers, N2, N1), ck.variables["a"].shape
    x = ck.read("a")
    k, j, i = np.indices(x.shape) + 1
    assert x.dtype == np.float64 and (x == i + 100.0 * j + 10000.0 * k + 0.5).all()
    r4 = ck.read("r4")
    assert r4.dtype == np.float32 and r4.shape == (5 * writers,)
    assert (r4 == np.repeat(np.arange(writers), 5) + 0.25 * np.tile(np.arange(1, 6), writers)).all()
    seg = ck.read("seg", offset=(0,), shape=(writers * (writers + 1) // 2,))
    assert seg.tolist() == [100 * r + q for r in range(writers) for q in range(r + 1)]
    # Fortran tr(3, n) with rows=.true.: Python's (n, 3) rows, every writer's in rank order
    want = [[10.0 * r + 0.5 * (3 * q + c + 1) for c in range(3)] for r in range(writers) for q in range(r % 3)]
    assert ck.variables["tr"].shape == (len(want), 3)
    assert ck.read("tr", offset=(0, 0), shape=(len(want), 3)).tolist() == want
    assert ck.attrs["step"] == 3 and ck.attrs["big"] == 9000000000 and ck.attrs["time"] == 0.375
    assert ck.attrs["label"] == "fortran layout"
    # slice of the middle: Python hyperslabs map to Fortran index ranges
    part = ck.read("a", offset=(1, 1, 2), shape=(2, 2, 2))
    assert (part == x[1:3, 1:3, 2:4]).all()
with ckptio.open(f"{d}/ints_000001", MPI.COMM_WORLD) as ck:
    b = ck.read("b")   # Fortran b(4, 2*writers) -> (2*writers, 4)
    assert b.dtype == np.int32 and b.shape == (2 * writers, 4)
    r, c = np.indices(b.shape)
    assert (b == (r % 2) * 4 + c + 1 + 10 * (r // 2)).all()
if MPI.COMM_WORLD.rank == 0:
    print("PYTHON OK")
"""


@pytest.mark.parametrize("nprocs", [2, 3])
def test_fortran_layout_seen_from_python(build, tmp_path, nprocs):
    proc = run_program(nprocs, [build / "ckptio_test_f", "layout", tmp_path])
    assert f"LAYOUT OK {nprocs} ranks" in proc.stdout
    proc = run_script(2, CHECK_F_LAYOUT, tmp_path, str(tmp_path), str(nprocs))
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
        assert_identical(tmp_path, tmp_path / "p" / f"chk_{step}", tmp_path / "f" / f"chk_{step}")


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
    assert_identical(tmp_path, ref / "chk_000020", f2p / "chk_000020", p2f / "chk_000020")
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
HOST_IS_PYTHON = r"""
import ctypes, sys
import numpy as np
from mpi4py import MPI
lib = ctypes.CDLL(sys.argv[1])       # CDLL releases the GIL around calls: the library takes it itself
comm_t = ctypes.c_void_p if MPI._sizeof(MPI.Comm) == ctypes.sizeof(ctypes.c_void_p) else ctypes.c_int
lib.ckptio_create.argtypes = [ctypes.c_char_p, comm_t, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
lib.ckptio_write_segment.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int64, ctypes.c_void_p]
lib.ckptio_close.argtypes = [ctypes.c_void_p]
comm = MPI.COMM_WORLD
data = np.arange(comm.rank + 2, dtype=np.float64)
f = ctypes.c_void_p()
path = sys.argv[2].encode()
assert lib.ckptio_create(path, comm_t(MPI._handleof(comm)), b"mpiio", ctypes.byref(f)) == 0
assert lib.ckptio_write_segment(f, b"x", 10, data.size, data.ctypes.data) == 0
assert lib.ckptio_close(f) == 0
assert lib.ckptio_finalize() == 0     # not our interpreter: it keeps running
import ckptio
with ckptio.open(sys.argv[2], comm) as ck:
    assert ck.read("x").tolist() == data.tolist()
print("HOST OK", comm.rank)
"""


def test_library_reuses_a_running_interpreter(build, tmp_path):
    proc = run_script(2, HOST_IS_PYTHON, tmp_path, str(build / "libckptio_c.so"), str(tmp_path / "chk_000001"))
    assert proc.stdout.count("HOST OK") == 2
