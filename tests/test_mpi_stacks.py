"""ckptio on the MPI-IO implementations of real machines: ROMIO (MPICH family, Open MPI's romio321) and OMPIO.

* the MPI datatypes ckptio builds are classic (no MPI-4 large-count combiners, which ROMIO up to MPICH 4.0.x
  cannot flatten) and file pieces reach the file view in offset order, on whatever MPI runs these tests;
* the conformance suite in the background modes at 1, 2 and 8 (oversubscribed) ranks (the 4-rank runs are in
  tests/test_async_series.py, the sync ones in tests/test_conformance.py);
* a checkpoint written under one MPI stack restarts under the other, both directions, every backend available on
  both (the formats do not depend on the MPI);
* the two stacks do not disturb each other: Debian's default mpi/mpirun stay Open MPI, the MPICH venv launches
  with MPICH's Hydra and its h5py links MPICH's HDF5.

The stacks: the default venv (``.venv``, Open MPI) and ``make install MPI=mpich`` (``.venv-mpich``), or the venvs
named by ``CKPTIO_OPENMPI_VENV`` / ``CKPTIO_MPICH_VENV``. Tests that need the stack not running them skip when
its venv is missing, unless ``CKPTIO_REQUIRE_STACKS=1`` (set by .ci/run), where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_helpers import (
    BACKENDS,
    OVERSUBSCRIBED,
    PROGRAMS,
    REPO,
    mpi_env,
    mpi_flavour,
    parse_cases,
    run_mpi,
    run_program,
)

from ckptio.testing import CASES

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(900)]

STACKS = ("openmpi", "mpich")
PROGRAM = str(PROGRAMS / "mpi_stacks.py")  # the MPI programs of these tests


def stack_venv(name: str) -> Path:
    default = REPO / (".venv" if name == "openmpi" else ".venv-mpich")
    return Path(os.environ.get(f"CKPTIO_{name.upper()}_VENV", default))


def require_stack(name: str) -> Path:
    venv = stack_venv(name)
    if not (venv / "bin" / "python").exists():
        why = f"the {name} stack's venv {venv} is missing (make install MPI={name})"
        if os.environ.get("CKPTIO_REQUIRE_STACKS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return venv


def stack_launcher(venv: Path) -> str:
    """The venv's own mpirun (MPICH stack), else the system's (Open MPI through update-alternatives)."""
    own = venv / "bin" / "mpirun"
    if own.exists():
        return str(own)
    system = shutil.which("mpirun", path="/usr/local/bin:/usr/bin:/bin")
    assert system, "no system mpirun"
    return system


def stack_backends(venv: Path) -> set[str]:
    out = subprocess.run([str(venv / "bin" / "python"), "-c", "import mpi4py; mpi4py.rc.initialize = False\n"
                          "from ckptio.backends import available_backends; print(' '.join(available_backends()))"],
                         capture_output=True, text=True, timeout=120, check=True, cwd="/").stdout
    return set(out.split())


def run_on_stack(venv: Path, nprocs: int, args: list[str]) -> subprocess.CompletedProcess:
    env = {"CKPTIO_MPIEXEC": stack_launcher(venv), "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}"}
    env.pop("OMPI_MCA_io", None)
    return run_program(nprocs, [str(venv / "bin" / "python"), *args], env=env, timeout=400, check=False)


# --------------------------------------------------------------------------------- datatypes and views

@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_classic_datatypes_and_file_order(nprocs, tmp_path):
    """Under MPICH 4.0 the old code (mpi4py's Create_hindexed) aborted in ROMIO's flatten.c here."""
    proc = run_mpi(nprocs, [PROGRAM, "datatypes", str(tmp_path / "f.bin")])
    assert proc.stdout.count("OK") == nprocs, proc.stdout + proc.stderr


# ------------------------------------------------------------------- conformance in background modes
_RESULTS: dict = {}


@pytest.mark.matrix
@pytest.mark.parametrize("nprocs", [2, OVERSUBSCRIBED])
@pytest.mark.parametrize("mode", ["async", "staged"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_conformance_background_modes_rank_counts(backend, mode, nprocs, tmp_path_factory):
    """Every case of the conformance suite, every checkpoint written async or staged (at 2 ranks and the
    oversubscribed count: 8 on 2 cores, 5 under MPICH); one job per (backend, mode, nprocs). With test_async_series'
    4-rank jobs the matrix runs the background modes at 2, 4 and the oversubscribed count (1 rank, no exchange
    between ranks, runs in make test)."""
    key = (backend, mode, nprocs)
    if key not in _RESULTS:
        d = tmp_path_factory.mktemp(f"bg_{backend}_{mode}_{nprocs}")
        proc = run_mpi(nprocs, ["-m", "ckptio.testing", "--backend", backend, "--outdir", str(d), "--mode", mode],
                       timeout=400, check=False)
        _RESULTS[key] = parse_cases(proc.stdout) or {"*": f"exit {proc.returncode}: {proc.stderr[-3000:]}"}
    results = _RESULTS[key]
    failed = {c: v for c, v in results.items() if v != "PASS"}
    assert not failed, failed
    assert sorted(results) == sorted(name for name, _ in CASES), results


# ----------------------------------------------------------------------------- across MPI stacks
@pytest.mark.parametrize(("writer", "reader"), [("openmpi", "mpich"), ("mpich", "openmpi")])
def test_checkpoint_written_under_one_mpi_restarts_under_the_other(writer, reader, tmp_path):
    """The N-to-M checkpoint of the conformance suite: 3 writers under one MPI, then 2 readers under the other,
    every block compared with its expected value, for every backend both stacks have."""
    wvenv, rvenv = require_stack(writer), require_stack(reader)
    backends = stack_backends(wvenv) & stack_backends(rvenv)
    assert {"mpiio", "hdf5"} <= backends, backends
    for backend in sorted(backends):
        d = tmp_path / backend
        d.mkdir()
        w = run_on_stack(wvenv, 3, ["-m", "ckptio.testing", "--backend", backend, "--outdir", str(d), "--write-nm"])
        assert "SUMMARY 1 passed, 0 failed" in w.stdout, f"{backend} write on {writer}:\n{w.stdout}{w.stderr[-3000:]}"
        r = run_on_stack(rvenv, 2, ["-m", "ckptio.testing", "--backend", backend, "--outdir", str(d),
                                    "--read-nm", "3"])
        assert "SUMMARY 1 passed, 0 failed" in r.stdout, f"{backend} read on {reader}:\n{r.stdout}{r.stderr[-3000:]}"


def test_pnetcdf_on_both_stacks():
    """PnetCDF is built against MPICH by ci/install.sh (Debian's is Open MPI only), so no backend is lost."""
    for name in STACKS:
        assert "pnetcdf" in stack_backends(require_stack(name)), name


# --------------------------------------------------------------------------- stacks kept apart
@pytest.mark.skipif(shutil.which("update-alternatives") is None, reason="Debian's alternatives system only")
def test_system_default_mpi_stays_open_mpi():
    """Installing MPICH (make install MPI=mpich) must not move Debian's mpi/mpirun alternatives off Open MPI."""
    require_stack("mpich")
    for name, want in (("mpirun", "/usr/bin/mpirun.openmpi"), ("mpi", "/usr/bin/mpicc.openmpi")):
        query = subprocess.run(["update-alternatives", "--query", name], capture_output=True, text=True).stdout
        assert f"Value: {want}" in query, query


def test_mpich_venv_is_self_consistent():
    """The MPICH venv launches with MPICH's Hydra, its mpi4py runs on MPICH and its h5py links MPICH's HDF5."""
    venv = require_stack("mpich")
    assert os.path.realpath(venv / "bin" / "mpirun") == os.path.realpath("/usr/bin/mpirun.mpich")
    code = ("import mpi4py; mpi4py.rc.initialize = False\nfrom mpi4py import MPI; import h5py.defs as o\n"
            "print(MPI.Get_library_version().split()[0]); print(o.__file__)")
    lib, so = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True,
                             timeout=120, check=True, cwd="/").stdout.split()[:2]
    assert lib == "MPICH", lib
    ldd = subprocess.run(["ldd", so], capture_output=True, text=True, check=True).stdout
    hdf5 = next(line.split()[2] for line in ldd.splitlines() if line.split()[0].startswith("libhdf5"))
    assert os.path.realpath(hdf5) == os.path.realpath("/usr/lib/x86_64-linux-gnu/hdf5/mpich/libhdf5.so"), ldd
    assert "openmpi" not in ldd and "libmpi.so.40" not in ldd, ldd


def test_launcher_matches_this_interpreter():
    """tests/mpi_helpers.py launches with the mpiexec of the MPI this venv's mpi4py uses (one job of N ranks,
    not N singletons): the selection point every MPI test goes through."""
    proc = run_mpi(2, [PROGRAM, "size"])
    assert sorted(proc.stdout.split("\n"))[-2:] == ["SIZE 2 0", "SIZE 2 1"], proc.stdout
    flavour = mpi_flavour()
    launcher = Path(mpi_env()["PATH"].split(":")[0]) / "mpirun"
    if flavour == "mpich":
        assert os.path.realpath(launcher) == os.path.realpath("/usr/bin/mpirun.mpich"), launcher
    else:
        assert not launcher.exists() or "openmpi" in os.path.realpath(launcher), launcher
    assert sys.executable.startswith(str(Path(mpi_env()["PATH"].split(":")[0]).parent))


def test_missing_pnetcdf_is_reported_clearly(tmp_path):
    """Without PnetCDF (cluster install without PNETCDF_DIR) the pnetcdf backend is refused on every rank with the
    reason, and the other backends work."""
    proc = run_mpi(2, [PROGRAM, "no_pnetcdf", str(tmp_path)])
    # on every rank, in close() (a rank that raised in create() would leave); counted, not split into lines:
    # MPICH's Hydra may interleave two ranks' output on one line
    assert proc.stdout.count("REFUSED checkpoint") == 2, proc.stdout
    for rank in (0, 1):  # the collective error names each rank, the library and how to install it
        assert f"rank {rank}: CapabilityError: backend 'pnetcdf' cannot write here: pnetcdf-python is not " \
               "installed" in proc.stdout, proc.stdout
    assert proc.stdout.count("OK") == 2, proc.stdout
