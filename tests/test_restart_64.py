"""N-to-M restart at 64 oversubscribed ranks (the distributed restart plan with many ranks per aggregator and
several aggregators per variable): checkpoints written by 6 ranks, read back by 64 in a different, 2-D
decomposition, for the native and the HDF5 backend, every element checked."""

import pytest
from mpi_helpers import run_script

WRITE = r"""
import sys, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
G = (97, 12, 5)
cuts = [0, 9, 30, 31, 55, 80, 97]          # uneven leading-axis blocks, one per writer
lo, hi = cuts[r], cuts[r + 1]
full = np.arange(np.prod(G), dtype=np.float64).reshape(G)
for backend in ("mpiio", "hdf5"):
    with ckptio.create(f"{sys.argv[1]}/{backend}", comm, backend=backend) as ck:
        ck.write("u", full[lo:hi].copy(), offset=(lo, 0, 0), global_shape=G)
        ck.write("seg", np.arange(r * 10, r * 10 + r + 2, dtype=np.int32))
        if r == 0:
            ck.write("t", np.array(3.5), offset=(), global_shape=())
print("WROTE", r, flush=True)
"""

READ = r"""
import sys, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
G = (97, 12, 5)
full = np.arange(np.prod(G), dtype=np.float64).reshape(G)
# readers: an 8 x 8 grid over axes 0 and 1 (some boxes empty, none aligned with the writers' blocks)
i, j = divmod(r, 8)
a0, a1 = i * G[0] // 8, (i + 1) * G[0] // 8
b0, b1 = j * G[1] // 8, (j + 1) * G[1] // 8
for backend in ("mpiio", "hdf5"):
    with ckptio.open(f"{sys.argv[1]}/{backend}", comm, aggregators=8) as ck:
        assert len(ck.aggregators) == 8
        got, seg, whole, t = ck.read_many([("u", (a0, b0, 0), (a1 - a0, b1 - b0, 5)), ("seg", None, None),
                                           ("u", (r % 97, 0, 0), (1, 12, 5)), ("t", None, None)])
        assert (got == full[a0:a1, b0:b1]).all(), (backend, r)
        assert (whole == full[r % 97:r % 97 + 1]).all(), (backend, r)
        assert float(t) == 3.5
        writer = r * 6 // n
        if (r + 1) * 6 // n > writer:  # this reader gets writer `writer`'s segment
            assert (seg == np.arange(writer * 10, writer * 10 + writer + 2)).all(), (backend, r, seg)
        else:
            assert seg.size == 0, (backend, r, seg)
        assert ck.stats.rounds >= 1
        assert ck.stats.aggregator == (r in ck.aggregators) and ck.stats.host == MPI.Get_processor_name()
print("READ", r, flush=True)
"""


@pytest.mark.slow
def test_64_ranks_restart_what_6_wrote(tmp_path):
    proc = run_script(6, WRITE, tmp_path, str(tmp_path), timeout=300)
    assert proc.stdout.count("WROTE") == 6, proc.stdout
    proc = run_script(64, READ, tmp_path, str(tmp_path), timeout=900)
    assert proc.stdout.count("READ") == 64, proc.stdout[-3000:] + proc.stderr[-3000:]
