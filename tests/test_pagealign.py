"""Page-aligned restart memory (ckptio.model.pagealign) and where the read buffer puts file data (rawio).

Why it matters is measured, not asserted here: on x86 the kernel's bulk copies (``preadv`` from the page cache,
Open MPI's CMA transfers) are several times slower when the destination lies 1-31 bytes past the source modulo
the page, which is where ``numpy.empty`` puts a large array against page-aligned file data."""

from __future__ import annotations

import numpy as np
import pytest

import ckptio
from backends.rawio import _staging_positions
from ckptio.model import pagealign
from ckptio.model.layout import Box
from ckptio.model.plan import Extent


@pytest.mark.parametrize("shape,dtype", [((64, 16, 16, 16), np.float64), (1 << 20, np.uint8),
                                         ((3, 50000), np.int32), ((300, 300), np.complex128)])
def test_empty_is_a_page_aligned_writable_array_of_the_shape_and_dtype(shape, dtype):
    a = ckptio.empty(shape, dtype)
    want = (shape,) if isinstance(shape, int) else shape
    assert a.shape == want and a.dtype == np.dtype(dtype) and a.flags.c_contiguous and a.flags.writeable
    assert a.ctypes.data % pagealign.PAGE == 0
    a[...] = 7
    assert (a == 7).all()


@pytest.mark.parametrize("shape,dtype", [((10, 10), np.float64), (1, np.uint8), ((), np.int16),
                                         ((3, 1000), np.float64), ((64 << 10) - 1, np.uint8)])
def test_small_empty_arrays_are_page_aligned_too(shape, dtype):
    """Issue 23: below 64 KiB ``ckptio.empty`` returned ``numpy.empty``'s array (16-byte aligned), although the
    README says it is page-aligned. Several at once, so that one landing on a page by chance cannot pass."""
    arrays = [ckptio.empty(shape, dtype) for _ in range(8)]
    for a in arrays:
        assert a.shape == np.empty(shape, dtype).shape and a.dtype == np.dtype(dtype) and a.flags.c_contiguous
        assert a.ctypes.data % pagealign.PAGE == 0, a.ctypes.data % pagealign.PAGE
        a[...] = 3
        assert (a == 3).all()


def test_restart_allocations_leave_small_arrays_to_numpy():
    small = pagealign.restart_empty((10, 10))
    assert small.shape == (10, 10) and small.dtype == np.float64 and small.flags.owndata
    assert pagealign.restart_empty((1 << 20,), np.uint8).ctypes.data % pagealign.PAGE == 0


def test_empty_leaves_object_arrays_to_numpy():
    assert ckptio.empty(4, object).dtype == object
    assert ckptio.empty((0, 5)).shape == (0, 5)


def test_empty_takes_sizes_as_numpy_does():
    assert ckptio.empty(np.int64(100000)).shape == (100000,)
    assert ckptio.empty((np.int32(300), 300)).ctypes.data % pagealign.PAGE == 0
    assert ckptio.empty((1000,), ("f8", (10,))).shape == (1000, 10)  # a subarray dtype adds its axes, as numpy
    for bad, error in (((1000.5, 1000), TypeError), ((-1000, -1000), ValueError), (-5, ValueError),
                       ("12", TypeError)):
        with pytest.raises(error):
            ckptio.empty(bad)
        with pytest.raises(error):
            np.empty(bad)


def test_numpy_empty_of_a_large_array_is_in_the_slow_window_against_page_aligned_data():
    """The premise of the module on this platform: if numpy or glibc ever stop putting large arrays 16 bytes past
    a page, this test says so (the reader's policy is still correct, just no longer needed). 64 MiB: above glibc's
    largest mmap threshold (32 MiB), so the array gets its own mapping whatever the heap looks like; smaller ones
    land wherever the heap has room, aligned or not. Untouched, so it costs no memory."""
    a = np.empty(64 << 20, np.uint8)
    assert pagealign.slow_copy(a.ctypes.data, 0), a.ctypes.data % pagealign.PAGE


def test_slow_copy_is_the_destination_1_to_31_bytes_past_the_source_modulo_the_page():
    page = pagealign.PAGE
    assert [s for s in range(-64, 65) if pagealign.slow_copy(10 * page + s, 3 * page)] == list(range(1, 32))
    assert not pagealign.slow_copy(5 * page + 100, 100) and pagealign.slow_copy(5 * page + 116, 100)


@pytest.mark.parametrize("position", [0, 1, 4064, 4096, 12345])
@pytest.mark.parametrize("file_offset", [0, 8, 4096 * 7 + 24, 1 << 40])
def test_staging_position_puts_file_data_32_bytes_before_its_page_offset(position, file_offset):
    p = pagealign.staging_position(position, file_offset)
    assert position <= p < position + pagealign.PAGE
    assert (p - file_offset) % pagealign.PAGE == pagealign.STAGING_SHIFT
    assert not pagealign.slow_copy(p, file_offset)  # the copy from the page cache into the buffer
    for destination in (file_offset, file_offset + 16, file_offset + 8):  # placed like the file, like numpy.empty
        assert not pagealign.slow_copy(destination, p)


def _extent(offset: int, nbytes: int) -> Extent:
    return Extent("u", Box((0,), (nbytes // 8,)), offset, nbytes)


def test_read_buffer_keeps_file_contiguous_extents_contiguous_and_realigns_large_jumps():
    big = 1 << 20
    extents = [_extent(8, big), _extent(8 + big, big), _extent(5 * big + 24, big), _extent(9 * big, 4096),
               _extent(12 * big + 40, big), _extent(20 * big, big)]
    whole = [False, False, False, False, True, False]
    pos = _staging_positions(extents, whole)
    assert pos[4] is None
    assert pos[1] == pos[0] + big  # continues the previous extent in the file: no gap
    assert pos[3] == pos[2] + big  # small (4 KiB): not worth realigning
    for i in (0, 1, 2, 5):
        assert (pos[i] - extents[i].file_offset) % pagealign.PAGE == pagealign.STAGING_SHIFT
    assert pos[5] - (pos[3] + 4096) < pagealign.PAGE  # at most one page of slack per realigned extent
    assert pos[0] < pagealign.PAGE
