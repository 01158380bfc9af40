"""The MPI programs of ``tests/test_read_out.py`` (``mpirun -n P python read_out.py CASE ARGS...``).

Cases:

* ``fill PATH BACKEND``: write, then read into caller arrays (a halo'd interior, negative and stepped strides,
  a segment into a strided buffer, a 0-d out, an empty request); prints ``OK <rank>``;
* ``no_full_copy PATH BACKEND``: 8 MiB read into a halo'd interior, one aggregator; prints
  ``PEAK <rank> <bytes>`` (tracemalloc's peak of the second read);
* ``bad_out PATH``: a wrong ``out=`` on the last rank (and a wrong count on rank 0, aliased outs): prints
  ``RAISED <case> <rank> <message names the rank>`` or ``ACCEPTED <case> <rank>``, then ``AFTER <rank>``;
* ``direct PATH BACKEND aligned|numpy``: one rank reads 8 MiB into a page-aligned or a 16-bytes-past-a-page out;
  prints ``PEAK <bytes> <file bytes> <direct bytes>``.
"""

from __future__ import annotations

import sys
import tracemalloc

import numpy as np

import ckptio


def fill(comm, path: str, backend: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    G = (24, 10, 6)
    full = np.arange(np.prod(G), dtype=np.float64).reshape(G)
    with ckptio.create(path, comm, backend=backend) as ck:
        lo, hi = r * 24 // n, (r + 1) * 24 // n
        ck.write("u", full[lo:hi], offset=(lo, 0, 0), global_shape=G)
        ck.write("k", (full[lo:hi] * 2).astype(np.int32), offset=(lo, 0, 0), global_shape=G)
        ck.write("seg", np.arange(5 + r, dtype=np.int64) + 100 * r)
        if r == n - 1:
            ck.write("t", np.array(3.5), offset=(), global_shape=())
    segs = np.concatenate([np.arange(5 + q, dtype=np.int64) + 100 * q for q in range(n)])
    with ckptio.open(path, comm, buffer_bytes="2K") as ck:   # many rounds, several pieces per round
        lo = (r * 24 // n + 3) % 24                           # another decomposition than the writers'
        cnt = min(24 - lo, 7)
        # the interior of a halo'd array: 2 guard cells on every side
        halo = np.full((cnt + 4, 9, 8), -1.0)
        got = ck.read("u", offset=(lo, 2, 1), out=halo[2:-2, 2:-2, 2:-2])
        assert got.base is halo, "read(out=) must return the array it filled"
        assert np.array_equal(halo[2:-2, 2:-2, 2:-2], full[lo:lo + cnt, 2:7, 1:5]), "interior"
        inner = np.ones(halo.shape, bool)
        inner[2:-2, 2:-2, 2:-2] = False
        assert (halo[inner] == -1).all(), "a guard cell was written"
        # negative and stepped strides, a C-contiguous array, an allocated one, in one call
        back = np.zeros((6, 10, 6))[:, ::-1, ::2]
        whole = np.zeros(G, np.int32)
        a, b, c = ck.read_many([("u", (1, 0, 1), (6, 10, 3)), ("k", None, None), ("u", (lo, 0, 0), (cnt, 10, 6))],
                               out=[back, whole, None])
        assert a is back and b is whole
        assert np.array_equal(back, full[1:7, :, 1:4]) and np.array_equal(whole, (full * 2).astype(np.int32))
        assert np.array_equal(c, full[lo:lo + cnt])
        # a segment variable: this rank's own segment, into a strided buffer
        mine = np.zeros(2 * (5 + r), np.int64)[::2]
        assert ck.read("seg", out=mine) is mine
        assert np.array_equal(mine, segs[sum(5 + q for q in range(r)):][:5 + r]), mine
        # a 0-d variable, allocated and into a 0-d out (on one rank the aggregator's own piece, read straight in)
        scalar = np.zeros(())
        t, t2 = ck.read_many([("t", None, None), ("t", None, None)], out=[None, scalar])
        assert float(t) == 3.5 and t2 is scalar and float(scalar) == 3.5, (t, scalar)
        # an empty request with an empty out
        assert ck.read("u", offset=(0, 0, 0), shape=(0, 10, 6), out=np.zeros((0, 10, 6))).size == 0
    print("OK", r, flush=True)


def no_full_copy(comm, path: str, backend: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    rows = 1024  # 8 MiB in all: 1024 x 1024 float64
    with ckptio.create(path, comm, backend=backend) as ck:
        part = rows // n
        ck.write("u", np.full((part, 1024), float(r)), offset=(part * r, 0), global_shape=(rows, 1024))
    halo = np.zeros((rows + 2, 1026))
    with ckptio.open(path, comm, aggregators=1, buffer_bytes="1M") as ck:
        ck.read("u", out=halo[1:-1, 1:-1])  # warm-up: the aggregator's two 1 MiB read buffers exist from now on
        tracemalloc.start()
        ck.read("u", out=halo[1:-1, 1:-1])
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    expected = np.repeat(np.arange(n, dtype=np.float64), rows // n)[:, None]
    assert (halo[1:-1, 1:-1] == expected).all() and (halo[0] == 0).all() and (halo[:, 0] == 0).all()
    print("PEAK", r, peak, flush=True)


def bad_out(comm, path: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    with ckptio.create(path, comm) as ck:
        ck.write("u", np.full((4, 3), float(r)), offset=(4 * r, 0), global_shape=(4 * n, 3))
    good = np.zeros((4, 3))
    ro = np.zeros((4, 3))
    ro.flags.writeable = False
    bad = {"shape": np.zeros((4, 4)), "dtype": np.zeros((4, 3), np.float32), "byteorder": np.zeros((4, 3), ">f8"),
           "readonly": ro, "notarray": [[0.0] * 3] * 4}
    with ckptio.open(path, comm) as ck:
        for case, wrong in bad.items():
            try:
                ck.read("u", offset=(4 * r, 0), shape=(4, 3), out=wrong if r == n - 1 else good)
                print("ACCEPTED", case, r, flush=True)
            except ckptio.ReadRequestError as exc:
                print("RAISED", case, r, "'u'" in str(exc) and f"rank {n - 1}" in str(exc), flush=True)
        try:
            ck.read_many([("u", None, None)], out=[good, good] if r == 0 else [None])
            print("ACCEPTED", "count", r, flush=True)
        except ckptio.ReadRequestError as exc:
            print("RAISED", "count", r, "rank 0" in str(exc), flush=True)
        # out= arrays of one call sharing memory (once reported a good checkpoint as corrupt): rejected
        big = np.zeros((6, 3))
        halves = [("u", (0, 0), (4, 3)), ("u", (4 * (n - 1), 0), (4, 3))]
        for case, outs in (("aliased", [good, good]), ("overlapping", [big[:4], big[2:]])):
            try:
                ck.read_many(halves, out=outs if r == n - 1 else [good, np.zeros((4, 3))])
                print("ACCEPTED", case, r, flush=True)
            except ckptio.ReadRequestError as exc:
                print("RAISED", case, r, "share memory" in str(exc) and f"rank {n - 1}" in str(exc), flush=True)
        # the Reader is still usable: nothing was read, nobody is stuck
        assert np.array_equal(ck.read("u", offset=(4 * r, 0), shape=(4, 3), out=good), np.full((4, 3), float(r)))
    print("AFTER", r, flush=True)


def direct(comm, path: str, backend: str, how: str) -> None:
    with ckptio.create(path, comm, backend=backend) as ck:
        for b in range(8):  # 8 blocks of 1 MiB
            ck.write("u", np.full((128, 1024), float(b)), offset=(128 * b, 0), global_shape=(1024, 1024))
    if how == "aligned":
        out = ckptio.empty((1024, 1024))
    else:  # 16 bytes past a page, where numpy.empty puts arrays above glibc's mmap threshold
        out = ckptio.empty((8 << 20) + 4096, np.uint8)[16:16 + (8 << 20)].view(np.float64).reshape(1024, 1024)
    with ckptio.open(path, comm, buffer_bytes="2M") as ck:
        ck.read("u", out=np.empty_like(out))  # warm-up: the first read imports modules (another Reader's buffers)
    with ckptio.open(path, comm, buffer_bytes="2M") as ck:
        tracemalloc.start()
        ck.read("u", out=out)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert (out == np.repeat(np.arange(8.0), 128)[:, None]).all()
    print("PEAK", peak, ck.stats.file_bytes, ck.stats.direct_bytes, flush=True)


CASES = {"fill": fill, "no_full_copy": no_full_copy, "bad_out": bad_out, "direct": direct}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
