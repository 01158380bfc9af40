"""``Reader.read(..., out=arr)`` and ``read_many(requests, out=[...])``: the restart fills caller arrays, strided
views included (the interior of a halo'd array), without a full-size intermediate copy; a wrong ``out`` on any
rank is a ReadRequestError on every rank, before anything is read."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from mpi_helpers import BACKENDS, PROGRAMS, run_mpi

from ckptio.coord import datatypes as memtypes

PROGRAM = str(PROGRAMS / "read_out.py")  # the MPI programs of these tests


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_read_fills_strided_caller_arrays(tmp_path, backend, nprocs):
    proc = run_mpi(nprocs, [PROGRAM, "fill", str(tmp_path / "chk"), backend], timeout=300)
    assert sorted(line for line in proc.stdout.splitlines() if line.startswith("OK")) == \
        [f"OK {r}" for r in range(nprocs)], proc.stdout + proc.stderr



@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["mpiio", "hdf5"])
def test_reading_into_out_allocates_no_full_size_buffer(tmp_path, backend):
    """8 MiB land in the interior of a halo'd array on both ranks (one aggregator): neither the aggregator nor
    the receiving rank allocates anything near the data's size while reading (before, the exchange packed every
    piece into a send buffer and received into another, each as large as what the rank moves)."""
    proc = run_mpi(2, [PROGRAM, "no_full_copy", str(tmp_path / "chk"), backend], timeout=300)
    peaks = [int(line.split()[2]) for line in proc.stdout.splitlines() if line.startswith("PEAK")]
    assert len(peaks) == 2, proc.stdout + proc.stderr
    assert max(peaks) < 1 << 20, peaks  # 8 MiB read; the largest temporary is far below one read buffer



@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_a_wrong_out_on_one_rank_is_an_error_on_every_rank(tmp_path, nprocs):
    proc = run_mpi(nprocs, [PROGRAM, "bad_out", str(tmp_path / "chk")], timeout=240)
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
    from ckptio.coord.datatypes import split_pieces

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



@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["mpiio", "hdf5"])
def test_an_aggregator_reads_its_own_contiguous_pieces_straight_into_the_output(tmp_path, backend):
    """One rank reading whole blocks into a contiguous, page-aligned out (``ckptio.empty``): the file's bytes go
    straight into ``out`` (one copy, the read itself); no read buffer (2 MiB) is allocated, in the first read
    either."""
    proc = run_mpi(1, [PROGRAM, "direct", str(tmp_path / "chk"), backend, "aligned"], timeout=120)
    peak, nbytes, direct = (int(x) for x in proc.stdout.split("PEAK")[1].split()[:3])
    assert nbytes == 8 << 20 and direct == nbytes and peak < 256 << 10, (peak, nbytes, direct)


@pytest.mark.mpi
def test_an_out_array_16_bytes_past_a_page_is_filled_through_the_read_buffer(tmp_path):
    """An out 16 bytes past a page (where numpy.empty puts large arrays, and where the kernel's copy from the
    page-aligned file data runs several times slower, see ckptio.model.pagealign) is filled correctly, through the
    page-shifted read buffer."""
    proc = run_mpi(1, [PROGRAM, "direct", str(tmp_path / "chk"), "mpiio", "numpy"], timeout=120)
    peak, nbytes, direct = (int(x) for x in proc.stdout.split("PEAK")[1].split()[:3])
    assert nbytes == 8 << 20 and direct == 0 and peak > 2 << 20, (peak, nbytes, direct)
