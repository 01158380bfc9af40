"""The HDF5 and PnetCDF backends under the MPI thread levels and io components a Fortran/C host may choose.

Open MPI 4.1's OMPIO, in a process initialised below MPI_THREAD_MULTIPLE, corrupts collective writes made
through HDF5 and PnetCDF (see ckptio.hints.collective_write_hazard). ckptio then switches those files to
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
from mpi_helpers import mpi_flavour, run_script

TILES = r'''
import json, sys, warnings
import mpi4py
mpi4py.rc.thread_level = sys.argv[1]
from mpi4py import MPI
import numpy as np
import ckptio

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng(rank)
bad = 0
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for trial in range(4):
        path = f"{sys.argv[2]}/tiles{trial}"
        w = ckptio.create(path, comm, backend=sys.argv[3])
        mine = {}
        for v, (rows, cols) in enumerate([(8, 8), (16, 24), (3, 5), (100, 7)]):
            left, right = rng.random((rows, cols)), rng.random((rows, cols))
            w.write(f"v{v}", left, offset=(rows * rank, 0), global_shape=(rows * size, 2 * cols))
            w.write(f"v{v}", right, offset=(rows * rank, cols), global_shape=(rows * size, 2 * cols))
            mine[f"v{v}"] = np.concatenate([left, right], axis=1)
        w.close()
        with ckptio.open(path, comm) as r:
            ok = all(np.array_equal(r.read(k, offset=(x.shape[0] * rank, 0), shape=x.shape), x)
                     for k, x in mine.items())
            transfer = r.meta["hints"]["effective"].get(f"ckptio_{sys.argv[3]}_transfer")
        bad += comm.allreduce(0 if ok else 1)
if rank == 0:
    print("RESULT", json.dumps({"thread": MPI.Query_thread(), "bad": bad, "transfer": transfer,
                                "warned": any("independent data transfers" in str(c.message) for c in caught)}))
'''



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
    out = _result(run_script(4, TILES, tmp_path, thread_level, str(tmp_path), backend, env=env).stdout)
    assert out["bad"] == 0, out
    assert out["transfer"] == transfer, out
    assert out["warned"] == (transfer == "independent"), out

