"""Where a checkpoint's bytes lie, as columns of numpy arrays instead of one Python object per block. Pure: no
MPI, no files.

An :class:`ExtentTable` is the columnar form of the backends' :class:`ckptio.model.plan.Extent` lists: row ``i`` is a
contiguous byte range of the file (``file_offset[i]``, ``nbytes[i]``) holding the C-ordered box
``[lo[i], lo[i] + shape[i])`` of variable ``names[var[i]]``, stored with codec ``codecs[codec[i]]`` (-1: raw).
Boxes are padded to ``ndim`` columns (the most dimensions of any variable) with offset 0 and extent 1, so the
padded box has the same size and intersections as the real one. The writer blocks an extent holds entirely
(whose checksums its reader verifies) are a CSR list: rows ``vptr[i]:vptr[i + 1]`` of the ``v*`` columns
(block index within its variable, writing rank, box, xxh3-64 checksum as an unsigned 64-bit integer).

At 7,620 ranks x 24 variables (183,000 blocks) the table is ~30 MB of arrays where the list of Extent
objects was ~300 MB of Python objects; it is what rank 0 partitions among the restart aggregators
(:mod:`ckptio.model.readplan`), each of which receives only its own rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio.model.block_table import BlockTable
from ckptio.model.document import CheckpointDocument, VariableRecord, variables_of
from ckptio.model.joined_blocks import JoinedBlocks
from ckptio.model.joined_blocks import concatenated_ranges as _ranges
from ckptio.model.layout import Box
from ckptio.model.plan import Extent

_I64 = np.int64
_I64_LIMIT = 1 << 63  # offsets and sizes numpy's int64 columns hold


@dataclass
class ExtentTable:
    names: list[str]          # variable names; ``var`` indexes this list
    var_ndim: np.ndarray      # int32 [nvars]: the real number of dimensions of each variable
    codecs: list[str]         # codec names; ``codec`` indexes this list (-1: stored raw)
    var: np.ndarray           # int32 [n]
    lo: np.ndarray            # int64 [n, ndim]
    shape: np.ndarray         # int64 [n, ndim]
    file_offset: np.ndarray   # int64 [n]
    nbytes: np.ndarray        # int64 [n]
    codec: np.ndarray         # int16 [n]
    vptr: np.ndarray          # int64 [n + 1]
    vblock: np.ndarray        # int64 [m]: block index within its variable
    vrank: np.ndarray         # int32 [m]: the rank that wrote the block
    vlo: np.ndarray           # int64 [m, ndim]
    vshape: np.ndarray        # int64 [m, ndim]
    vsum: np.ndarray          # uint64 [m]: xxh3-64 of the block's elements

    @property
    def ndim(self) -> int:
        return int(self.lo.shape[1])

    def __len__(self) -> int:
        return int(self.var.shape[0])

    @property
    def nbytes_total(self) -> int:
        return int(self.nbytes.sum())

    def memory_bytes(self) -> int:
        """Bytes held by the table's arrays."""
        arrays = {id(a): a for a in (getattr(self, f) for f in (
            "var_ndim", "var", "lo", "shape", "file_offset", "nbytes", "codec", "vptr", "vblock", "vrank", "vlo",
            "vshape", "vsum"))}  # the verify columns may be the extent columns themselves (one block per extent)
        return sum(a.nbytes for a in arrays.values())

    def box(self, i: int) -> Box:
        """Row ``i``'s box in its variable's real dimensions."""
        nd = int(self.var_ndim[self.var[i]])
        return Box(tuple(int(x) for x in self.lo[i, :nd]), tuple(int(x) for x in self.shape[i, :nd]))

    def extent(self, i: int) -> Extent:
        """Row ``i`` as the backends' :class:`Extent` (for an :class:`ExtentReader`): verify entries carry the
        block index and the checksum as 16 hex digits."""
        nd = int(self.var_ndim[self.var[i]])
        verify = tuple((int(self.vblock[j]), Box(tuple(self.vlo[j, :nd].tolist()), tuple(self.vshape[j, :nd].tolist())),
                        f"{int(self.vsum[j]):016x}") for j in range(int(self.vptr[i]), int(self.vptr[i + 1])))
        c = int(self.codec[i])
        return Extent(self.names[self.var[i]], self.box(i), int(self.file_offset[i]), int(self.nbytes[i]), verify,
                      None, self.codecs[c] if c >= 0 else None)

    def take(self, rows: np.ndarray) -> ExtentTable:
        """The sub-table of ``rows`` (in that order), with their verify entries."""
        rows = np.asarray(rows, dtype=_I64)
        counts = self.vptr[rows + 1] - self.vptr[rows]
        vptr = np.zeros(len(rows) + 1, _I64)
        np.cumsum(counts, out=vptr[1:])
        vrows = _ranges(self.vptr[rows], counts)
        return ExtentTable(self.names, self.var_ndim, self.codecs, self.var[rows], self.lo[rows], self.shape[rows],
                           self.file_offset[rows], self.nbytes[rows], self.codec[rows], vptr, self.vblock[vrows],
                           self.vrank[vrows], self.vlo[vrows], self.vshape[vrows], self.vsum[vrows])

    def to_arrays(self) -> dict[str, Any]:
        """A message of plain numpy arrays and lists (sent to an aggregator; no Python object per row)."""
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    @classmethod
    def from_arrays(cls, d: Mapping[str, Any]) -> ExtentTable:
        return cls(**d)

    # The builders a backend's ``extent_table`` picks from (the module functions below)
    @classmethod
    def of_blocks(cls, meta: CheckpointDocument | Mapping[str, Any]) -> ExtentTable:
        """One extent per block of the block table (the native format): :func:`from_blocks`."""
        return from_blocks(meta)

    @classmethod
    def of_bands(cls, meta: CheckpointDocument | Mapping[str, Any]) -> ExtentTable:
        """Each contiguous variable cut into leading-axis bands (HDF5, netCDF): :func:`from_bands`."""
        return from_bands(meta)

    @classmethod
    def of_extents(cls, meta: CheckpointDocument | Mapping[str, Any], extents: Sequence[Extent]) -> ExtentTable:
        """Any backend's ``extents`` list as columns: :func:`from_extents`."""
        return from_extents(meta, extents)


