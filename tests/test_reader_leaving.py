"""Reader defects found by the outside trial of the rewritten restart path, each fixed and tested here:

* a rank that is done with a Reader while the others still read left them in a collective forever; now every rank
  raises, naming the ranks that closed;
* a read after ``close()`` on one rank hung it alone; now it is a local ClosedCheckpointError;
* an undecodable compressed block was named by its file offset only;
* a damaged HDF5/netCDF signature was "not a checkpoint" for ``ckptio.open`` but "damaged" for ``inspect``.
"""

import pytest
from mpi_helpers import BACKENDS, PROGRAMS, run_mpi

PROGRAM = str(PROGRAMS / "reader_leaving.py")  # the MPI programs of these tests


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nprocs,how", [(2, "once"), (3, "twice")])
def test_a_rank_that_closes_while_others_read_fails_everywhere(tmp_path, backend, nprocs, how):
    proc = run_mpi(nprocs, [PROGRAM, "leave", str(tmp_path / "chk"), backend, how], timeout=180)
    assert "NOERROR" not in proc.stdout, proc.stdout
    assert proc.stdout.count("RAISED") == nprocs, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.count(" True") == nprocs, proc.stdout  # every message names rank 1 as having closed
    assert proc.stdout.count("AFTER") == nprocs, proc.stdout


@pytest.mark.mpi
def test_read_after_close_on_one_rank_is_a_local_error(tmp_path):
    proc = run_mpi(3, [PROGRAM, "after_close", str(tmp_path / "chk")], timeout=180)
    assert "CLOSED 1 True" in proc.stdout and "ACCEPTED" not in proc.stdout, proc.stdout
    assert proc.stdout.count("AFTER") == 3, proc.stdout


@pytest.mark.mpi
def test_a_readers_own_error_fails_every_rank_and_a_read_after_others_closed_is_local(tmp_path):
    """``read_many(error=...)`` (what the C/Fortran bindings pass for a bad buffer) fails every rank in the read's
    first phase and leaves the reader usable; after some ranks closed the reader during a read, the next read
    on the others fails at once instead of waiting in a collective the closed ranks never enter (outside trial
    14 hung C ranks there), and their close still returns."""
    proc = run_mpi(3, [PROGRAM, "read_on", str(tmp_path / "chk")], timeout=120)
    out = proc.stdout
    assert out.count("ERRORARG") == 3 and "IGNORED" not in out and out.count("USABLE") == 3, out
    assert out.count(" True") == 3 + 3 + 4, out  # ERRORARG, USABLE, FAILED1 and FAILED2 on ranks 0 and 2
    assert out.count("FAILED1") == 2 and out.count("CollectiveClosedCheckpointError True") == 2, out
    assert out.count("FAILED2") == 2 and out.count(" ClosedCheckpointError True") == 2, out
    assert "READ " not in out and out.count("AFTER") == 3, out


@pytest.mark.mpi
def test_an_undecodable_compressed_block_is_named_like_a_checksum_mismatch(tmp_path):
    """Outside trial: a zstd block that cannot be decompressed was reported by file offset only."""
    proc = run_mpi(2, [PROGRAM, "undecodable", str(tmp_path / "chk")], timeout=180)
    assert proc.stdout.count("NAMED") == 2 and proc.stdout.count(" True") == 2, proc.stdout + proc.stderr[-2000:]


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["hdf5", "pnetcdf"])
def test_open_reports_a_damaged_signature_as_corrupt_like_inspect(tmp_path, backend):
    """Outside trial: with bytes 0-7 zeroed, ``ckptio inspect`` said "damaged checkpoint" but ``ckptio.open``
    said "not a ckptio checkpoint" (it skipped the diagnosis a directory scan skips for speed)."""
    proc = run_mpi(2, [PROGRAM, "damaged_signature", str(tmp_path / "chk"), backend], timeout=180)
    assert proc.stdout.count("CorruptCheckpointError") == 2, proc.stdout + proc.stderr[-2000:]
