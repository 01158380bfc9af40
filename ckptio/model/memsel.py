"""Memory selections: write a strided view of a larger array (the interior of a halo'd array) without a copy.

``Writer.write`` accepts any numpy view. Its elements, taken in C order, are what the checkpoint stores; where
they lie in memory is described here as *runs*: the view's maximal contiguous byte ranges in C order (the
interior of a guard-celled C-order array ``u[g:-g, g:-g, g:-g]`` has one run per interior row). The backends
turn the runs into their own memory descriptions, so the library reads the caller's memory in place:

* ``mpiio``: an MPI hindexed memory type over the runs' addresses (:func:`ckptio.coord.datatypes.buffers_type`);
* ``hdf5``: a memory dataspace with a hyperslab selection over the enclosing span (:func:`hdf5_selection`);
* ``pnetcdf``: PnetCDF's flexible API, ``iput_var(span, bufcount=1, buftype=...)`` with an hindexed type of
  the element type over the runs.

The checksum of such a view is the checksum of its C-order bytes (the same digest a contiguous copy would
have), computed by :func:`checksum` in bounded pieces (at most :data:`SCRATCH_BYTES` gathered at a time), never
with a copy of the whole block.

A view is *passable* (:func:`passable`) when its strides are positive multiples of the element size and its
last axis is contiguous (runs of at least one row); any other view -- a Fortran-ordered array, every second
element ``a[::2]``, a reversed or broadcast one -- would give one run per element and is gathered into a C-order
copy instead (:func:`gathered`), as the writer always did for Fortran-ordered arrays.

Everything here is local and pure numpy (no MPI).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import xxhash

SCRATCH_BYTES = 1 << 20  # gathered at a time by checksum() for views with short runs


def passable(array: np.ndarray) -> bool:
    """True when ``array`` can be handed to a backend as it is: C-contiguous, or a view whose strides are
    positive multiples of the element size with a contiguous last axis (see the module docstring)."""
    if array.flags.c_contiguous or array.size == 0:
        return True
    item = array.dtype.itemsize
    axes = [(n, s) for n, s in zip(array.shape, array.strides, strict=True) if n > 1]
    if not axes or axes[-1][1] != item:
        return False
    return all(s > 0 and s % item == 0 for _, s in axes)


def gathered(array: np.ndarray) -> np.ndarray:
    """``array`` itself when passable, else its C-order copy (a Fortran-ordered array, element strides)."""
    return array if passable(array) else np.ascontiguousarray(array).reshape(array.shape)  # (0-d stays 0-d)


def run_layout(array: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """(outer shape, outer byte strides, run bytes): the C-order traversal of ``array`` as contiguous runs of
    ``run bytes`` each, one per index of the outer axes. Trailing axes that continue a run are merged into it;
    axes of length 1 are dropped."""
    run = array.dtype.itemsize
    axes = [(n, s) for n, s in zip(array.shape, array.strides, strict=True) if n != 1]
    while axes and axes[-1][1] == run:
        run *= axes.pop()[0]
    return tuple(n for n, _ in axes), tuple(s for _, s in axes), run


def runs(array: np.ndarray) -> tuple[np.ndarray, int]:
    """Byte offsets (int64, relative to the view's first element, in C order) of the view's runs, and the length
    of every run in bytes. An empty view has no runs."""
    if array.size == 0:
        return np.empty(0, np.int64), 0
    shape, strides, run = run_layout(array)
    offsets = np.zeros(1, np.int64)
    for n, s in zip(shape, strides, strict=True):
        offsets = (offsets[:, None] + np.arange(n, dtype=np.int64)[None, :] * s).reshape(-1)
    return offsets, run


def numpy_owned(array: np.ndarray) -> bool:
    """True when ``array`` is writeable memory that numpy itself allocated (the root of its chain of bases owns
    its data), the only memory a library may change for a moment and restore: not a file mapping (``np.memmap``,
    ``mmap``), nor the buffer of another object (``bytes``, a C or Fortran caller's memory, MPI shared memory)."""
    if not array.flags.writeable:
        return False
    root = array
    while isinstance(root.base, np.ndarray):
        root = root.base
    return root.base is None and root.flags.owndata


def overlapping(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """For each array, whether its byte bounds overlap those of another array in ``arrays``: a conservative test
    for shared memory (two views whose bounds interleave without sharing an element count as overlapping), in
    O(n log n). Empty arrays overlap nothing. Local."""
    n = len(arrays)
    shared = np.zeros(n, dtype=bool)
    held = [i for i, a in enumerate(arrays) if a.size]
    if len(held) < 2:
        return shared
    bounds = np.array([np.lib.array_utils.byte_bounds(arrays[i]) for i in held], dtype=np.int64)
    order = np.argsort(bounds[:, 0], kind="stable")
    lo, hi = bounds[order, 0], bounds[order, 1]
    reach = np.maximum.accumulate(hi)  # the furthest end of the arrays starting at or before each one
    before = np.zeros(len(held), dtype=bool)
    before[1:] = lo[1:] < reach[:-1]  # starts inside an array that starts earlier
    after = np.zeros(len(held), dtype=bool)
    after[:-1] = lo[1:] < hi[:-1]  # the next one (sorted by start) starts inside it
    shared[np.asarray(held)[order]] = before | after
    return shared


def address(array: np.ndarray) -> int:
    """The address of the view's first element."""
    return int(array.__array_interface__["data"][0])


def span(array: np.ndarray) -> np.ndarray:
    """A contiguous 1-D array of ``array``'s dtype over the memory from its first to its last element (inside
    the array it views, so valid; it keeps that array alive). Only for passable views."""
    if array.size == 0 or array.flags.c_contiguous:
        return array.reshape(-1)
    item = array.dtype.itemsize
    last = sum((n - 1) * s for n, s in zip(array.shape, array.strides, strict=True))
    return np.lib.stride_tricks.as_strided(array, shape=(last // item + 1,), strides=(item,), writeable=False)


def _feed(h, array: np.ndarray, scratch: np.ndarray) -> None:
    if array.flags.c_contiguous:
        h.update(memoryview(array.reshape(-1).view(np.uint8)))
        return
    if array.nbytes <= scratch.nbytes:
        dst = scratch[:array.nbytes].view(array.dtype).reshape(array.shape)
        np.copyto(dst, array, casting="no")
        h.update(memoryview(scratch[:array.nbytes]))
        return
    row = array[0].nbytes if array.ndim > 1 else array.dtype.itemsize
    if row > scratch.nbytes:  # one index of the first axis is too large: go down one axis
        for i in range(array.shape[0]):
            _feed(h, array[i], scratch)
        return
    step = scratch.nbytes // row
    for i in range(0, array.shape[0], step):
        _feed(h, array[i:i + step], scratch)


def checksum(array: np.ndarray) -> str:
    """xxh3-64 (16 hex digits) of the view's elements in C order, byte order as stored: the digest of
    ``np.ascontiguousarray(array)``, without that copy (at most :data:`SCRATCH_BYTES` gathered at a time)."""
    h = xxhash.xxh3_64()
    if array.size:
        scratch = np.empty(0 if array.flags.c_contiguous else min(SCRATCH_BYTES, array.nbytes), np.uint8)
        _feed(h, array, scratch)
    return h.hexdigest()


def hdf5_selection(array: np.ndarray) -> tuple[np.ndarray, tuple[int, ...], tuple[int, ...]] | None:
    """For a passable view: (span, memory dataspace dims, hyperslab count) such that the hyperslab at 0 with that
    count of an HDF5 memory dataspace of those dims over ``span`` selects the view's elements in C order; None
    when the strides do not nest (each axis' stride a multiple of the next one's, with room for its length),
    or for a contiguous view (no selection needed)."""
    if array.flags.c_contiguous or array.size == 0 or not passable(array):
        return None
    item = array.dtype.itemsize
    axes = [(n, s // item) for n, s in zip(array.shape, array.strides, strict=True) if n > 1]
    shape = [n for n, _ in axes]
    pitch = [e for _, e in axes]  # element strides, the last one 1 (passable)
    dims = [shape[0]]
    for k in range(1, len(axes)):
        if pitch[k - 1] % pitch[k] or pitch[k - 1] // pitch[k] < shape[k]:
            return None
        dims.append(pitch[k - 1] // pitch[k])
    if math.prod(shape) != array.size:
        return None
    return span(array), tuple(dims), tuple(shape)
