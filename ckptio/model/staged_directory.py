"""The staged restart's distributed directory: which rank holds which staged block, without any rank knowing all.

A staged checkpoint (:mod:`ckptio.tiers.staging`) is read back by the ranks that wrote it, each holding its own blocks
(memory-mapped from its node's stage). A request of any rank may need blocks of any others. Instead of gathering
every rank's block list on every rank (O(P) per rank), each variable's index space is cut into at most P tiles,
and each tile has a *directory rank* (:class:`Directory`):

1. at open, every rank sends each of its blocks' descriptions to the directory ranks of the tiles the block meets;
2. per read, every rank sends each request to the directory ranks of the tiles it meets;
3. each directory rank intersects the requests it received with the blocks it knows (:func:`match`) and tells
   both the block's owner and the requester about each piece (:func:`piece_descriptors`); a piece is reported
   by exactly one directory rank, the one owning the tile of the piece's lower corner (which both the block
   and the request meet, so that rank knows both);
4. owners send the pieces straight to the requesters, both sides ordering a peer's pieces alike
   (:func:`canonical_order`).

Tiles are balanced boxes: the axis whose tiles are longest is halved until there are P/2 to P tiles (fewer for a
small variable), so tiles follow the data's extent whatever the decomposition. For a weak-scaled job (the data
and the requests per rank fixed, P growing) a block or a request meets a bounded number of tiles and a tile a
bounded number of blocks and requests: what every rank receives is O(its own blocks, requests and pieces + the
peers it exchanges with), independent of P (``tests/test_staged_directory.py`` measures it at 16, 64 and 1024
simulated ranks). A request that reads what many ranks wrote (the whole array) meets many tiles, as its data
does.

Pure: numpy only, no MPI, no files. Records are int64 rows with boxes padded to ``ndim`` axes (offset 0, extent
1); :mod:`ckptio.tiers.staged_reader` moves them with :func:`ckptio.coord.exchange.sparse_records`.

Record layouts (``lo``, ``shape``: ``ndim`` columns each)
    block, as published:       ``[k, var, lo, shape]``           (``k``: the block's index in its owner's piece)
    block, at its directory:   ``[owner, k, var, lo, shape]``
    request, as sent:          ``[qi, var, lo, shape]``          (``qi``: the request's index in its rank's call)
    request, at its directory: ``[src, qi, var, lo, shape]``
    piece descriptor:          ``[kind, peer, qi, k, lo, shape]`` (kind ``SEND``: to the owner, ``peer`` is the
                                                                  requester; kind ``RECV``: to the requester,
                                                                  ``peer`` is the owner)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ckptio.model.joined_blocks import concatenated_ranges as _ranges

_I64 = np.int64
SEND, RECV = 0, 1


def tiles_per_axis(shape: Sequence[int], nranks: int) -> np.ndarray:
    """Local: how many tiles cut each axis of an array of ``shape`` among ``nranks`` directory ranks: the axis
    with the longest tiles is halved (while it has two cells per tile) until one more halving would make more
    than ``nranks`` tiles."""
    full = np.asarray(shape, _I64)
    tiles = np.ones(len(full), _I64)
    while len(full) and int(tiles.prod()) * 2 <= nranks:
        splittable = tiles * 2 <= full
        if not splittable.any():
            break
        extent = -(-full // tiles)
        axis = int(np.argmax(np.where(splittable, extent, -1)))
        tiles[axis] *= 2
    return tiles


@dataclass(frozen=True)
class Directory:
    """The tiles of every variable of a staged checkpoint read on ``nranks`` ranks, and their directory ranks.
    Built alike on every rank from the variables' global shapes (in the variables' agreed order)."""

    nranks: int
    ndim: int
    tiles: np.ndarray    # [V, ndim]: tiles per axis (1 on padded axes)
    extent: np.ndarray   # [V, ndim]: a tile's extent per axis (>= 1)
    first: np.ndarray    # [V]: directory rank of each variable's tile 0 (variables rotate over the ranks)

    @classmethod
    def build(cls, shapes: Sequence[Sequence[int]], nranks: int) -> Directory:
        """Local: the directory of variables of these global shapes (padded to the largest rank of shape)."""
        ndim = max([len(s) for s in shapes] + [1])
        tiles = np.ones((len(shapes), ndim), _I64)
        extent = np.ones((len(shapes), ndim), _I64)
        for v, shape in enumerate(shapes):
            t = tiles_per_axis(shape, nranks)
            tiles[v, :len(shape)] = t
            extent[v, :len(shape)] = np.maximum(-(-np.asarray(shape, _I64) // t), 1)
        first = (np.arange(len(shapes), dtype=_I64) * nranks) // max(len(shapes), 1)
        return cls(nranks, ndim, tiles, extent, first)

    def _rank(self, var: int, tile: np.ndarray) -> np.ndarray:
        """Local: directory ranks of tiles given as per-axis tile indices (rows)."""
        linear = np.ravel_multi_index(tuple(tile.T), tuple(self.tiles[var].tolist()))
        return (self.first[var] + linear) % self.nranks

    def ranks_of(self, var: int, lo: np.ndarray, shape: np.ndarray) -> np.ndarray:
        """Local: the directory ranks of the tiles the padded box ``lo``/``shape`` of variable ``var`` meets
        (sorted, unique; none for an empty box)."""
        if not (shape > 0).all():
            return np.zeros(0, _I64)
        ext, tiles = self.extent[var], self.tiles[var]
        first = np.minimum(lo // ext, tiles - 1)
        last = np.minimum((lo + shape - 1) // ext, tiles - 1)
        axes = [np.arange(a, b + 1, dtype=_I64) for a, b in zip(first.tolist(), last.tolist(), strict=True)]
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, self.ndim)
        return np.unique(self._rank(var, grid))

    def owner_of_points(self, var: np.ndarray, points: np.ndarray) -> np.ndarray:
        """Local: the directory rank of the tile holding each point (``var[i]``, ``points[i]``)."""
        out = np.zeros(len(var), _I64)
        for v in np.unique(var).tolist():
            sel = var == v
            tile = np.minimum(points[sel] // self.extent[v], self.tiles[v] - 1)
            out[sel] = self._rank(v, tile)
        return out

    def route(self, rows: np.ndarray, var_col: int) -> dict[int, np.ndarray]:
        """Local: records (each with its variable in column ``var_col``, then its padded ``lo`` and ``shape``)
        grouped by the directory ranks of the tiles they meet (a record meeting several tiles of one directory
        rank goes there once)."""
        nd = self.ndim
        dest: list[np.ndarray] = []
        which: list[np.ndarray] = []
        for i in range(len(rows)):
            lo, shape = rows[i, var_col + 1:var_col + 1 + nd], rows[i, var_col + 1 + nd:var_col + 1 + 2 * nd]
            ranks = self.ranks_of(int(rows[i, var_col]), lo, shape)
            dest.append(ranks)
            which.append(np.full(len(ranks), i, _I64))
        d = np.concatenate(dest) if dest else np.zeros(0, _I64)
        if not len(d):
            return {}
        w = np.concatenate(which)
        order = np.argsort(d, kind="stable")
        d, w = d[order], w[order]
        starts = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
        ends = np.append(starts[1:], len(d))
        return {int(d[a]): rows[w[a:b]] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)}


def match(directory: Directory, me: int, blocks: np.ndarray, requests: np.ndarray) -> np.ndarray:
    """Local, a directory rank ``me``: the pieces it reports, ``[owner, k, src, qi, lo, shape]`` rows: every
    nonempty intersection of a request it received (``[src, qi, var, lo, shape]``) with a block it knows
    (``[owner, k, var, lo, shape]``) whose lower corner lies in one of ``me``'s tiles (so each piece is reported
    once, by one directory rank). Candidates are found per variable by a window on the leading axis (blocks
    sorted by their first coordinate), as :func:`ckptio.model.readplan.match_requests` does."""
    nd = directory.ndim
    out = []
    for v in np.intersect1d(blocks[:, 2], requests[:, 2]).tolist():
        b = blocks[blocks[:, 2] == v]
        b = b[np.argsort(b[:, 3], kind="stable")]
        q = requests[requests[:, 2] == v]
        b_lo, b_hi = b[:, 3:3 + nd], b[:, 3:3 + nd] + b[:, 3 + nd:3 + 2 * nd]
        q_lo, q_hi = q[:, 3:3 + nd], q[:, 3:3 + nd] + q[:, 3 + nd:3 + 2 * nd]
        longest = int((b_hi[:, 0] - b_lo[:, 0]).max())
        a = np.searchsorted(b_lo[:, 0], q_lo[:, 0] - longest, side="right")
        counts = np.maximum(np.searchsorted(b_lo[:, 0], q_hi[:, 0], side="left") - a, 0)
        qi = np.repeat(np.arange(len(q), dtype=_I64), counts)
        bi = _ranges(a, counts)
        lo = np.maximum(q_lo[qi], b_lo[bi])
        hi = np.minimum(q_hi[qi], b_hi[bi])
        meet = (hi > lo).all(axis=1)
        qi, bi, lo, hi = qi[meet], bi[meet], lo[meet], hi[meet]
        mine = directory.owner_of_points(np.full(len(lo), v, _I64), lo) == me
        qi, bi, lo, hi = qi[mine], bi[mine], lo[mine], hi[mine]
        out.append(np.column_stack([b[bi, 0], b[bi, 1], q[qi, 0], q[qi, 1], lo, hi - lo]).astype(_I64))
    return np.concatenate(out) if out else np.zeros((0, 4 + 2 * nd), _I64)


def piece_descriptors(pieces: np.ndarray) -> dict[int, np.ndarray]:
    """Local, a directory rank: its pieces (``[owner, k, src, qi, lo, shape]``) as descriptors by destination:
    to each owner ``[SEND, requester, qi, k, lo, shape]``, to each requester ``[RECV, owner, qi, k, lo, shape]``
    (one row each; a rank that is both gets both)."""
    if not len(pieces):
        return {}
    owner, k, src, qi, box = pieces[:, 0], pieces[:, 1], pieces[:, 2], pieces[:, 3], pieces[:, 4:]
    n = len(pieces)
    rows = np.concatenate([
        np.column_stack([np.full(n, SEND, _I64), src, qi, k, box]),
        np.column_stack([np.full(n, RECV, _I64), owner, qi, k, box])])
    dest = np.concatenate([owner, src])
    order = np.argsort(dest, kind="stable")
    dest, rows = dest[order], rows[order]
    starts = np.flatnonzero(np.r_[True, dest[1:] != dest[:-1]])
    ends = np.append(starts[1:], len(dest))
    return {int(dest[a]): rows[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)}


def canonical_order(rows: np.ndarray, ndim: int) -> np.ndarray:
    """Local: descriptors (``[kind, peer, qi, k, lo, shape]``) sorted by peer, then request, then lower corner:
    the order in which an owner sends a requester's pieces and the requester receives them, computed alike on
    both sides (pieces of one request from one owner are disjoint, so their lower corners differ)."""
    if not len(rows):
        return rows
    keys = [rows[:, 4 + a] for a in reversed(range(ndim))] + [rows[:, 2], rows[:, 1]]
    return rows[np.lexsort(keys)]
