"""The write buffers the pnetcdf backend hands PnetCDF (:class:`~ckptio.backends.pnetcdf_write.PnetCDFWriteHandle`
posts them): CDF is big-endian, and with the file hint ``nc_in_place_swap=enable`` PnetCDF byte-swaps each
contiguous buffer in place when the put is posted and swaps it back once the write completed or failed
(``ncmpi_wait_all``; cancelled puts too, and ``ncmpi_close`` cancels what is still pending). So each buffer is
either the caller's array itself, where changing it for that moment is safe, or a private copy (:func:`swappable`).
Strided views go through PnetCDF's flexible API with an MPI memory datatype; PnetCDF packs them into a buffer of
its own (never the caller's memory). Local, no MPI calls but the datatype's construction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio.coord.datatypes import selection_type
from ckptio.model import memsel


@dataclass(frozen=True)
class WriteBuffer:
    """One put's buffer: ``data`` (a contiguous array, or the span of a strided view) and, for a view, the
    committed MPI memory datatype over its runs (the caller frees it once the write completed)."""

    data: np.ndarray
    memtype: Any = None


def write_buffers(arrays: Sequence[np.ndarray], swaps_in_place: bool) -> list[WriteBuffer]:
    """The buffers to post for ``arrays`` (the blocks' data, in order): native byte order (a copy of any other),
    :func:`swappable` when PnetCDF swaps in place (``swaps_in_place``), a memory datatype for strided views."""
    native = [a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("=")) for a in arrays]
    if swaps_in_place:
        native = swappable(native)
    out = []
    for a in native:
        if a.ndim and not a.flags.c_contiguous:
            span, memtype = selection_type(a)
            out.append(WriteBuffer(span, memtype))
        else:
            out.append(WriteBuffer(a))
    return out


def swappable(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each array itself where PnetCDF may swap it in place, else a private copy (which it then swaps). Safe: memory
    numpy allocated, writeable (:func:`ckptio.model.memsel.numpy_owned`: never a file mapping, ``bytes``, a C or
    Fortran caller's buffer or MPI shared memory) and shared with no other buffer of the same write
    (:func:`ckptio.model.memsel.overlapping`: an array posted twice would be swapped twice, and written unswapped).
    Strided views and one-byte types stay as they are (PnetCDF packs the former into its own buffer and never
    swaps the latter)."""
    shared = memsel.overlapping(arrays)
    return [a.copy() if a.flags.c_contiguous and a.dtype.itemsize > 1 and (shared[k] or not memsel.numpy_owned(a))
            else a for k, a in enumerate(arrays)]
