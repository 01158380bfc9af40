"""Memory described as byte runs, and the MPI datatypes that move it without packing.

The restart exchange (:meth:`ckptio.reader.Reader._exchange`) sends every piece straight from the aggregator's
read buffer and receives it straight into the caller's array, which may be a strided view (the interior of a
halo'd array, ``a[2:-2, 2:-2]``). Both sides describe their side of a message as the same byte stream: the
pieces in the canonical order, each piece's elements in C order. Here a piece is a list of *runs*
``(absolute address, length)``; a whole message becomes one hindexed datatype of ``MPI_BYTE`` used with
``MPI_BOTTOM`` (built with the classic constructor, :func:`ckptio.backends.rawio.hindexed`, which every MPI
library, ROMIO included, handles). Pure numpy except :func:`datatype`; everything is local.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_I64 = np.int64

EMPTY = (np.zeros(0, _I64), np.zeros(0, _I64))


def address(arr: np.ndarray) -> int:
    """The address of ``arr``'s first element (also for strided and negative-stride views)."""
    return int(arr.__array_interface__["data"][0])


def view_runs(view: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The runs of contiguous bytes of ``view``'s elements in C order: ``(addresses, lengths)``."""
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
        """The runs of the boxes ``arrays[which[i]][lo[i] : lo[i] + shape[i]]`` (padded box coordinates
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
            view = arr[tuple(slice(int(a), int(a + m)) for a, m in zip(lo[i, :k], shape[i, :k], strict=True))]
            ra, rn = view_runs(view)
            counts[i] = len(ra)
            out_a.append(ra)
            out_n.append(rn)
        if not out_a:
            return EMPTY[0], EMPTY[1], counts
        return np.concatenate(out_a), np.concatenate(out_n), counts

    def runs_by(self, peer: np.ndarray, which: np.ndarray, lo: np.ndarray, shape: np.ndarray
                ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """:meth:`runs` grouped by ``peer`` (order kept within a peer), adjacent runs merged."""
        addrs, lens, counts = self.runs(which, lo, shape)
        run_peer = np.repeat(peer, counts)
        order = np.argsort(run_peer, kind="stable")
        peers, starts = np.unique(run_peer[order], return_index=True)
        ends = np.append(starts[1:], len(order))
        return {int(p): merge(addrs[order[a:b]], lens[order[a:b]])
                for p, a, b in zip(peers.tolist(), starts.tolist(), ends.tolist(), strict=True)}


def merge(addrs: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Adjacent runs (one ends where the next starts) joined into one."""
    if len(addrs) <= 1:
        return addrs, lengths
    starts = np.flatnonzero(np.r_[True, addrs[1:] != addrs[:-1] + lengths[:-1]])
    return addrs[starts], np.add.reduceat(lengths, starts)


def byte_range(addrs: np.ndarray, lengths: np.ndarray, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """The runs holding bytes ``[start, stop)`` of the stream the runs describe (cut inside runs as needed)."""
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


def datatype(addrs: np.ndarray, lengths: np.ndarray):
    """A committed MPI datatype for ``MPI_BOTTOM`` covering these runs in order (the caller frees it)."""
    from .backends.rawio import hindexed

    return hindexed(lengths.tolist(), addrs.tolist())
