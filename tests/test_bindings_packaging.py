"""Packaging of the C/Fortran bindings (issue 16 item 2): outside projects use them as a user would.

A C-only project (``project(... LANGUAGES C)``, ``find_package(ckptio COMPONENTS C)``) and a Fortran-only one
(``LANGUAGES Fortran``, ``COMPONENTS Fortran``) are configured, built and run against the build tree
(``-Dckptio_DIR=build/fortran``) and against an install prefix (``CMAKE_PREFIX_PATH``); the same programs are
built with pkg-config (``ckptio`` for C, ``ckptio-fortran`` for Fortran) from the build tree's and the installed
``.pc`` files. The C flags never carry ``-lckptio_f``; the exported targets never name ``Python3::Python``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from mpi_helpers import run_program
from test_bindings import _run, ensure_build

pytestmark = [pytest.mark.mpi, pytest.mark.bindings, pytest.mark.timeout(900)]

C_APP = r"""
#include <mpi.h>
#include <stdio.h>
#include "ckptio.h"
int main(int argc, char **argv) {
  int rank;
  char msg[2048];
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  double x[3] = {rank, rank + 0.5, rank + 0.25}, back[3];
  ckptio_file f;
  int64_t n = 3, zero = 0;
  int st = ckptio_create(argv[1], MPI_COMM_WORLD, "mpiio", &f);
  if (st == CKPTIO_OK) st = ckptio_write_segment(f, "x", CKPTIO_FLOAT64, n, x);
  if (st == CKPTIO_OK) st = ckptio_close(f);
  if (st == CKPTIO_OK) st = ckptio_open(argv[1], MPI_COMM_WORLD, &f);
  if (st == CKPTIO_OK) st = ckptio_read(f, "x", CKPTIO_FLOAT64, 1, &zero, &n, back);
  if (st == CKPTIO_OK) st = ckptio_close(f);
  if (st != CKPTIO_OK) {
    ckptio_last_error(msg, sizeof msg);
    fprintf(stderr, "%s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0 && back[1] == 0.5) printf("C USER OK\n");
  ckptio_finalize();
  MPI_Finalize();
  return 0;
}
"""

F_APP = r"""
program f_user
  use, intrinsic :: iso_fortran_env, only: int64, real64
  use mpi_f08
  use ckptio
  implicit none
  real(real64) :: x(2, 3), back(2, 3)
  type(ckptio_file) :: f
  integer :: rank, nprocs
  character(len=1024) :: path
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs)
  call get_command_argument(1, path)
  x = rank + 0.5_real64
  call ckptio_create(trim(path), MPI_COMM_WORLD, f)
  call ckptio_write(f, 'x', x, [0_int64, int(3 * rank, int64)], [2_int64, int(3 * nprocs, int64)])
  call ckptio_close(f)
  call ckptio_open(trim(path), MPI_COMM_WORLD, f)
  call ckptio_read(f, 'x', back, offset=[0_int64, int(3 * rank, int64)])
  call ckptio_close(f)
  if (rank == 0 .and. all(back == x)) print '(a)', 'FORTRAN USER OK'
  call ckptio_finalize()
  call MPI_Finalize()
end program f_user
"""

# language: (CMake language/component, source name, source, target, pkg-config package, compiler, success line)
PROJECTS = {
    "C": ("C", "app.c", C_APP, "ckptio::ckptio_c", "ckptio", "mpicc", "C USER OK"),
    "Fortran": ("Fortran", "app.F90", F_APP, "ckptio::ckptio_f", "ckptio-fortran", "mpifort", "FORTRAN USER OK"),
}


@pytest.fixture(scope="module")
def build() -> Path:
    return ensure_build()


@pytest.fixture(scope="module")
def prefix(build, tmp_path_factory) -> Path:
    """An install of the build tree into a fresh prefix."""
    prefix = tmp_path_factory.mktemp("prefix")
    _run(["cmake", "--install", str(build), "--prefix", str(prefix)])
    return prefix


def _project(tmp_path: Path, language: str, components: str | None = None) -> Path:
    lang, source_name, source, target, *_ = PROJECTS[language]
    proj = tmp_path / f"{language.lower()}_user"
    proj.mkdir()
    (proj / source_name).write_text(source)
    (proj / "CMakeLists.txt").write_text(
        f"cmake_minimum_required(VERSION 3.18)\nproject(user LANGUAGES {lang})\n"
        f"find_package(ckptio REQUIRED COMPONENTS {components or lang})\n"
        f"add_executable(app {source_name})\ntarget_link_libraries(app PRIVATE {target})\n")
    return proj


def _cmake_build(proj: Path, package_arg: str) -> Path:
    compilers = ["-DCMAKE_C_COMPILER=mpicc", "-DCMAKE_Fortran_COMPILER=mpifort"]
    _run(["cmake", "-S", str(proj), "-B", str(proj / "build"), *compilers, package_arg], timeout=600)
    _run(["cmake", "--build", str(proj / "build")], timeout=600)
    return proj / "build" / "app"


def _pkg_config(pc_dir: Path, *args: str) -> list[str]:
    env = {**os.environ, "PKG_CONFIG_PATH": str(pc_dir)}
    return _run(["pkg-config", *args], env=env).stdout.split()


@pytest.mark.parametrize("language", ["C", "Fortran"])
@pytest.mark.parametrize("where", ["build_tree", "install"])
def test_single_language_project_with_cmake(build, prefix, tmp_path, language, where):
    if shutil.which("cmake") is None:
        pytest.skip("cmake not available")
    package_arg = f"-Dckptio_DIR={build}" if where == "build_tree" else f"-DCMAKE_PREFIX_PATH={prefix}"
    app = _cmake_build(_project(tmp_path, language), package_arg)
    proc = run_program(2, [app, tmp_path / "chk_000001"])
    assert PROJECTS[language][-1] in proc.stdout


@pytest.mark.parametrize("language", ["C", "Fortran"])
@pytest.mark.parametrize("where", ["build_tree", "install"])
def test_single_language_program_with_pkg_config(build, prefix, tmp_path, language, where):
    if shutil.which("pkg-config") is None:
        pytest.skip("pkg-config not available")
    _, source_name, source, _, package, compiler, ok = PROJECTS[language]
    pc_dir = build if where == "build_tree" else prefix / "lib" / "pkgconfig"
    flags = _pkg_config(pc_dir, "--cflags", "--libs", package)
    includes = [Path(f[2:]) for f in flags if f.startswith("-I")]
    wanted = "ckptio.h" if language == "C" else "ckptio.mod"
    assert any((d / wanted).exists() for d in includes), (flags, wanted)
    if language == "C":
        assert "-lckptio_f" not in flags, flags
    else:
        assert flags.index("-lckptio_f") < flags.index("-lckptio_c"), flags
    (tmp_path / source_name).write_text(source)
    _run([compiler, str(tmp_path / source_name), *flags, "-o", str(tmp_path / "app")])
    proc = run_program(2, [tmp_path / "app", tmp_path / "chk_000001"])
    assert ok in proc.stdout


def test_exported_targets_are_self_contained(build, prefix):
    """No exported target names Python3::Python or an MPI target (the config adds MPI per language)."""
    for directory in (build, prefix / "lib" / "cmake" / "ckptio"):
        files = sorted(directory.glob("ckptio*Targets*.cmake"))
        assert files, directory
        for f in files:
            text = f.read_text()
            assert "Python3::" not in text and "MPI::" not in text, f


def test_fortran_component_in_a_c_project_says_why(build, tmp_path):
    proj = _project(tmp_path, "C", components="Fortran")
    proc = _run_expect_failure(["cmake", "-S", str(proj), "-B", str(proj / "build"), "-DCMAKE_C_COMPILER=mpicc",
                                f"-Dckptio_DIR={build}"])
    assert "component Fortran needs the Fortran language" in proc, proc[-2000:]


def _run_expect_failure(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0, proc.stdout
    return proc.stdout + proc.stderr
