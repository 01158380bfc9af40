"""The pnetcdf backend lets PnetCDF byte-swap the write buffers in place (CDF is big-endian) instead of making it
allocate a swapped copy of every block, a second copy of each rank's data (backends/pnetcdf_write.py), and hands it
a private copy of any buffer that is not safe to change for that moment (``swappable``): read-only memory, a file
mapping, memory another block of the same write shares. Every array is restored before ``close()`` returns, also
when the checkpoint fails."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from mpi_helpers import PROGRAMS, run_mpi

import ckptio
from ckptio.model import memsel

pytestmark = pytest.mark.timeout(600)
PROGRAM = str(PROGRAMS / "pnetcdf_swap.py")
needs_pnetcdf = pytest.mark.skipif("pnetcdf" not in ckptio.backends.available_backends(),
                                   reason="the pnetcdf backend is not available")
# In the MPICH matrix and the ROMIO driver lane too (Makefile MATRIX_TESTS, DRIVER_TESTS): the MPI library's
# collective write reads the swapped buffers; the local tests below are the same on every stack.
local = pytest.mark.stack_independent


# ----------------------------------------------------------------------------------------------- local, pure
@local
def test_numpy_owned_memory_only(tmp_path):
    a = np.arange(10.0)
    assert memsel.numpy_owned(a) and memsel.numpy_owned(a[2:5]) and memsel.numpy_owned(a.reshape(2, 5)[:, 1])
    assert memsel.numpy_owned(ckptio.empty((4, 4)))
    ro = a[:]
    ro.flags.writeable = False
    assert not memsel.numpy_owned(ro)
    assert not memsel.numpy_owned(np.frombuffer(b"\0" * 80, dtype=np.float64))  # bytes: read-only
    assert not memsel.numpy_owned(np.frombuffer(bytearray(80), dtype=np.float64))  # another object's buffer
    path = tmp_path / "m"
    path.write_bytes(bytes(80))
    mapped = np.memmap(path, dtype=np.float64, mode="r+")
    assert isinstance(mapped.base, mmap.mmap)
    assert not memsel.numpy_owned(mapped) and not memsel.numpy_owned(mapped[1:3])
    del mapped


def _brute_force(arrays):
    out = []
    for i, a in enumerate(arrays):
        lo, hi = np.lib.array_utils.byte_bounds(a) if a.size else (0, 0)
        hit = False
        for j, b in enumerate(arrays):
            if j != i and a.size and b.size:
                blo, bhi = np.lib.array_utils.byte_bounds(b)
                hit |= lo < bhi and blo < hi
        out.append(hit)
    return out


@local
def test_overlapping_marks_every_array_whose_bounds_meet_another():
    base = np.arange(1000.0)
    other = np.arange(50.0)
    arrays = [base[:10], other, base[5:20], base[100:200], base[200:300], base, np.empty(0), base[::2][400:410]]
    got = list(memsel.overlapping(arrays))
    assert got == _brute_force(arrays)
    assert got == [True, False, True, True, True, True, False, True]
    assert list(memsel.overlapping([base[:10], base[10:20]])) == [False, False]  # adjacent, not overlapping
    assert list(memsel.overlapping([base, base])) == [True, True]
    assert list(memsel.overlapping([])) == [] and list(memsel.overlapping([base])) == [False]
    rng = np.random.default_rng(5)
    for _ in range(200):
        cuts = [base[lo:lo + n] for lo, n in zip(rng.integers(0, 900, 6), rng.integers(0, 60, 6), strict=True)]
        assert list(memsel.overlapping(cuts)) == _brute_force(cuts)


@local
@needs_pnetcdf
def test_swappable_copies_what_is_not_safe_to_swap_in_place(tmp_path):
    from ckptio.backends.pnetcdf_buffers import swappable

    own = np.arange(100.0)
    other = np.arange(30.0)
    ro = np.frombuffer(np.arange(8.0).tobytes())
    strided = np.arange(60.0).reshape(6, 10)[:, 2:5]
    small = np.arange(10, dtype=np.uint8)
    got = swappable([own, other, own[10:20], ro, strided, small, small])
    assert got[1] is other  # its own memory: swapped in place
    assert got[0] is not own and got[2] is not own[10:20]  # sharing memory: both copied
    assert np.array_equal(got[0], own) and got[0].flags.owndata
    assert got[3] is not ro and np.array_equal(got[3], ro)  # read-only memory
    assert got[4] is strided  # PnetCDF packs strided views into a buffer of its own
    assert got[5] is small and got[6] is small  # one-byte elements: never swapped


# ------------------------------------------------------------------------------------------ under mpirun
@needs_pnetcdf
@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_callers_arrays_restored_and_file_right(nprocs, tmp_path):
    proc = run_mpi(nprocs, [PROGRAM, "restored", str(tmp_path / "chk.nc")])
    assert proc.stdout.count("OK") == nprocs, proc.stdout + proc.stderr


@needs_pnetcdf
@pytest.mark.mpi
def test_callers_arrays_restored_and_file_right_when_the_write_is_cut_into_rounds(tmp_path):
    """Under OMPIO with 32 KiB rounds (``cb_buffer_size`` 64 KiB) every variable of more than 4 x 32 KiB goes out in
    several ``wait_all`` calls, each block's parts in several of them (``backends.collective_calls``): each part is
    swapped and restored on its own."""
    proc = run_mpi(4, [PROGRAM, "restored", str(tmp_path / "chk.nc")], env={"CKPTIO_HINTS": "cb_buffer_size=65536"})
    assert proc.stdout.count("OK") == 4, proc.stdout + proc.stderr


@needs_pnetcdf
@pytest.mark.mpi
def test_arrays_restored_when_the_checkpoint_fails_after_posting(tmp_path):
    proc = run_mpi(2, [PROGRAM, "failure", str(tmp_path / "chk.nc")])
    assert proc.stdout.count("OK") == 2, proc.stdout + proc.stderr


@needs_pnetcdf
@pytest.mark.mpi
def test_no_second_copy_of_the_data(tmp_path):
    """The peak resident memory grows by far less than the data while it is written: by ROMIO's collective buffer
    at most (``cb_buffer_size``, on an aggregator; OMPIO's stays below it); with PnetCDF's swapped copy
    (``nc_in_place_swap=disable``, ckptio's setting before) it grows by the data's size: the measure sees a copy."""
    from ckptio.coord.hints import DEFAULTS

    proc = run_mpi(2, [PROGRAM, "peak", str(tmp_path / "chk.nc")])
    peaks = [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("PEAK ")]
    assert len(peaks) == 2, proc.stdout + proc.stderr
    for rank, default, disabled, nbytes in (map(int, p) for p in peaks):
        assert disabled > 0.9 * nbytes, f"rank {rank}: the copy was not seen ({disabled:,} of {nbytes:,} bytes)"
        bound = int(DEFAULTS["cb_buffer_size"]) + nbytes // 8
        assert default < bound, f"rank {rank}: peak memory grew by {default:,} bytes writing {nbytes:,}"