def _checksum_ints(hexes: Sequence[str]) -> np.ndarray:
    return np.array([int(h, 16) for h in hexes], dtype=np.uint64)


class _Builder:
    """Accumulates per-variable column chunks, then concatenates them once."""

    def __init__(self, variables: Mapping[str, VariableRecord]):
        self.names = list(variables)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.var_ndim = np.array([len(v.shape) for v in variables.values()], np.int32)
        self.ndim = max(1, int(self.var_ndim.max())) if len(self.names) else 1
        self.codecs: list[str] = []
        self.chunks: dict[str, list[np.ndarray]] = {k: [] for k in (
            "var", "lo", "shape", "file_offset", "nbytes", "codec", "vcount", "vblock", "vrank", "vlo", "vshape",
            "vsum")}

    def pad(self, rows: np.ndarray, fill: int) -> np.ndarray:
        """2-D ``rows`` (n, d <= ndim) widened to (n, ndim) with ``fill``."""
        rows = np.asarray(rows, _I64)
        if rows.shape[1] == self.ndim:
            return rows
        out = np.full((rows.shape[0], self.ndim), fill, _I64)
        out[:, :rows.shape[1]] = rows
        return out

    def codec_ids(self, codecs: Sequence[str | None]) -> np.ndarray:
        out = np.full(len(codecs), -1, np.int16)
        for i, c in enumerate(codecs):
            if c is not None:
                if c not in self.codecs:
                    self.codecs.append(c)
                out[i] = self.codecs.index(c)
        return out

    def table_codec_ids(self, table: BlockTable, rows: np.ndarray) -> np.ndarray:
        """The codec ids (into :attr:`codecs`) of ``rows`` of a block table, vectorized."""
        remap = np.concatenate(([-1], self.codec_ids(table.codecs))).astype(np.int16)
        return remap[table.codec[rows] + 1]

    def add(self, **cols: np.ndarray) -> None:
        for k, v in cols.items():
            self.chunks[k].append(v)

    def build(self) -> ExtentTable:
        """The table, rows in file order. Column by column, so the peak is the table plus one column (a table
        of 2.4 million rows is ~270 MB); the verify columns share the extent columns' arrays where every
        extent holds exactly its own block (the native format)."""
        vcount = self._column("vcount", _I64)
        offsets = self._column("file_offset", _I64, pop=False)
        order = np.argsort(offsets, kind="stable") if len(offsets) and (np.diff(offsets) < 0).any() else None
        del offsets
        one_each = bool((vcount == 1).all()) and all(
            v is e for key in ("lo", "shape") for v, e in zip(self.chunks["v" + key], self.chunks[key], strict=True))
        if not one_each:  # verify lists of several blocks: assemble in stored order, permute through take()
            table = self._assemble(vcount, None, one_each)
            return table.take(order) if order is not None else table
        return self._assemble(vcount, order, one_each)

    def _column(self, key: str, dtype, width: int | None = None, order: np.ndarray | None = None,
                pop: bool = True) -> np.ndarray:
        parts = self.chunks.pop(key) if pop else self.chunks[key]
        if not parts:
            return np.zeros((0, width) if width else 0, dtype)
        out = np.concatenate(parts).astype(dtype, copy=False)
        return out[order] if order is not None else out

    def _assemble(self, vcount: np.ndarray, order: np.ndarray | None, one_each: bool) -> ExtentTable:
        """The table from the chunks, every row permuted by ``order`` (only when each row verifies one block)."""
        nd = self.ndim
        vptr = np.zeros(len(vcount) + 1, _I64)
        np.cumsum(vcount, out=vptr[1:])
        lo, shape = self._column("lo", _I64, nd, order), self._column("shape", _I64, nd, order)
        if one_each:
            vlo, vshape = lo, shape
        else:
            vlo, vshape = self._column("vlo", _I64, nd, order), self._column("vshape", _I64, nd, order)
        return ExtentTable(self.names, self.var_ndim, self.codecs, self._column("var", np.int32, None, order), lo,
                           shape, self._column("file_offset", _I64, None, order),
                           self._column("nbytes", _I64, None, order), self._column("codec", np.int16, None, order),
                           vptr, self._column("vblock", _I64, None, order),
                           self._column("vrank", np.int32, None, order), vlo, vshape,
                           self._column("vsum", np.uint64, None, order))


