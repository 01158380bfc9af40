"""``Reader.read(..., out=arr)`` and ``read_many(requests, out=[...])``: the restart fills caller arrays, strided
views included (the interior of a halo'd array), without a full-size intermediate copy; a wrong ``out`` on any
rank is a ReadRequestError on every rank, before anything is read."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from mpi_helpers import BACKENDS, run_script

from ckptio import memtypes

FILL = r"""
import sys, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
path, backend = sys.argv[1], sys.argv[2]
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
"""


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_read_fills_strided_caller_arrays(tmp_path, backend, nprocs):
    proc = run_script(nprocs, FILL, tmp_path, str(tmp_path / "chk"), backend, timeout=300)
    assert sorted(line for line in proc.stdout.splitlines() if line.startswith("OK")) == \
        [f"OK {r}" for r in range(nprocs)], proc.stdout + proc.stderr


NO_FULL_COPY = r"""
import sys, tracemalloc, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
rows = 1024  # 8 MiB in all: 1024 x 1024 float64
with ckptio.create(sys.argv[1], comm, backend=sys.argv[2]) as ck:
    part = rows // n
    ck.write("u", np.full((part, 1024), float(r)), offset=(part * r, 0), global_shape=(rows, 1024))
halo = np.zeros((rows + 2, 1026))
with ckptio.open(sys.argv[1], comm, aggregators=1, buffer_bytes="1M") as ck:
    ck.read("u", out=halo[1:-1, 1:-1])  # warm-up: the aggregator's two 1 MiB read buffers exist from now on
    tracemalloc.start()
    ck.read("u", out=halo[1:-1, 1:-1])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
expected = np.repeat(np.arange(n, dtype=np.float64), rows // n)[:, None]
assert (halo[1:-1, 1:-1] == expected).all() and (halo[0] == 0).all() and (halo[:, 0] == 0).all()
print("PEAK", r, peak, flush=True)
"""


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["mpiio", "hdf5"])
def test_reading_into_out_allocates_no_full_size_buffer(tmp_path, backend):
    """8 MiB land in the interior of a halo'd array on both ranks (one aggregator): neither the aggregator nor
    the receiving rank allocates anything near the data's size while reading (before, the exchange packed every
    piece into a send buffer and received into another, each as large as what the rank moves)."""
    proc = run_script(2, NO_FULL_COPY, tmp_path, str(tmp_path / "chk"), backend, timeout=300)
    peaks = [int(line.split()[2]) for line in proc.stdout.splitlines() if line.startswith("PEAK")]
    assert len(peaks) == 2, proc.stdout + proc.stderr
    assert max(peaks) < 1 << 20, peaks  # 8 MiB read; the largest temporary is far below one read buffer


BAD_OUT = r"""
import sys, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
with ckptio.create(sys.argv[1], comm) as ck:
    ck.write("u", np.full((4, 3), float(r)), offset=(4 * r, 0), global_shape=(4 * n, 3))
good = np.zeros((4, 3))
ro = np.zeros((4, 3))
ro.flags.writeable = False
bad = {"shape": np.zeros((4, 4)), "dtype": np.zeros((4, 3), np.float32), "byteorder": np.zeros((4, 3), ">f8"),
       "readonly": ro, "notarray": [[0.0] * 3] * 4}
