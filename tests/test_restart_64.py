"""N-to-M restart at 64 oversubscribed ranks (the distributed restart plan with many ranks per aggregator and
several aggregators per variable): checkpoints written by 6 ranks, read back by 64 in a different, 2-D
decomposition, for the native and the HDF5 backend, every element checked."""

import pytest
from mpi_helpers import PROGRAMS, run_mpi

PROGRAM = str(PROGRAMS / "restart_64.py")  # the MPI programs of this test


@pytest.mark.slow
def test_64_ranks_restart_what_6_wrote(tmp_path):
    proc = run_mpi(6, [PROGRAM, "write", str(tmp_path)], timeout=300)
    assert proc.stdout.count("WROTE") == 6, proc.stdout
    proc = run_mpi(64, [PROGRAM, "read", str(tmp_path)], timeout=900)
    assert proc.stdout.count("READ") == 64, proc.stdout[-3000:] + proc.stderr[-3000:]