def _block_columns(b: _Builder, t: BlockTable) -> tuple[np.ndarray, ...]:
    """(index, rank, lo, shape, checksum) of a variable's non-empty blocks, padded."""
    keep = np.flatnonzero(t.shape.prod(axis=1) > 0) if len(t) else np.zeros(0, _I64)
    return (keep.astype(_I64), t.rank[keep].astype(np.int32), b.pad(t.offset[keep], 0), b.pad(t.shape[keep], 1),
            t.checksum[keep])


def from_blocks(meta: CheckpointDocument | Mapping[str, Any]) -> ExtentTable:
    """The native format: every non-empty block is one extent at its ``file_offset`` (possibly compressed).
    ``meta``: the document (its ``variables`` are all that is read; the dict form too).

    All variables' block tables are joined column by column, one concatenation per column (a checkpoint of
    thousands of small variables costs a few numpy calls, not a few per variable)."""
    variables = variables_of(meta)
    b = _Builder(variables)
    tables = [var.block_table() for var in variables.values()]
    j = (meta.joined_blocks(b.ndim) if isinstance(meta, CheckpointDocument)
         else JoinedBlocks.of(tables, b.var_ndim.tolist(), b.ndim))
    if not len(j.var):
        return b.build()
    codec = np.full(len(j.var), -1, np.int16)
    for i in np.flatnonzero(j.counts).tolist():  # only the variables with compressed blocks name codecs
        if tables[i].codecs:
            codec[j.starts[i]:j.starts[i] + j.counts[i]] = b.table_codec_ids(tables[i], np.arange(j.counts[i]))
    keep = np.flatnonzero(j.shape.prod(axis=1) > 0)
    lo, shape = j.lo[keep], j.shape[keep]
    b.add(var=j.var[keep], lo=lo, shape=shape, file_offset=j.file_offset[keep], nbytes=j.stored_nbytes[keep],
          codec=codec[keep], vcount=np.ones(len(keep), _I64), vblock=j.block[keep],
          vrank=j.rank[keep].astype(np.int32), vlo=lo, vshape=shape, vsum=j.checksum[keep])
    return b.build()


