"""The MPI programs of ``tests/test_memory_selections.py``
(``mpirun -n P python memory_selections.py CASE ARGS...``).

* ``halo BACKEND PATH sync|async|zstd|staged``: strided views (a halo'd interior, columns, every other plane, a
  Fortran-order array) written in place, read back, every block's checksum verified by rank 0, no guard cell in
  the file; prints ``OK <backend> <mode> <rank>``. Also run by the MPICH stack's venv: it uses nothing of
  ``tests/`` but ``internals``;
* ``no_copy BACKEND PATH`` (one rank): an 8 MiB interior written; prints ``PEAK <bytes> <interior bytes>``
  (tracemalloc's peak while writing).
* ``no_copy_ranks BACKEND PATH`` (any ranks): every rank writes an 8 MiB interior of its own; every rank prints
  ``PEAK <rank> <bytes> <interior bytes>`` (run it with fewer write aggregators than ranks: the others send).
"""

from __future__ import annotations

import sys
import tracemalloc

import internals
import numpy as np

import ckptio


def halo(comm, backend: str, path: str, mode: str) -> None:
    r, p = comm.rank, comm.size
    g, n = 2, (3, 4, 5)
    full = np.full((n[0] + 2 * g, n[1] + 2 * g, n[2] + 2 * g), -7.0)  # guard cells hold -7: must not be stored
    interior = full[g:-g, g:-g, g:-g]
    interior[...] = np.arange(np.prod(n)).reshape(n) + 1000 * r
    cols = np.full((6, 10), -1, np.int32)[1:5, 2:9]
    cols[...] = np.arange(28).reshape(4, 7) + 100 * r
    planes = np.zeros((2 * n[0], 2, 5))[::2, :, 1:4]  # every other plane: runs of one row
    planes[...] = r + np.arange(planes.size).reshape(planes.shape)
    fortran = np.asfortranarray(np.arange(12.0).reshape(3, 4) + r)  # gathered (one C-order copy)
    options = {"async": {"mode": "async"}, "zstd": {"compression": "zstd"}, "staged": {"stage_dir": path + ".stage"}}
    kw = options.get(mode, {})
    ck = ckptio.create(path, comm, backend=backend, **kw)
    ck.write("u", interior, offset=(r * n[0], 0, 0), global_shape=(p * n[0], n[1], n[2]), dims=("z", "y", "x"),
             attrs={"units": "K"})
    ck.write("cols", cols, offset=(0, 7 * r), global_shape=(4, 7 * p))
    ck.write("planes", planes, offset=(r * n[0], 0, 0), global_shape=(p * n[0], 2, 3))
    ck.write("f", fortran, offset=(3 * r, 0), global_shape=(3 * p, 4))
    ck.close()
    ck.wait()
    rd = ckptio.open(path, comm)
    assert (rd.read("u", (r * n[0], 0, 0), n) == interior).all()
    assert (rd.read("cols", (0, 7 * r), (4, 7)) == cols).all()
    assert (rd.read("planes", (r * n[0], 0, 0), planes.shape) == planes).all()
    assert (rd.read("f", (3 * r, 0), (3, 4)) == fortran).all()
    assert rd.variables["u"].attrs == {"units": "K"}, rd.variables["u"].attrs
    rd.close()
    if r == 0:
        problems = internals.verify_blocks(path)
        assert not problems, problems
        u = ckptio.open(path).read("u")
        assert (u >= 0).all()  # no guard cell in the file
    print("OK", backend, mode, r)


def no_copy(comm, backend: str, path: str) -> None:
    g, n = 2, 128
    full = np.ones((n + 2 * g, n + 2 * g, 64 + 2 * g))  # interior 128 x 128 x 64 float64: 8 MiB
    interior = full[g:-g, g:-g, g:-g]
    interior[...] = np.arange(interior.size, dtype=np.float64).reshape(interior.shape)
    ckptio.create(path + ".warm", comm, backend=backend).close()  # imports and first-use caches before measuring
    tracemalloc.start()
    with ckptio.create(path, comm, backend=backend) as ck:
        ck.write("u", interior, offset=(0, 0, 0), global_shape=interior.shape)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert (ckptio.open(path, comm).read("u") == interior).all()
    print("PEAK", peak, interior.nbytes)


def no_copy_ranks(comm, backend: str, path: str) -> None:
    g, n = 2, 128
    full = np.ones((n + 2 * g, n + 2 * g, 64 + 2 * g))  # interior 128 x 128 x 64 float64: 8 MiB
    interior = full[g:-g, g:-g, g:-g]
    interior[...] = np.arange(interior.size, dtype=np.float64).reshape(interior.shape) + comm.rank
    ckptio.create(path + ".warm", comm, backend=backend).close()  # imports and first-use caches before measuring
    shape = (comm.size * n, n, 64)
    tracemalloc.start()
    with ckptio.create(path, comm, backend=backend) as ck:
        ck.write("u", interior, offset=(comm.rank * n, 0, 0), global_shape=shape)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert (ckptio.open(path, comm).read("u", (comm.rank * n, 0, 0), interior.shape) == interior).all()
    print("PEAK", comm.rank, peak, interior.nbytes, flush=True)


CASES = {"halo": halo, "no_copy": no_copy, "no_copy_ranks": no_copy_ranks}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
