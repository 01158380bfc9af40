"""On the real CephFS (ci/cephfs.sh): a client's write error that Open MPI's OMPIO does not report.

CephFS through ceph-fuse answers ``SEEK_HOLE`` with the file's end, so data that never landed does not show as a
hole there, and before the commit read the checkpoint back, HDF5 and PnetCDF checkpoints with a lost write were
reported good on every rank (their restart then failed on the checksums). The commit reads such checkpoints back
(``ckptio.engine.commit.read_back``): every rank raises, nothing is left, and the next checkpoint, read back too,
commits.
(tests/faults/test_write_error_lost_by_mpiio.py has the same cases on a simulated file system.)"""

from __future__ import annotations

import pytest
from mpi_helpers import PROGRAMS, eio_preload, run_mpi

from ckptio.coord.hints import collective_write_errors_lost

pytestmark = [pytest.mark.cephfs, pytest.mark.mpi]
PROGRAM = str(PROGRAMS / "lost_write_error.py")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["hdf5", "pnetcdf"])
def test_a_lost_write_on_cephfs_fails_every_rank(cephdir, tmp_path, backend):
    env = {"LD_PRELOAD": eio_preload(tmp_path), "ROWS": "1024", "CKPTIO_HINTS": "cb_config_list=*:*"}
    proc = run_mpi(3, [PROGRAM, backend, str(cephdir), "1"], timeout=300, check=False, env=env)
    lines = proc.stdout.splitlines()
    report = proc.stdout + proc.stderr[-3000:]
    assert proc.returncode == 0, report
    assert sorted(line.split()[1] for line in lines if line.startswith("RAISED ")) == ["0", "1", "2"], report
    assert "LEFT" in lines, report  # (nothing left in the directory)
    assert sorted(line.split()[2] for line in lines if line.startswith("NEXT OK ")) == ["0", "1", "2"], report
    if collective_write_errors_lost(3):
        assert all("found by reading the checkpoint back before its commit" in line
                   for line in lines if line.startswith("RAISED ")), report