def from_bands(meta: CheckpointDocument | Mapping[str, Any]) -> ExtentTable:
    """Variables stored as one C-ordered array at ``storage.file_offset`` (HDF5, netCDF): the columnar form of
    :func:`backends.rawio.leading_axis_bands` (same bands, same verify lists), vectorized: writer blocks whose
    leading-axis intervals overlap share a band (connected components of the sorted intervals)."""
    variables = variables_of(meta)
    b = _Builder(variables)
    done = _vector_bands(b, variables)
    for vi, var in enumerate(variables.values()):
        if done[vi]:
            continue
        gshape = var.shape
        base = None if var.storage is None else var.storage.file_offset
        if math.prod(gshape) == 0 or base is None:
            continue
        itemsize = np.dtype(var.dtype).itemsize
        idx, rank, lo, shape, sums = _block_columns(b, var.block_table())
        if not gshape:  # a scalar: one element, one extent holding its block(s)
            b.add(var=np.full(1, vi, np.int32), lo=b.pad(np.zeros((1, 0), _I64), 0),
                  shape=b.pad(np.zeros((1, 0), _I64), 1),
                  file_offset=np.array([base], _I64), nbytes=np.array([itemsize], _I64), codec=np.full(1, -1, np.int16),
                  vcount=np.array([len(idx)], _I64), vblock=idx, vrank=rank, vlo=lo, vshape=shape, vsum=sums)
            continue
        order = np.argsort(lo[:, 0], kind="stable")
        idx, rank, lo, shape, sums = idx[order], rank[order], lo[order], shape[order], sums[order]
        start, end = lo[:, 0], lo[:, 0] + shape[:, 0]
        reach = np.maximum.accumulate(end)
        new_band = np.ones(len(start), bool)
        new_band[1:] = start[1:] >= reach[:-1]
        first = np.nonzero(new_band)[0]
        last = np.append(first[1:], len(start)) - 1
        r0, r1 = start[first], reach[last]
        nb = len(first)
        row_bytes = math.prod(gshape[1:]) * itemsize
        band_lo = b.pad(np.column_stack([r0, np.zeros((nb, len(gshape) - 1), _I64)]), 0)
        band_shape = b.pad(np.column_stack([r1 - r0, np.tile(np.array(gshape[1:], _I64), (nb, 1))]), 1)
        b.add(var=np.full(nb, vi, np.int32), lo=band_lo, shape=band_shape, file_offset=int(base) + r0 * row_bytes,
              nbytes=(r1 - r0) * row_bytes, codec=np.full(nb, -1, np.int16), vcount=last - first + 1,
              vblock=idx, vrank=rank, vlo=lo, vshape=shape, vsum=sums)
    return b.build()


