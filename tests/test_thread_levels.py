"""The HDF5 and PnetCDF backends under the MPI thread levels and io components a Fortran/C host may choose.

Open MPI 4.1's OMPIO, in a process initialised below MPI_THREAD_MULTIPLE, corrupts collective writes made
through HDF5 and PnetCDF (see ckptio.coord.hints.collective_write_hazard). ckptio then switches those files to
independent transfers and says so. These tests write side-by-side tiles (the failing pattern) and read them back with
checksums verified, in each configuration.

The defect itself is intermittent (raw h5py collective tile writes with ckptio's hints, 1 MiB alignment and
early allocation at MPI_THREAD_SINGLE went wrong in 3 of 7 four-rank launches of 6 files each on the reference
machine, never under ROMIO or MPI_THREAD_MULTIPLE), so no test asserts that it occurs; ``ckptio`` through
collective transfers failed on the first file of the first launch, which is why the workaround exists.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mpi_helpers import PROGRAMS, mpi_flavour, run_mpi

PROGRAM = str(PROGRAMS / "thread_levels.py")  # the MPI program of these tests


def _result(stdout: str) -> dict:
    import json

    line = next(line for line in stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.split(" ", 1)[1])


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["hdf5", "pnetcdf"])
@pytest.mark.parametrize(("thread_level", "io", "transfer"), [
    ("single", None, "independent"),          # OMPIO below THREAD_MULTIPLE: the workaround
    ("funneled", None, "independent"),
    ("multiple", None, "collective"),         # mpi4py's default: collective buffering kept
    ("single", "romio321", "collective"),     # ROMIO is correct at any thread level
])
def test_tiles_round_trip_at_every_thread_level(tmp_path: Path, backend: str, thread_level: str, io: str | None,
                                                transfer: str) -> None:
    env = {"OMPI_MCA_io": io} if io else {}
    if mpi_flavour() != "openmpi":
        transfer = "collective"  # the hazard is Open MPI's OMPIO: MPICH-family MPIs run ROMIO at any thread level
    out = _result(run_mpi(4, [PROGRAM, "tiles", thread_level, str(tmp_path), backend], env=env).stdout)
    assert out["bad"] == 0, out
    assert out["transfer"] == transfer, out
    assert out["warned"] == (transfer == "independent"), out

