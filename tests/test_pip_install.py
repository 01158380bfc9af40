"""A user's install: `pip install <ckptio source>` into a fresh `python -m venv` (numpy, mpi4py, ... from pip's
usual sources, no editable install, no ci/install.sh), then a native-backend checkpoint written and read under
mpirun from that venv and `ckptio inspect --verify`; `ckptio-install-parallel` prints the exact commands that make
the HDF5 and PnetCDF backends writable, or names what to set; it patches pnetcdf-python's sources so they compile
against Open MPI; the install writes nothing into the source tree; the `[xarray]` extra brings an engine for the
files themselves; and (slow) it builds pnetcdf-python into the fresh venv, which then writes a PnetCDF checkpoint.

Measured on the 2-core reference machine under load: the venv and the install ~20 s; the pnetcdf build ~100 s."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_helpers import PROGRAMS, REPO, mpi_env, run_program

# Run by the fresh venv's Python: every rank writes 4 values and reads the whole array back
PROGRAM = str(PROGRAMS / "pip_install.py")


NOT_SOURCE = shutil.ignore_patterns(".venv*", "build", ".git", "__pycache__", ".pytest_cache", ".ruff_cache",
                                    ".hypothesis", "bench_results", "*.egg-info")


def run(cmd: list[str], timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``cmd`` from / (never the source tree, whose ckptio/ `python -m` would import instead)."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env=env if env is not None else mpi_env(), cwd="/")


def tree(root: Path) -> dict[str, int]:
    """Every file and directory under ``root`` (relative path -> size, -1 for a directory)."""
    return {p.relative_to(root).as_posix(): (-1 if p.is_dir() else p.stat().st_size) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv with ckptio pip-installed from a copy of the source tree (a copy, so that the test runs on
    a tree with no build products whatever the repository holds). The install must leave that tree exactly as it
    was: no build/, no ckptio.egg-info (issue 27, item 7: ci/build_backend.py builds in a temporary copy)."""
    d = tmp_path_factory.mktemp("pip_install")
    shutil.copytree(REPO, d / "src", ignore=NOT_SOURCE)
    before = tree(d / "src")
    env = {k: v for k, v in mpi_env().items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    proc = run([sys.executable, "-m", "venv", str(d / "venv")], env=env)
    assert proc.returncode == 0, proc.stderr
    proc = run([str(d / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", str(d / "src")], env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = tree(d / "src")
    assert after == before, f"pip install wrote into the source tree: {sorted(set(after) ^ set(before))[:10]}"
    return d / "venv"


def venv_env(venv: Path, **extra: str) -> dict[str, str]:
    """The job environment with the fresh venv first on PATH instead of the test's own venv."""
    env = mpi_env({"MPICC": "mpicc", **extra})
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"  # mpi_env put the test venv first: the fresh one goes before it
    env.pop("PYTHONPATH", None)
    return env


def write_under_mpirun(venv: Path, tmp_path: Path, backend: str) -> Path:
    path = tmp_path / f"ck.{backend}"
    proc = run_program(2, [str(venv / "bin" / "python"), PROGRAM, "write", str(path), backend], env=venv_env(venv),
                       cwd=tmp_path)
    assert proc.stdout.count("OK") == 2, proc.stdout + proc.stderr
    assert f"OK {venv}/lib/" in proc.stdout  # the pip-installed copy, not the source tree
    proc = run([str(venv / "bin" / "ckptio"), "inspect", "--verify", str(path)], env=venv_env(venv))
    assert proc.returncode == 0 and "complete and verified" in proc.stdout, proc.stdout + proc.stderr
    return path


@pytest.mark.mpi
def test_a_pip_install_into_a_fresh_venv_writes_reads_and_verifies(venv, tmp_path):
    proc = run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"], env=venv_env(venv))
    installed = {line.split("==")[0].lower() for line in proc.stdout.split()}
    assert {"ckptio", "numpy", "mpi4py"} <= installed and "h5py" not in installed
    assert not list(venv.parent.glob("src/*.egg-info")) and not (venv.parent / "src" / "build").exists()
    path = write_under_mpirun(venv, tmp_path, "mpiio")
    proc = run([str(venv / "bin" / "ckptio"), "convert", str(path), str(tmp_path / "x_hdf5_chk_0000"), "--to",
                "flash"], env=venv_env(venv))  # no h5py in this venv: the command to run is named
    assert proc.returncode == 2 and "needs h5py" in proc.stderr and "pip install h5py" in proc.stderr, proc.stderr
    proc = run([str(venv / "bin" / "python"), "-m", "ckptio", "--version"], env=venv_env(venv))
    assert proc.returncode == 0 and "0.1.0" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.mpi
def test_install_parallel_prints_the_exact_commands_or_names_what_to_set(venv):
    tool = str(venv / "bin" / "ckptio-install-parallel")
    proc = run([tool, "hdf5", "--dry-run"], env=venv_env(venv, HDF5_DIR="/opt/phdf5"))
    assert proc.returncode == 0, proc.stderr
    build = [line for line in proc.stdout.splitlines() if "h5py==" in line]
    assert build == [f"HDF5_MPI=ON CC=mpicc HDF5_DIR=/opt/phdf5 {venv}/bin/python -m pip --disable-pip-version-check "
                     "install --no-binary=h5py --no-build-isolation --no-cache-dir --force-reinstall --no-deps "
                     "h5py==3.16.0"], proc.stdout
    assert "'Cython>=3'" in proc.stdout.splitlines()[0]  # --no-build-isolation: prerequisites first
    env = venv_env(venv)
    for k in ("HDF5_DIR", "HDF5_PKGCONFIG_NAME"):
        env.pop(k, None)
    proc = run([tool, "hdf5", "--dry-run"], env=env)  # neither set: Debian's layout for Open MPI's mpicc
    assert proc.returncode == 0, proc.stderr
    assert "HDF5_MPI=ON CC=mpicc HDF5_PKGCONFIG_NAME=hdf5-openmpi " in proc.stdout, proc.stdout
    proc = run([tool, "pnetcdf", "--dry-run"], env=venv_env(venv, MPICC="/nonexistent/mpicc"))
    assert proc.returncode == 2 and "MPICC=/nonexistent/mpicc is not on PATH" in proc.stderr, proc.stderr
    proc = run([tool, "pnetcdf", "--dry-run"], env=venv_env(venv, PNETCDF_DIR="/nonexistent"))
    assert proc.returncode == 2 and "no /nonexistent/bin/pnetcdf-config" in proc.stderr, proc.stderr
    proc = run([tool, "pnetcdf", "--dry-run"], env=env)
    assert proc.returncode == 0 and "# patch pnetcdf-python 1.0.0" in proc.stdout, proc.stderr


def test_the_pnetcdf_patch_takes_mpi_handles_from_mpi4py_and_refuses_other_sources(tmp_path):
    from ckptio.tools.install_parallel import PNETCDF_VERSION, InstallError, patch_pnetcdf

    proc = run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:", "--no-build-isolation",
                "-d", str(tmp_path), f"pnetcdf=={PNETCDF_VERSION}"])
    assert proc.returncode == 0, proc.stderr
    shutil.unpack_archive(tmp_path / f"pnetcdf-{PNETCDF_VERSION}.tar.gz", tmp_path)
    root = tmp_path / f"pnetcdf-{PNETCDF_VERSION}"
    assert "    ctypedef int MPI_Comm\n" in (root / "include/PnetCDF.pxi").read_text()
    patch_pnetcdf(root)
    pxi = (root / "include/PnetCDF.pxi").read_text()
    assert "ctypedef int MPI_" not in pxi and "from mpi4py.libmpi cimport MPI_Comm, MPI_Info" in pxi
    assert "'S1' : MPI.CHAR" in (root / "src/pnetcdf/_utils.pyx").read_text()
    assert "(<Datatype?>buftype).ob_mpi" in (root / "src/pnetcdf/_Variable.pyx").read_text()
    before = {p: p.read_bytes() for p in root.rglob("*.p*") if p.is_file()}
    with pytest.raises(InstallError, match="ctypedef int MPI_Comm"):
        patch_pnetcdf(root)  # already patched: not the expected sources, and nothing is written
    assert {p: p.read_bytes() for p in before} == before
    # the same patch for build scripts, by path, before ckptio is installed (standard library only)
    fresh = tmp_path / "fresh"
    shutil.unpack_archive(tmp_path / f"pnetcdf-{PNETCDF_VERSION}.tar.gz", fresh)
    script = REPO / "ckptio" / "tools" / "install_parallel.py"
    proc = run([sys.executable, "-I", str(script), "pnetcdf", "--patch-only", str(fresh / root.name)])
    assert proc.returncode == 0, proc.stderr
    assert (fresh / root.name / "include/PnetCDF.pxi").read_text() == pxi
    proc = run([sys.executable, "-I", str(script), "pnetcdf", "--patch-only", str(fresh / root.name)])
    assert proc.returncode == 2 and "not pnetcdf-python 1.0.0" in proc.stderr, proc.stderr


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_install_parallel_builds_pnetcdf_into_the_fresh_venv_and_it_writes(venv, tmp_path):
    # -O0: what is tested is that the steps build, install and write, not the module's speed; gcc takes ~6x less
    # time on pnetcdf-python's Cython output than at Python's -O3 -g (ci/install.sh, CKPTIO_EXT_CFLAGS)
    proc = run([str(venv / "bin" / "ckptio-install-parallel"), "pnetcdf"], timeout=1100,
               env=venv_env(venv, CFLAGS="-O0 -g0"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "pnetcdf installed and checked" in proc.stdout
    write_under_mpirun(venv, tmp_path, "pnetcdf")


def test_xarray_extra_brings_an_engine_for_hdf5_and_netcdf_checkpoints():
    """``pip install ckptio[xarray]`` must bring an engine that opens the HDF5 and CDF-5 files themselves
    (netCDF4 reads both; h5netcdf would read HDF5 only), not only xarray."""
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!~\[ ]", req, maxsplit=1)[0].lower() for req in extras["xarray"]}
    assert {"xarray", "netcdf4"} <= names, extras["xarray"]