def _vector_bands(b: _Builder, variables: Mapping[str, VariableRecord]) -> np.ndarray:
    """:func:`from_bands` for every variable of at least one dimension, stored and not empty, at once (a checkpoint
    of thousands of small variables, or of tens of variables written by thousands of ranks, costs a few numpy calls,
    not a few per variable): each variable's non-empty blocks sorted by their first row, a band per connected run
    of overlapping leading-axis intervals (a running maximum of the intervals' ends, restarted at each variable),
    whole along the other axes. Adds their rows to ``b``; returns which variables it did (bool per variable)."""
    records = list(variables.values())
    done = np.zeros(len(records), bool)
    # candidates: stored, of at least one dimension, not empty, sizes numpy can hold (else the loop, as before)
    candidates = [i for i, v in enumerate(records) if v.shape and v.storage is not None
                  and v.storage.file_offset is not None and 0 <= v.storage.file_offset < _I64_LIMIT
                  and 0 < math.prod(v.shape) * np.dtype(v.dtype).itemsize < _I64_LIMIT]
    if not candidates:
        return done
    cand = np.array(candidates, np.int64)
    j = JoinedBlocks.of([records[i].block_table() for i in candidates], b.var_ndim[cand].tolist(), b.ndim)
    rows = np.flatnonzero(j.shape.prod(axis=1) > 0)  # the non-empty blocks
    start = j.lo[rows, 0]
    end = start + j.shape[rows, 0]
    span = int(end.max()) + 1 if len(rows) else 1
    # the running maximum below restarts per variable only for row ends in [0, span) without overflowing int64;
    # anything else (a damaged document's block ending before row 0) takes the loop
    if len(candidates) * span >= _I64_LIMIT or (len(rows) and int(end.min()) < 0):
        return done
    done[cand] = True
    if not len(rows):
        return done
    order = np.lexsort((start, j.var[rows]))  # by variable, then by first row (ties: block order, as the loop)
    rows, start, end = rows[order], start[order], end[order]
    var = j.var[rows].astype(_I64)
    reach = np.maximum.accumulate(var * span + end) - var * span  # the running maximum, per variable
    new_band = np.ones(len(rows), bool)
    new_band[1:] = (var[1:] != var[:-1]) | (start[1:] >= reach[:-1])
    first = np.flatnonzero(new_band)
    last = np.append(first[1:], len(rows)) - 1
    picked = cand[var[first]].tolist()  # each band's variable (position in ``variables``)
    nb = len(first)
    whole = np.ones((nb, b.ndim), _I64)  # each band's variable shape, padded with 1
    for k, i in enumerate(picked):
        whole[k, :len(records[i].shape)] = records[i].shape
    itemsize = np.array([np.dtype(records[i].dtype).itemsize for i in picked], _I64)
    base = np.array([records[i].storage.file_offset for i in picked], _I64)
    row_bytes = whole[:, 1:].prod(axis=1) * itemsize
    r0, r1 = start[first], reach[last]
    band_lo = np.zeros((nb, b.ndim), _I64)
    band_lo[:, 0] = r0
    band_shape = whole
    band_shape[:, 0] = r1 - r0
    b.add(var=np.array(picked, np.int32), lo=band_lo, shape=band_shape, file_offset=base + r0 * row_bytes,
          nbytes=(r1 - r0) * row_bytes, codec=np.full(nb, -1, np.int16), vcount=last - first + 1,
          vblock=j.block[rows].astype(_I64), vrank=j.rank[rows].astype(np.int32), vlo=j.lo[rows],
          vshape=j.shape[rows], vsum=j.checksum[rows])
    return done


def from_extents(meta: CheckpointDocument | Mapping[str, Any], extents: Sequence[Extent]) -> ExtentTable:
    """Any backend: the columnar form of its :meth:`Backend.extents` list (the slow generic path)."""
    variables = variables_of(meta)
    b = _Builder(variables)
    writers = {name: var.block_table().rank for name, var in variables.items()}
    for e in extents:
        vi = b.index[e.var]
        nd, nv = e.box.ndim, len(e.verify)
        b.add(var=np.array([vi], np.int32), lo=b.pad(np.array(e.box.offset, _I64).reshape(1, nd), 0),
              shape=b.pad(np.array(e.box.shape, _I64).reshape(1, nd), 1), file_offset=np.array([e.file_offset], _I64),
              nbytes=np.array([e.nbytes], _I64), codec=b.codec_ids([e.codec]), vcount=np.array([len(e.verify)], _I64),
              vblock=np.array([v[0] for v in e.verify], _I64),
              vrank=np.array([writers[e.var][v[0]] for v in e.verify], np.int32),
              vlo=b.pad(np.array([v[1].offset for v in e.verify], _I64).reshape(nv, nd), 0),
              vshape=b.pad(np.array([v[1].shape for v in e.verify], _I64).reshape(nv, nd), 1),
              vsum=_checksum_ints([v[2] for v in e.verify]))
    return b.build()