with ckptio.open(sys.argv[1], comm) as ck:
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
"""


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_a_wrong_out_on_one_rank_is_an_error_on_every_rank(tmp_path, nprocs):
    proc = run_script(nprocs, BAD_OUT, tmp_path, str(tmp_path / "chk"), timeout=240)
    lines = proc.stdout.splitlines()
    assert not [line for line in lines if line.startswith("ACCEPTED")], proc.stdout
    for case in ("shape", "dtype", "byteorder", "readonly", "notarray", "count", "aliased", "overlapping"):
        raised = [line for line in lines if line.startswith(f"RAISED {case} ")]
        assert sorted(raised) == [f"RAISED {case} {r} True" for r in range(nprocs)], (case, proc.stdout)
    assert sorted(line for line in lines if line.startswith("AFTER")) == [f"AFTER {r}" for r in range(nprocs)]


def test_out_arrays_that_interleave_without_sharing_an_element_are_accepted():
    from ckptio.errors import ReadRequestError
    from ckptio.model.requests import _check_disjoint

    a = np.zeros((4, 6))
    _check_disjoint("p", [("u",)] * 3, [a[:, ::2], a[:, 1::2], None])  # same bounds, no common element
    _check_disjoint("p", [("u",)] * 2, [a[:2], a[2:]])
    with pytest.raises(ReadRequestError, match=r"out= arrays 0 .* and 2 .* share memory"):
        _check_disjoint("p", [("u",), ("v",), ("w",)], [a[:, ::2], a[:, 1::2], a[1]])


# ------------------------------------------------------------------------------- byte runs (pure, no MPI)
def _gather(addrs: np.ndarray, lens: np.ndarray) -> bytes:
    import ctypes

    return b"".join(ctypes.string_at(int(a), int(n)) for a, n in zip(addrs, lens, strict=True))


@pytest.mark.parametrize("index", [np.s_[2:-2, 2:-2, 2:-2], np.s_[:, ::-1, ::2], np.s_[1:2, 3, :], np.s_[::-1],
                                   np.s_[:, :, 1:2], np.s_[3:3]])
def test_view_runs_describe_the_elements_in_c_order(index):
    base = np.arange(8 * 9 * 10, dtype=np.float64).reshape(8, 9, 10)
    view = base[index]
    addrs, lens = memtypes.view_runs(view)
    assert _gather(addrs, lens) == np.ascontiguousarray(view).tobytes()
    merged = memtypes.merge(addrs, lens)
    assert _gather(*merged) == view.tobytes() and len(merged[0]) <= len(addrs)


def test_array_table_runs_match_numpy_for_boxes_of_contiguous_and_strided_arrays():
    rng = np.random.default_rng(5)
    arrays = [np.arange(6 * 7 * 5, dtype=np.int32).reshape(6, 7, 5), np.arange(40.0).reshape(8, 5)[1:7, ::2],
              np.arange(12, dtype=np.int64)]
    table = memtypes.ArrayTable(arrays, 3)
    which, lo, shape = [], [], []
    for _ in range(40):
        a = int(rng.integers(3))
        start = [int(rng.integers(0, s + 1)) for s in arrays[a].shape]
        ext = [int(rng.integers(0, s - st + 1)) for s, st in zip(arrays[a].shape, start, strict=True)]
        pad = 3 - arrays[a].ndim  # padded boxes: offset 0, extent 1 beyond the array's axes
        which.append(a)
        lo.append(start + [0] * pad)
        shape.append(ext + [1] * pad)
    addrs, lens, counts = table.runs(np.array(which), np.array(lo), np.array(shape))
    assert counts.sum() == len(addrs)
    expected = b"".join(np.ascontiguousarray(arrays[a][tuple(slice(s, s + e) for s, e in
                                                            zip(st[:arrays[a].ndim], ex[:arrays[a].ndim],
                                                                strict=True))]).tobytes()
                        for a, st, ex in zip(which, lo, shape, strict=True))
    assert _gather(addrs, lens) == expected


def test_byte_range_cuts_the_stream_inside_runs():
    data = np.arange(64, dtype=np.uint8)
    addrs, lens = memtypes.view_runs(data.reshape(8, 8)[:, 1:6])  # 8 runs of 5 bytes
    stream = _gather(addrs, lens)
    for start, stop in [(0, 40), (3, 17), (5, 10), (39, 40), (12, 12)]:
        assert _gather(*memtypes.byte_range(addrs, lens, start, stop)) == stream[start:stop]


def test_split_pieces_cuts_long_pieces_at_the_int_limit():
    from ckptio.backends.rawio import split_pieces

    lens, disps = split_pieces([5, 0, 23, 4], [100, 7, 200, 300], limit=10)
    assert lens.tolist() == [5, 10, 10, 3, 4] and disps.tolist() == [100, 200, 210, 220, 300]
    lens, disps = split_pieces([3, 0, 2], [0, 5, 9], limit=10)
    assert lens.tolist() == [3, 2] and disps.tolist() == [0, 9]


def test_messages_follow_requests_and_the_size_limits():
    sizes, reqs = np.array([100, 100, 5, 5, 5, 300, 50]), np.array([0, 0, 1, 2, 3, 4, 4])
    # pieces of one request travel together; small pieces of several requests share a message
    assert memtypes.message_starts(sizes, reqs, small=150, group=1000, limit=10**6).tolist() == [0, 200, 215]
    # a group limit starts a new message before the piece that would pass it
    assert memtypes.message_starts(sizes, reqs, small=150, group=210, limit=10**6).tolist() == [0, 200, 215, 515]
    # a piece larger than the message limit is cut inside
    assert memtypes.message_starts(np.array([25]), np.array([0]), 1, 100, 10).tolist() == [0, 10, 20]


def test_cut_splits_runs_at_message_boundaries():
    data = np.arange(64, dtype=np.uint8)
    addrs, lens = memtypes.view_runs(data.reshape(8, 8)[:, 1:6])  # 8 runs of 5 bytes
    stream = _gather(addrs, lens)
    starts = np.array([0, 3, 10, 12, 33])
    parts = memtypes.cut(addrs, lens, starts)
    bounds = [*starts.tolist(), len(stream)]
    assert [_gather(*p) for p in parts] == [stream[a:b] for a, b in itertools.pairwise(bounds)]


DIRECT = r"""
import sys, tracemalloc, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
with ckptio.create(sys.argv[1], comm, backend=sys.argv[2]) as ck:
    for b in range(8):  # 8 blocks of 1 MiB
        ck.write("u", np.full((128, 1024), float(b)), offset=(128 * b, 0), global_shape=(1024, 1024))
