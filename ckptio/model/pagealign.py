"""Page-aligned arrays for data that the kernel copies in bulk.

Why: on x86 the kernel's copies (``preadv`` from the page cache, Open MPI's single-copy CMA transfers between
ranks) run several times slower when the destination sits a few bytes past the source modulo the 4 KiB page
("4K aliasing"). ``numpy.empty`` of a large array (above glibc's mmap threshold, 128 KiB growing up to 32 MiB;
smaller ones land wherever the heap has room) returns memory 16 bytes past a page boundary (glibc's chunk header),
which is exactly that case against page-aligned file data: measured on the development machine, a
``preadv`` from the page cache reached 2.6 GiB/s into such an array and 14-15 GiB/s into a page-aligned one.
Every array ckptio allocates for a restart's data therefore starts on a page boundary. Local, no MPI.
"""

from __future__ import annotations

import math
import operator

import numpy as np

PAGE = 4096
MIN_ALIGNED_BYTES = 64 << 10  # below this the copies are short and the 4 KiB of slack is not worth it


def empty(shape: tuple[int, ...] | int, dtype: np.dtype | str | type = np.float64) -> np.ndarray:
    """Local (``ckptio.empty``): an uninitialised C-ordered array like ``numpy.empty(shape, dtype)`` whose data
    starts on a page boundary, whatever its size (issue 23: arrays below 64 KiB used to come straight from
    ``numpy.empty``, although documented as page-aligned). Allocate a restart's ``out=`` arrays with it, so that
    an aggregator's own data is read straight into them. The result is a view of a uint8 buffer one page larger,
    which it keeps alive. Object and subarray dtypes, and negative sizes, are ``numpy.empty``'s own result or
    error (not aligned)."""
    return aligned_empty(shape, dtype, 0)


def restart_empty(shape: tuple[int, ...] | int, dtype: np.dtype | str | type = np.float64) -> np.ndarray:
    """Local: the arrays a restart allocates itself (reads without ``out=``): page-aligned from
    ``MIN_ALIGNED_BYTES`` on, smaller ones straight from ``numpy.empty`` (their copies are short, and a
    checkpoint of many small variables would otherwise cost a page of slack each)."""
    return aligned_empty(shape, dtype, MIN_ALIGNED_BYTES)


def aligned_empty(shape: tuple[int, ...] | int, dtype: np.dtype | str | type, min_bytes: int) -> np.ndarray:
    """Local: :func:`empty`, page-aligned only when the array has at least ``min_bytes`` bytes."""
    dt = np.dtype(dtype)
    try:  # sizes as numpy takes them: Python or numpy integers, never a float or a negative
        dims = (operator.index(shape),)
    except TypeError:
        dims = tuple(operator.index(s) for s in shape)
    nbytes = math.prod(dims) * dt.itemsize
    if nbytes < min_bytes or dt.hasobject or dt.subdtype is not None or min(dims, default=0) < 0:
        return np.empty(dims, dt)  # numpy's own result (or error: negative dimensions)
    return page_aligned_bytes(nbytes).view(dt).reshape(dims)


def page_aligned_bytes(nbytes: int) -> np.ndarray:
    """``nbytes`` uninitialised uint8 starting on a page boundary, whatever the size (a view of ``nbytes + PAGE``
    bytes, which it keeps alive). Local."""
    raw = np.empty(nbytes + PAGE, np.uint8)
    start = (-raw.ctypes.data) % PAGE
    return raw[start:start + nbytes]


# A kernel copy is slow when its destination lies 1-31 bytes past its source modulo the page (measured on the
# development machine, AMD EPYC: 2.5 GiB/s for 8, 16 and 24 bytes, 12-14 GiB/s for 0 and 32-4088).
SLOW_SHIFTS = 32
# Where a staging buffer puts file data: this many bytes *before* its page offset in the file. The copy from
# the page cache into the buffer then runs at a shift of -32 (fast), and the copy on to a destination placed
# like the file (shift 32) or like a ``numpy.empty`` array (16 bytes past a page: shift 48) is fast too.
STAGING_SHIFT = PAGE - SLOW_SHIFTS


def slow_copy(destination: int, source: int) -> bool:
    """Whether a kernel copy from address (or file offset) ``source`` to address ``destination`` falls in the
    slow window: the destination 1-31 bytes past the source modulo the page."""
    return 0 < (destination - source) % PAGE < SLOW_SHIFTS


def staging_position(position: int, file_offset: int) -> int:
    """The first position >= ``position`` in a page-aligned staging buffer at which to put the byte at
    ``file_offset`` of a file (see STAGING_SHIFT)."""
    return position + (file_offset + STAGING_SHIFT - position) % PAGE
