"""Reader defects found by the outside trial of the rewritten restart path, each fixed and tested here:

* a rank that is done with a Reader while the others still read left them in a collective forever; now every rank
  raises, naming the ranks that closed;
* a read after ``close()`` on one rank hung it alone; now it is a local ClosedCheckpointError;
* an undecodable compressed block was named by its file offset only;
* a damaged HDF5/netCDF signature was "not a checkpoint" for ``ckptio.open`` but "damaged" for ``inspect``.
"""

import pytest
from mpi_helpers import BACKENDS, run_script

LEAVE = r"""
import sys, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
path, backend, how = sys.argv[1], sys.argv[2], sys.argv[3]
with ckptio.create(path, comm, backend=backend) as ck:
    ck.write("a", np.full((4, 3), r, np.float64), offset=(4 * r, 0), global_shape=(4 * n, 3))
try:
    with ckptio.open(path, comm) as ck:
        ck.read("a")                        # every rank
        if r != 1:
            ck.read("a")                    # all but rank 1: rank 1 leaves the with block cleanly
            if how == "twice":
                ck.read("a")
    print("NOERROR", r, flush=True)
except ckptio.CheckpointError as exc:
    print("RAISED", r, type(exc).__name__, "rank 1" in str(exc) and "closed" in str(exc), flush=True)
# the communicator is still usable: nobody is stuck in a collective of the reader
assert comm.allreduce(1) == n
print("AFTER", r, flush=True)
"""

AFTER_CLOSE = r"""
import sys, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
with ckptio.create(sys.argv[1], comm) as ck:
    ck.write("a", np.arange(3.0) + r, offset=(3 * r,), global_shape=(3 * n,))
ck = ckptio.open(sys.argv[1], comm)
ck.read("a")
ck.close()
if r == 1:
    try:
        ck.read("a")
        print("READ-AFTER-CLOSE-ACCEPTED", flush=True)
    except ckptio.ClosedCheckpointError as exc:
        print("CLOSED", r, "after Reader.close()" in str(exc), flush=True)
assert comm.allreduce(1) == n
print("AFTER", r, flush=True)
"""


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nprocs,how", [(2, "once"), (3, "twice")])
def test_a_rank_that_closes_while_others_read_fails_everywhere(tmp_path, backend, nprocs, how):
    proc = run_script(nprocs, LEAVE, tmp_path, str(tmp_path / "chk"), backend, how, timeout=180)
    assert "NOERROR" not in proc.stdout, proc.stdout
    assert proc.stdout.count("RAISED") == nprocs, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.count(" True") == nprocs, proc.stdout  # every message names rank 1 as having closed
    assert proc.stdout.count("AFTER") == nprocs, proc.stdout


@pytest.mark.mpi
def test_read_after_close_on_one_rank_is_a_local_error(tmp_path):
    proc = run_script(3, AFTER_CLOSE, tmp_path, str(tmp_path / "chk"), timeout=180)
    assert "CLOSED 1 True" in proc.stdout and "ACCEPTED" not in proc.stdout, proc.stdout
    assert proc.stdout.count("AFTER") == 3, proc.stdout


UNDECODABLE = r"""
import sys, numpy as np, ckptio
from mpi4py import MPI
from ckptio.backends import detect_backend
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
path = sys.argv[1]
with ckptio.create(path, comm, compression="zstd") as ck:
    ck.write("x", np.arange(1000.0) + 1000 * r, offset=(1000 * r,), global_shape=(1000 * n,))
if r == 0:
    block = detect_backend(path).read_metadata(path)["variables"]["x"]["blocks"][1]
    with open(path, "r+b") as f:  # inside block 1's zstd frame header: the block cannot be decoded at all
        f.seek(block["file_offset"] + 5)
        byte = f.read(1)
        f.seek(block["file_offset"] + 5)
        f.write(bytes([byte[0] ^ 0xFF]))
comm.Barrier()
try:
    with ckptio.open(path, comm) as ck:
        ck.read("x")
    print("READ-OK", flush=True)
except ckptio.CorruptCheckpointError as exc:
    print("NAMED", r, f"{path}: variable 'x' block 1 (written by rank 1, offset [1000], shape [1000])" in str(exc),
          flush=True)
"""


@pytest.mark.mpi
def test_an_undecodable_compressed_block_is_named_like_a_checksum_mismatch(tmp_path):
    """Outside trial: a zstd block that cannot be decompressed was reported by file offset only."""
    proc = run_script(2, UNDECODABLE, tmp_path, str(tmp_path / "chk"), timeout=180)
    assert proc.stdout.count("NAMED") == 2 and proc.stdout.count(" True") == 2, proc.stdout + proc.stderr[-2000:]


DAMAGED_SIGNATURE = r"""
import sys, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
path, backend = sys.argv[1], sys.argv[2]
with ckptio.create(path, comm, backend=backend) as ck:
    ck.write("x", np.arange(1000.0) + 1000 * r, offset=(1000 * r,), global_shape=(1000 * n,))
if r == 0:
    with open(path, "r+b") as f:  # the format's signature overwritten (not all zeros, not one flipped bit)
        f.write(b"\x00" * 8)
comm.Barrier()
try:
    ckptio.open(path, comm)
    print("OPENED", flush=True)
except ckptio.CheckpointError as exc:
    print("ERROR", r, type(exc).__name__, flush=True)
"""


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["hdf5", "pnetcdf"])
def test_open_reports_a_damaged_signature_as_corrupt_like_inspect(tmp_path, backend):
    """Outside trial: with bytes 0-7 zeroed, ``ckptio inspect`` said "damaged checkpoint" but ``ckptio.open``
    said "not a ckptio checkpoint" (it skipped the diagnosis a directory scan skips for speed)."""
    proc = run_script(2, DAMAGED_SIGNATURE, tmp_path, str(tmp_path / "chk"), backend, timeout=180)
    assert proc.stdout.count("CorruptCheckpointError") == 2, proc.stdout + proc.stderr[-2000:]
