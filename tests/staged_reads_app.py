"""MPI program of tests/test_staged_reads.py: a staged checkpoint read back through the distributed directory
(ckptio.model.staged_directory) must give exactly what the drained file gives through the two-phase Reader.

    mpirun -n P python tests/staged_reads_app.py OUTDIR STAGE

Variables: ``dens`` (3-D float64, two blocks per rank along the first axis), ``flags`` (2-D big-endian int32,
one block per rank), ``tracers`` (a per-rank segment of ``r % 3`` rows of 4 float32: rank 0 has none). Reads: a
box shifted across the writers' blocks, the whole array on one rank only, a strided ``out=`` view, overlapping
requests in one call, the own segment by default, the whole segment variable, an empty request. Prints
``STAGED READS OK <rank> <bytes received> <messages>`` on every rank.
"""

from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

import ckptio

comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
out, stage = sys.argv[1], sys.argv[2]
path = os.path.join(out, "chk_000001")

DENS = (6 * n, 5, 3)
FLAGS = (4 * n, 7)
dens = np.arange(np.prod(DENS), dtype=np.float64).reshape(DENS)
flags = (np.arange(np.prod(FLAGS), dtype=np.int64).reshape(FLAGS) * 7 - 1000).astype(">i4")
tracers = [np.arange((q % 3) * 4, dtype=np.float32).reshape(q % 3, 4) + 100 * q for q in range(n)]
every_tracer = np.concatenate(tracers)

with ckptio.create(path, comm, stage_dir=stage, attrs={"step": 1}) as w:
    w.write("dens", dens[6 * r:6 * r + 2], offset=(6 * r, 0, 0), global_shape=DENS)
    w.write("dens", dens[6 * r + 2:6 * r + 6], offset=(6 * r + 2, 0, 0), global_shape=DENS)
    w.write("flags", flags[4 * r:4 * r + 4], offset=(4 * r, 0), global_shape=FLAGS)
    w.write("tracers", tracers[r])
w.wait()


def reads(ck) -> dict[str, np.ndarray]:
    got = {}
    lo = (3 * r + 1) % DENS[0]
    count = min(7, DENS[0] - lo)
    got["shifted"] = ck.read("dens", offset=(lo, 1, 0), shape=(count, 3, 3))
    got["whole_on_last"] = ck.read("dens", offset=(0, 0, 0), shape=DENS if r == n - 1 else (0, 5, 3))
    halo = np.full((count + 2, 5, 5), -1.0)
    ck.read("dens", offset=(lo, 0, 0), shape=(count, 5, 3), out=halo[1:-1, :, 1:-1])
    got["strided_out"] = halo.copy()
    a, b, c = ck.read_many([("flags", (r, 0), (4, 7)), ("flags", (min(r + 2, 4 * n - 3), 3), (3, 4)),
                            ("flags", None, None)])
    got["flags_a"], got["flags_b"], got["flags_whole"] = a, b, c
    got["own_segment"] = ck.read("tracers")
    got["all_tracers"] = ck.read("tracers", offset=(0, 0), shape=(len(every_tracer), 4))
    got["next_rank"] = ck.read("dens", offset=(6 * ((r + 1) % n) + 2, 0, 0), shape=(4, 5, 3))
    return got


with ckptio.open(path, comm, stage_dir=stage) as ck:
    assert type(ck).__name__ == "StagedReader", type(ck)
    assert ck.attrs == {"step": 1}
    v = ck.variables
    assert v["dens"].shape == DENS and v["flags"].dtype == np.dtype("=i4") and v["tracers"].shape == every_tracer.shape
    assert v["dens"].nblocks == 2 * n and v["tracers"].nblocks == n
    staged = reads(ck)
    stats = ck.stats.to_json()
with ckptio.open(path, comm) as ck:
    assert type(ck).__name__ == "Reader", type(ck)
    drained = reads(ck)
for key, value in staged.items():
    assert value.dtype == drained[key].dtype and value.shape == drained[key].shape, key
    assert np.array_equal(value, drained[key]), (key, value, drained[key])
# and against the values written
assert np.array_equal(staged["flags_whole"], flags.astype(np.int32))
assert np.array_equal(staged["own_segment"], tracers[r]) and np.array_equal(staged["all_tracers"], every_tracer)
assert (r != n - 1) or np.array_equal(staged["whole_on_last"], dens)
# a bad verify= on the last rank only: the same clear error on every rank, no hang (the staged path agrees on it)
try:
    ckptio.open(path, comm, stage_dir=stage, verify="no" if r == n - 1 else True)
except ckptio.CheckpointError as exc:
    assert "verify='no'" in str(exc) and "give True or False" in str(exc), exc
else:
    raise AssertionError("verify='no' on one rank was accepted")
print("STAGED READS OK", r, stats["bytes_received"], stats["messages"], flush=True)
