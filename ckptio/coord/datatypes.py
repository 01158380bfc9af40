"""Memory described as byte runs, and the MPI datatypes that move it without packing.

The restart exchange (:func:`ckptio.coord.exchange.move_pieces`) sends every piece straight from the aggregator's
read buffer and receives it straight into the caller's array, which may be a strided view (the interior of a
halo'd array, ``a[2:-2, 2:-2]``). Both sides describe their side of a message as the same byte stream: the
pieces in the canonical order, each piece's elements in C order. Here a piece is a list of *runs*
``(absolute address, length)``; a whole message becomes one hindexed datatype of ``MPI_BYTE`` used with
``MPI_BOTTOM`` (built with the classic constructor, :func:`hindexed`, which every MPI
library, ROMIO included, handles). Pure numpy except :func:`datatype`; everything is local.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio.errors import CheckpointIOError
from ckptio.model import memsel

_MAX_CHUNK = 1 << 30  # MPI counts are C ints: describe larger blocks as several 1 GiB pieces


def _classic_type_constructor():
    """``MPI_Type_create_hindexed`` (the classic, int-count constructor) of the MPI library mpi4py runs on.

    Why not ``MPI.BYTE.Create_hindexed``: mpi4py 4.x builds every derived type with the MPI-4 large-count
    constructor (``MPI_Type_create_hindexed_c``) whenever the library has one. ROMIO up to MPICH 4.0.x cannot
    flatten the large-count combiners (pmodels/mpich issue 6121, fixed in 4.1): ``MPI_File_set_view`` and
    collective transfers abort with "Out of memory in file adio/common/flatten.c" or "dtp_ != NULL".
    Open MPI 4.1 has no ``_c`` constructors, so it never showed there. mpi4py has no run-time switch for
    this (only a build-time one), so ckptio calls the classic constructor itself, through ctypes: the
    symbol is looked up from mpi4py's own extension module, whose dependencies include the MPI library it
    was linked against (whichever of mpi4py's MPI variants was loaded), so no library name is guessed.
    The MPI handle is an ``int`` in MPICH-family libraries and a pointer in Open MPI: its size says which.
    Local; cached after the first call.
    """
    global _CLASSIC
    if _CLASSIC is None:
        from ckptio.coord.mpi import MPI

        lib = ctypes.CDLL(MPI.__file__)
        fn = lib.MPI_Type_create_hindexed
        handle = ctypes.c_void_p if MPI._sizeof(MPI.Datatype) == ctypes.sizeof(ctypes.c_void_p) else ctypes.c_int
        if MPI._sizeof(MPI.Datatype) != ctypes.sizeof(handle):
            raise CheckpointIOError(f"unsupported MPI_Datatype handle size {MPI._sizeof(MPI.Datatype)}")
        if MPI.AINT.Get_size() != np.dtype(np.intp).itemsize:
            raise CheckpointIOError(f"unsupported MPI_Aint size {MPI.AINT.Get_size()}")
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, handle, ctypes.c_void_p]
        _CLASSIC = (fn, handle)
    return _CLASSIC


_CLASSIC: tuple[Any, Any] | None = None


def split_pieces(lengths: Sequence[int], displacements: Sequence[int], limit: int = _MAX_CHUNK, extent: int = 1
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Local: Pure: ``(lengths, displacements)`` without empty pieces and with every piece longer than ``limit``
    elements (of ``extent`` bytes; MPI block lengths are C ints) cut into pieces of at most ``limit``
    elements, in order; displacements in bytes; vectorized."""
    lens = np.asarray(lengths, np.int64)
    disps = np.asarray(displacements, np.int64)
    if len(lens) and int(lens.max()) > limit:
        pieces = (lens + limit - 1) // limit  # how many pieces each length becomes (0 for an empty one)
        first = np.repeat(np.cumsum(pieces) - pieces, pieces)
        within = np.arange(int(pieces.sum()), dtype=np.int64) - first  # piece number inside its length
        owner = np.repeat(np.arange(len(lens)), pieces)
        disps = disps[owner] + within * limit * extent
        lens = np.minimum(lens[owner] - within * limit, limit)
    keep = lens > 0
    return lens[keep], disps[keep]


def hindexed(lengths: Sequence[int], displacements: Sequence[int], oldtype=None):
    """A committed MPI hindexed type of ``oldtype`` (default ``MPI_BYTE``; lengths count its elements,
    displacements are in bytes) built with the classic constructor (see :func:`_classic_type_constructor`);
    pieces above 2**30 elements are split (int block lengths). Local."""
    from ckptio.coord.mpi import MPI

    oldtype = MPI.BYTE if oldtype is None else oldtype
    lens, disps = split_pieces(lengths, displacements, _MAX_CHUNK, oldtype.Get_extent()[1])
    if len(lens) > np.iinfo(np.intc).max:
        raise CheckpointIOError(f"{len(lens)} pieces in one MPI transfer: more than an MPI int count")
    fn, handle = _classic_type_constructor()
    c_lens = np.asarray(lens, dtype=np.intc)
    c_disps = np.asarray(disps, dtype=np.intp)
    base = handle.from_address(MPI._addressof(oldtype)).value
    newtype = MPI.Datatype()
    err = fn(len(lens), c_lens.ctypes.data, c_disps.ctypes.data, base, MPI._addressof(newtype))
    if err != MPI.SUCCESS:
        raise MPI.Exception(err)
    return newtype.Commit()


_I64 = np.int64

EMPTY = (np.zeros(0, _I64), np.zeros(0, _I64))


def address(arr: np.ndarray) -> int:
    """Local: The address of ``arr``'s first element (also for strided and negative-stride views). Through
    mpi4py's buffer protocol where MPI is loaded and the array is contiguous (0.35 us against numpy's
    ``__array_interface__`` dict, 1.5 us: a restart of 10,000 small variables asks 12,500 times on an
    aggregator); never imports MPI itself (``ckptio inspect --verify`` runs without an MPI job)."""
    buffer = _mpi_buffer or _loaded_mpi_buffer()
    if buffer is not None:
        try:
            return buffer(arr).address
        except (BufferError, ValueError, TypeError):  # not contiguous (a strided view): numpy says it
            pass
    return int(arr.__array_interface__["data"][0])


_mpi_buffer: Any = None  # mpi4py's MPI.buffer, once MPI is loaded


def _loaded_mpi_buffer() -> Any:
    """Local: mpi4py's ``MPI.buffer`` if MPI is loaded (kept for the next call), else None."""
    global _mpi_buffer
    module = sys.modules.get("mpi4py.MPI")
    if module is not None:
        _mpi_buffer = module.buffer
    return _mpi_buffer


def view_runs(view: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Local: The runs of contiguous bytes of ``view``'s elements in C order: ``(addresses, lengths)``."""
    if view.size == 0:
        return EMPTY
    dims = [(int(n), int(s)) for n, s in zip(view.shape, view.strides, strict=True) if n != 1]
    run = view.itemsize
    while dims and dims[-1][1] == run:
        run *= dims[-1][0]
        dims.pop()
    offsets = np.zeros(1, _I64)
    for n, s in dims:  # outer axes first: C order
        offsets = (offsets[:, None] + np.arange(n, dtype=_I64)[None, :] * s).reshape(-1)
    return address(view) + offsets, np.full(len(offsets), run, _I64)


class ArrayTable:
    """Arrays whose boxes are described as runs: addresses, padded shapes (``ndim`` axes, trailing extents 1),
    item sizes and C-contiguity, gathered once per exchange."""

    def __init__(self, arrays: Sequence[np.ndarray], ndim: int):
        """Local."""
        self.arrays = arrays
        self.ndim = ndim
        self.shapes = np.ones((len(arrays), ndim), _I64)
        self.base = np.zeros(len(arrays), _I64)
        self.item = np.zeros(len(arrays), _I64)
        self.contig = np.zeros(len(arrays), bool)
        for a, arr in enumerate(arrays):
            self.shapes[a, :arr.ndim] = arr.shape
            self.base[a], self.item[a] = address(arr), arr.itemsize
            self.contig[a] = arr.flags.c_contiguous

    def runs(self, which: np.ndarray, lo: np.ndarray, shape: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Local: The runs of the boxes ``arrays[which[i]][lo[i] : lo[i] + shape[i]]`` (padded box coordinates
        relative to the array's first element), in order, and how many runs each box has.

        Vectorized for the common case, a box that is one contiguous stretch of a C-contiguous array (whole
        trailing axes: FLASH blocks, bands); other boxes (strided output views, sub-boxes of a block) go
        through :func:`view_runs`, one run per contiguous row."""
        n = len(which)
        if n == 0:
            return EMPTY[0], EMPTY[1], np.zeros(0, _I64)
        nd = self.ndim
        full = self.shapes[which]
        estrides = np.ones_like(full)  # element strides of a C-contiguous array: suffix products of its shape
        if nd > 1:
            estrides[:, :-1] = np.cumprod(full[:, :0:-1], axis=1)[:, ::-1]
        differs = shape != full
        last = np.where(differs.any(axis=1), nd - 1 - np.argmax(differs[:, ::-1], axis=1), -1)
        ones_before = (shape == 1) | (np.arange(nd)[None, :] >= last[:, None])
        fast = self.contig[which] & ones_before.all(axis=1)
        item = self.item[which]
        addr = self.base[which] + (lo * estrides).sum(axis=1) * item
        length = shape.prod(axis=1) * item
        counts = (length > 0).astype(_I64)
        if fast.all():
            keep = length > 0
            return addr[keep], length[keep], counts
        out_a: list[np.ndarray] = []
        out_n: list[np.ndarray] = []
        for i in range(n):
            if fast[i]:
                if length[i]:
                    out_a.append(addr[i:i + 1])
                    out_n.append(length[i:i + 1])
                continue
            arr = self.arrays[int(which[i])]
            k = arr.ndim
            view = arr[(*(slice(int(a), int(a + m)) for a, m in zip(lo[i, :k], shape[i, :k], strict=True)),
                        Ellipsis)]  # `...`: a 0-d array gives a view, not a scalar copy
            ra, rn = view_runs(view)
            counts[i] = len(ra)
            out_a.append(ra)
            out_n.append(rn)
        if not out_a:
            return EMPTY[0], EMPTY[1], counts
        return np.concatenate(out_a), np.concatenate(out_n), counts

    def streams(self, peer: np.ndarray, which: np.ndarray, lo: np.ndarray, shape: np.ndarray,
                request: np.ndarray) -> dict[int, Stream]:
        """Local: The boxes as one :class:`Stream` per ``peer``; ``peer`` must be sorted (pieces keep their order within
        a peer); ``request`` tags each piece for :func:`message_starts`."""
        addrs, lens, counts = self.runs(which, lo, shape)
        sizes = shape.prod(axis=1) * self.item[which]
        run_end = np.cumsum(counts)
        peers, first = np.unique(peer, return_index=True)
        last = np.append(first[1:], len(peer))
        out = {}
        for p, a, b in zip(peers.tolist(), first.tolist(), last.tolist(), strict=True):
            ra, rb = (int(run_end[a - 1]) if a else 0), int(run_end[b - 1])
            out[int(p)] = Stream(*merge(addrs[ra:rb], lens[ra:rb]), sizes[a:b], request[a:b])
        return out


@dataclass
class Stream:
    """What one rank moves to (or from) one peer in one round: its memory as runs, and its pieces' sizes and
    requests (which both sides know alike, so both cut the stream into the same messages)."""

    addrs: np.ndarray
    lengths: np.ndarray
    sizes: np.ndarray
    requests: np.ndarray

    @property
    def nbytes(self) -> int:
        """Local."""
        return int(self.sizes.sum())

    def messages(self, small: int, group: int, limit: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Local: The runs of each message (see :func:`message_starts`)."""
        return cut(self.addrs, self.lengths, message_starts(self.sizes, self.requests, small, group, limit))


def merge(addrs: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Local: Adjacent runs (one ends where the next starts) joined into one."""
    if len(addrs) <= 1:
        return addrs, lengths
    starts = np.flatnonzero(np.r_[True, addrs[1:] != addrs[:-1] + lengths[:-1]])
    return addrs[starts], np.add.reduceat(lengths, starts)


def byte_range(addrs: np.ndarray, lengths: np.ndarray, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Local: The runs holding bytes ``[start, stop)`` of the stream the runs describe (cut inside runs as needed)."""
    ends = np.cumsum(lengths)
    begins = ends - lengths
    sel = (ends > start) & (begins < stop)
    a, n, b = addrs[sel].copy(), lengths[sel].copy(), begins[sel]
    if len(a):
        cut = np.maximum(start - b, 0)
        a += cut
        n -= cut
        n -= np.maximum(b + lengths[sel] - stop, 0)
    return a, n


def cut(addrs: np.ndarray, lengths: np.ndarray, starts: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Local: The runs cut into consecutive messages: message ``m`` holds bytes ``[starts[m], starts[m + 1])`` of the
    stream (the last one to its end; ``starts[0]`` is 0), runs split where a message boundary falls inside."""
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    begins = ends - lengths
    points = np.union1d(begins[lengths > 0], starts[(starts > 0) & (starts < total)])  # segment starts
    seg_len = np.diff(np.append(points, total))
    run = np.searchsorted(ends, points, side="right")
    seg_addr = addrs[run] + (points - begins[run])
    bounds = np.searchsorted(points, np.append(starts, total))
    return [(seg_addr[a:b], seg_len[a:b]) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)]


def message_starts(sizes: np.ndarray, request: np.ndarray, small: int, group: int, limit: int) -> np.ndarray:
    """Local: Where the messages of one peer's stream start (byte positions, the first 0), from its pieces' byte
    ``sizes`` and the requests they belong to, in stream order; both sides of the exchange compute the same.

    Consecutive pieces of one request share a message (on both sides they are usually adjacent in memory, so
    it is one contiguous buffer, which MPI moves with a single copy); a new message starts at a request
    boundary once the current one or the next piece holds ``small`` bytes (small pieces of many requests travel
    together, a large one travels alone), before a piece that would take it past ``group`` bytes, and every
    ``limit`` bytes inside a larger piece (MPI counts are C ints)."""
    starts = [0]
    pos = 0
    current = 0
    prev = None
    for n, q in zip(sizes.tolist(), request.tolist(), strict=True):
        if current and ((q != prev and (current >= small or n >= small)) or current + n > group):
            starts.append(pos)
            current = 0
        prev = q
        while current + n > limit:  # only a piece larger than a message can be: cut it
            take = limit - current
            pos += take
            n -= take
            starts.append(pos)
            current = 0
        pos += n
        current += n
    return np.array(starts, _I64)


def buffer_at(addr: int, nbytes: int):
    """Local: A writable buffer object over ``nbytes`` of memory at ``addr`` (a contiguous message's memory)."""
    import ctypes

    return (ctypes.c_char * nbytes).from_address(addr)


def datatype(addrs: np.ndarray, lengths: np.ndarray):
    """Local: A committed MPI datatype for ``MPI_BOTTOM`` covering these runs in order (the caller frees it). The
    int64 arrays go to the constructor as they are (Python lists of them would cost ~70 bytes a run: a write round's
    sender describes one run per row of a halo'd interior)."""
    return hindexed(lengths, addrs)


def buffers_type(buffers: Sequence[tuple[int, Any]]):
    """Local: A committed hindexed type of ``MPI_BYTE`` for ``MPI_BOTTOM`` over the ``(nbytes, buffer)`` pairs'
    bytes in order (the caller frees it): one run per contiguous buffer, one per run of a strided numpy view (a
    memory selection, :mod:`ckptio.model.memsel`: its elements in C order), so a file transfer moves the caller's
    memory without packing. CheckpointIOError when a strided buffer does not hold exactly its ``nbytes``."""
    from ckptio.coord.mpi import MPI

    lengths: list[np.ndarray] = []
    addresses: list[np.ndarray] = []
    for n, b in buffers:
        if isinstance(b, np.ndarray) and not b.flags.c_contiguous:
            if b.nbytes != n or not memsel.passable(b):
                raise CheckpointIOError(f"internal error: a strided buffer of {b.nbytes} bytes (strides {b.strides}) "
                                        f"for a file piece of {n} bytes")
            offsets, run = memsel.runs(b)
            lengths.append(np.full(offsets.size, run, _I64))
            addresses.append(offsets + memsel.address(b))
        else:
            lengths.append(np.array([n], _I64))
            addresses.append(np.array([MPI.Get_address(b)], _I64))
    return hindexed(np.concatenate(lengths), np.concatenate(addresses))


def selection_type(view: np.ndarray) -> tuple[np.ndarray, Any]:
    """Local: A strided view (a memory selection, :mod:`ckptio.model.memsel`) as an MPI call with an element type
    takes it: ``(span, memtype)``, the view's :func:`~ckptio.model.memsel.span` as the buffer and a committed hindexed
    type of the element type over the view's runs relative to it (PnetCDF's flexible API takes the element type
    from it); the caller frees the type once the transfer completed. Built with the classic constructor
    (:func:`hindexed`)."""
    from mpi4py.util.dtlib import from_numpy_dtype

    offsets, run = memsel.runs(view)
    element = from_numpy_dtype(view.dtype)
    return memsel.span(view), hindexed(np.full(offsets.size, run // view.dtype.itemsize, _I64), offsets, element)