if sys.argv[3] == "aligned":
    out = ckptio.empty((1024, 1024))
else:  # 16 bytes past a page, where numpy.empty puts arrays above glibc's mmap threshold
    out = ckptio.empty((8 << 20) + 4096, np.uint8)[16:16 + (8 << 20)].view(np.float64).reshape(1024, 1024)
with ckptio.open(sys.argv[1], comm, buffer_bytes="2M") as ck:
    ck.read("u", out=np.empty_like(out))  # warm-up: the first read imports modules (another Reader's buffers)
with ckptio.open(sys.argv[1], comm, buffer_bytes="2M") as ck:
    tracemalloc.start()
    ck.read("u", out=out)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
assert (out == np.repeat(np.arange(8.0), 128)[:, None]).all()
print("PEAK", peak, ck.stats.file_bytes, ck.stats.direct_bytes, flush=True)
"""


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["mpiio", "hdf5"])
def test_an_aggregator_reads_its_own_contiguous_pieces_straight_into_the_output(tmp_path, backend):
    """One rank reading whole blocks into a contiguous, page-aligned out (``ckptio.empty``): the file's bytes go
    straight into ``out`` (one copy, the read itself); no read buffer (2 MiB) is allocated, in the first read
    either."""
    proc = run_script(1, DIRECT, tmp_path, str(tmp_path / "chk"), backend, "aligned", timeout=120)
    peak, nbytes, direct = (int(x) for x in proc.stdout.split("PEAK")[1].split()[:3])
    assert nbytes == 8 << 20 and direct == nbytes and peak < 256 << 10, (peak, nbytes, direct)


@pytest.mark.mpi
def test_an_out_array_16_bytes_past_a_page_is_filled_through_the_read_buffer(tmp_path):
    """An out 16 bytes past a page (where numpy.empty puts large arrays, and where the kernel's copy from the
    page-aligned file data runs several times slower, see ckptio.pagealign) is filled correctly, through the
    page-shifted read buffer."""
    proc = run_script(1, DIRECT, tmp_path, str(tmp_path / "chk"), "mpiio", "numpy", timeout=120)
    peak, nbytes, direct = (int(x) for x in proc.stdout.split("PEAK")[1].split()[:3])
    assert nbytes == 8 << 20 and direct == 0 and peak > 2 << 20, (peak, nbytes, direct)
