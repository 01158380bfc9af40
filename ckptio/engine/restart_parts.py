"""What a restart aggregator does with the parts it reads (local work between the restart's collectives):

* :class:`PartChecker`: verify the checksums of every writer block a part holds, before any of its bytes is sent
  (streaming across the parts of a split extent with one block, and across a part split between the read buffer
  and the aggregator's own outputs);
* :func:`direct_parts`: which pieces of an aggregator's own requests are read straight from the file into its
  outputs (the bytes cross memory once);
* :func:`send_streams` / :func:`recv_streams`: a round's pieces as :class:`ckptio.coord.datatypes.Stream` runs of the
  read parts' memory and of the callers' arrays, by peer, for :func:`ckptio.coord.exchange.move_pieces`;
* :func:`part_extent`: a part as the :class:`ckptio.model.plan.Extent` the backend's extent reader reads.

Everything here is local; :class:`ckptio.engine.restart.Restart` runs it inside its rounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ckptio.coord import datatypes as memtypes
from ckptio.errors import CorruptCheckpointError
from ckptio.model import meta as metamod
from ckptio.model import pagealign, readplan
from ckptio.model.extent_table import ExtentTable
from ckptio.model.layout import Box
from ckptio.model.plan import Extent


def region(lo: np.ndarray, shape: np.ndarray, origin: np.ndarray, ndim: int) -> tuple[Any, ...]:
    """Local: the index of the padded box ``lo``/``shape`` in an array whose first element is at ``origin``:
    slices, then ``...`` (so that a 0-d array gives a 0-d view, not a copy as a scalar)."""
    return (*(slice(int(a - o), int(a - o + n)) for a, o, n in zip(lo[:ndim], origin[:ndim], shape[:ndim],
                                                                    strict=True)), Ellipsis)


def box_bytes(rel: np.ndarray, shape: np.ndarray, full: np.ndarray, itemsize: int) -> tuple[int, int] | None:
    """Local: ``(byte offset, byte length)`` of the box ``rel``/``shape`` in a C-ordered array of shape ``full``,
    or None where its elements are not one contiguous byte range (every axis after its first longer than 1 must
    be whole)."""
    longer = np.flatnonzero(shape > 1)
    if len(longer) and (shape[longer[0] + 1:] != full[longer[0] + 1:]).any():
        return None
    strides = np.ones(len(full), np.int64)
    if len(full) > 1:
        strides[:-1] = np.cumprod(full[:0:-1])[::-1]
    return int((rel * strides).sum()) * itemsize, int(np.prod(shape)) * itemsize


def part_extent(path: str, table: ExtentTable, part: readplan.Part) -> Extent:
    """Local: a part of one of this aggregator's extents, as the Extent its ExtentReader reads."""
    t = table
    nd = int(t.var_ndim[t.var[part.row]])
    box = Box(tuple(part.lo[:nd].tolist()), tuple(part.shape[:nd].tolist()))
    c = int(t.codec[part.row])
    label = None
    if c >= 0:  # a compressed block is read whole: name it as a checksum mismatch would be named
        j = int(t.vptr[part.row])
        label = (f"{path}: variable {t.names[t.var[part.row]]!r} block {int(t.vblock[j])} (written by rank "
                 f"{int(t.vrank[j])}, offset {t.vlo[j, :nd].tolist()}, shape {t.vshape[j, :nd].tolist()}) at file "
                 f"offset {part.file_offset}")
    return Extent.made(t.names[t.var[part.row]], box, part.file_offset, part.nbytes, t.codecs[c] if c >= 0 else None,
                       label)


class PartChecker:
    """Local, one aggregator's checksum verification for one Reader: ``table`` is its rows of the extent table,
    ``variables`` the metadata's variables (their declared dtypes). A block streamed across parts keeps its
    running checksum here between rounds."""

    def __init__(self, path: str, table: ExtentTable, variables: Mapping[str, Any]):
        self.path = path
        self.table = table
        self.variables = variables
        self.chains: dict[Any, Any] = {}  # row (one block streamed) or (row, block row) (a split band's)
        self._dtypes: dict[int, tuple[np.dtype, bool]] = {}  # by variable index: see declared_of
        self._one_block: np.ndarray | None = None  # per row: the extent is exactly one block (made on first use)

    def _declared(self, row: int) -> np.dtype:
        return self.declared_of(int(self.table.var[row]))[0]

    def declared_of(self, var: int) -> tuple[np.dtype, bool]:
        """Local: variable ``var`` (index into the table's names): its declared dtype, and whether its bytes can be
        read straight into outputs (the file holds the declared dtype in native byte order). Looked up once each."""
        found = self._dtypes.get(var)
        if found is None:
            record = self.variables[self.table.names[var]]
            declared = np.dtype(record.dtype)
            found = self._dtypes[var] = (declared, declared.isnative and np.dtype(record.file_dtype) == declared)
        return found

    def _is_one_block(self, row: int) -> bool:
        """Whether the extent of ``row`` holds exactly one block, with the extent's own box (a native-format block,
        a small variable's whole band): its checksum is then the whole part's, no block to cut out. Found for every
        row at once, on first use."""
        if self._one_block is None:
            t = self.table
            first, count = t.vptr[:-1], np.diff(t.vptr)
            ok = count == 1
            if len(t.vlo):
                at = np.minimum(first, len(t.vlo) - 1)
                ok &= (t.vlo[at] == t.lo).all(axis=1) & (t.vshape[at] == t.shape).all(axis=1)
            self._one_block = ok
        return bool(self._one_block[row])

    def verify_part(self, part: readplan.Part, arr: np.ndarray) -> None:
        """Local: check the checksum of every writer block the part's extent holds. The parts of a split extent
        (``part.chain``) come in order: each block's bytes in them continue its running checksum, checked with
        the part that holds the block's last row."""
        t = self.table
        row = part.row
        declared = self._declared(row)
        first, stop = int(t.vptr[row]), int(t.vptr[row + 1])
        if part.chain is not None and self._is_one_block(row):
            index, nparts = part.chain
            h = self.chains.setdefault(row, metamod.StreamingChecksum())
            h.update(np.ascontiguousarray(arr, dtype=declared).reshape(-1).view(np.uint8))
            if index + 1 == nparts:
                self.check(row, first, self.chains.pop(row).intdigest())
            return
        if part.chain is not None:
            self._stream(part, arr, declared)
            return
        if self._is_one_block(row):  # (an unsplit part is its whole extent)
            self.check(row, first, metamod.checksum_int(np.ascontiguousarray(arr, dtype=declared)))
            return
        nd = int(t.var_ndim[t.var[row]])
        for j in range(first, stop):
            sub = arr[tuple(slice(int(a - b), int(a - b + n)) for a, b, n in
                            zip(t.vlo[j, :nd], part.lo[:nd], t.vshape[j, :nd], strict=True))]
            self.check(row, j, metamod.checksum_int(np.ascontiguousarray(sub, dtype=declared)))

    def _stream(self, part: readplan.Part, arr: np.ndarray, declared: np.dtype) -> None:
        """Local: a part of a split band of several blocks (a variable cut along a later axis, larger than the
        read buffer): each block's rows in this part, in C order, continue its running checksum (a block's bytes
        are its leading rows one after the other, so its rows part after part are its bytes in order); a block
        whose last row is in this part is checked."""
        t = self.table
        row = part.row
        nd = int(t.var_ndim[t.var[row]])
        top, bottom = int(part.lo[0]), int(part.lo[0] + part.shape[0])
        for j in range(int(t.vptr[row]), int(t.vptr[row + 1])):
            lo, shape = t.vlo[j, :nd], t.vshape[j, :nd]
            start, stop = max(top, int(lo[0])), min(bottom, int(lo[0] + shape[0]))
            if start >= stop:
                continue
            inner = (slice(int(a - b), int(a - b + n))
                     for a, b, n in zip(lo[1:], part.lo[1:nd], shape[1:], strict=True))
            index = (slice(start - top, stop - top), *inner)
            h = self.chains.setdefault((row, j), metamod.StreamingChecksum())
            h.update(np.ascontiguousarray(arr[index], dtype=declared).reshape(-1).view(np.uint8))
            if stop == int(lo[0] + shape[0]):
                self.check(row, j, self.chains.pop((row, j)).intdigest())

    def check(self, row: int, j: int, digest: int) -> None:
        """Local: CorruptCheckpointError naming the block unless ``digest`` is block ``j``'s stored checksum."""
        t = self.table
        if digest != int(t.vsum[j]):
            name = t.names[t.var[row]]
            nd = int(t.var_ndim[t.var[row]])
            raise CorruptCheckpointError(
                f"{self.path}: variable {name!r} block {int(t.vblock[j])} (written by rank {int(t.vrank[j])}, offset "
                f"{t.vlo[j, :nd].tolist()}, shape {t.vshape[j, :nd].tolist()}): checksum mismatch, data is corrupt "
                f"(stored {int(t.vsum[j]):016x}, computed {digest:016x})")

    def block_spans(self, part: readplan.Part) -> list[tuple[int, int, int]] | None:
        """Local: what the part's checksum covers, as byte ranges of the part: ``(block row j, start, stop)`` of
        each block (``(-1, 0, nbytes)``: the whole part, a piece of a block streamed across parts); None when
        some block is not one contiguous byte range of the part (its checksum then needs the part in one
        piece of memory), and for the parts of a split band of several blocks (:meth:`_stream` cuts them)."""
        if part.chain is not None:
            return [(-1, 0, part.nbytes)] if self._is_one_block(part.row) else None
        t = self.table
        row = part.row
        nd = int(t.var_ndim[t.var[row]])
        item = self._declared(row).itemsize
        out = []
        for j in range(int(t.vptr[row]), int(t.vptr[row + 1])):
            span = box_bytes(t.vlo[j, :nd] - part.lo[:nd], t.vshape[j, :nd], part.shape[:nd], item)
            if span is None:
                return None
            out.append((j, span[0], span[0] + span[1]))
        return out

    def verify_split(self, part: readplan.Part, staged: np.ndarray, stretches: list[tuple[int, np.ndarray]]) -> None:
        """Local: check the part's checksums when some of its bytes went straight into outputs (``stretches``, see
        :func:`direct_parts`) and the rest into ``staged`` (the part's place in the read buffer, uint8): every
        block's bytes are fed to the checksum in file order from wherever they landed."""
        memory, at = [], 0  # (start, memory) covering the part, in order
        for off, dst in stretches:
            if off > at:
                memory.append((at, staged[at:off]))
            memory.append((off, dst))
            at = off + dst.nbytes
        if at < part.nbytes:
            memory.append((at, staged[at:]))

        def feed(h, start: int, stop: int) -> None:
            """Local: the part's bytes ``[start, stop)`` into the checksum ``h``, from wherever they landed."""
            for s, m in memory:
                lo, hi = max(start, s), min(stop, s + m.nbytes)
                if lo < hi:
                    h.update(m[lo - s:hi - s])

        spans = self.block_spans(part)
        if spans is None:  # excluded by direct_parts
            raise AssertionError("a split part whose blocks are not contiguous byte ranges")
        for j, start, stop in spans:
            if j < 0:  # a piece of a block that spans parts: streamed across them
                index, nparts = part.chain
                h = self.chains.setdefault(part.row, metamod.StreamingChecksum())
                feed(h, start, stop)
                if index + 1 == nparts:
                    self.check(part.row, int(self.table.vptr[part.row]), self.chains.pop(part.row).intdigest())
                continue
            h = metamod.StreamingChecksum()
            feed(h, start, stop)
            self.check(part.row, j, h.intdigest())


def direct_parts(checker: PartChecker, plan: readplan.AggregatorPlan, records: np.ndarray,
                 outputs: list[np.ndarray], me: int, nd: int, verify: bool
                 ) -> tuple[dict[int, list[tuple[int, np.ndarray]]], set[int]]:
    """Local, an aggregator with an independent extent reader: what it reads straight into its own outputs.

    Returns, per part index, the stretches ``(byte offset in the part, the output's bytes there)`` in part
    order, and the indices (into the plan's piece columns) of the pieces so read, which the exchange then
    leaves alone. A piece of this rank's own request qualifies when its part is stored uncompressed in the
    declared dtype, native byte order, and the piece is one contiguous byte range of the part landing in a
    contiguous stretch of the output; in a part that also holds pieces for other ranks (a *split* part, read
    with one scattering ``preadv`` into the read buffer and the outputs) every block the part's checksum
    covers must be a contiguous byte range too: its checksum is then streamed across the buffer and the
    outputs, in file order (:meth:`PartChecker.verify_split`), so every block is still verified. Those bytes
    cross memory once (the file read itself); everything else goes through the read buffer."""
    if not len(plan.piece_part):
        return {}, set()
    t = checker.table
    counts = np.bincount(plan.piece_part, minlength=len(plan.parts))
    direct: dict[int, list[tuple[int, np.ndarray]]] = {}
    pieces: set[int] = set()
    splittable: dict[int, bool] = {}
    by_part = np.argsort(plan.piece_part, kind="stable")
    part_start = np.searchsorted(plan.piece_part[by_part], np.arange(len(plan.parts) + 1))

    def shared(i: int, p: int, span: tuple[int, int], ndim: int, item: int) -> bool:
        """Local: whether another piece of part ``p`` has bytes in ``span`` (piece ``i``'s): pieces' first and
        last bytes in the part bound them (rank's requests may overlap, a strided piece is not one range)."""
        others = by_part[part_start[p]:part_start[p + 1]]
        others = others[others != i]
        full = plan.parts[p].shape[:ndim]
        strides = np.ones(ndim, np.int64)
        if ndim > 1:
            strides[:-1] = np.cumprod(full[:0:-1])[::-1]
        rel = plan.piece_lo[others, :ndim] - plan.parts[p].lo[:ndim]
        first = (rel * strides).sum(axis=1) * item
        stop = ((rel + plan.piece_shape[others, :ndim] - 1) * strides).sum(axis=1) * item + item
        return bool(((first < span[0] + span[1]) & (stop > span[0])).any())
    mine = np.flatnonzero(plan.piece_dest == me)
    if not len(mine):
        return {}, set()
    # per piece of this rank, found for all at once: its part's row, whether it is its whole part alone in it (a
    # small variable read whole by one rank: thousands per read; its span is the part's bytes, without
    # box_bytes' numpy steps) and whether it is also its whole output (the output itself, no region to cut)
    part_row = np.array([part.row for part in plan.parts], np.int64)
    part_lo = np.array([part.lo for part in plan.parts], np.int64).reshape(len(plan.parts), -1)
    part_shape = np.array([part.shape for part in plan.parts], np.int64).reshape(part_lo.shape)
    where = plan.piece_part[mine]
    lo, shape = plan.piece_lo[mine], plan.piece_shape[mine]
    alone = (counts[where] == 1) & (lo == part_lo[where]).all(axis=1) & (shape == part_shape[where]).all(axis=1)
    asked = records[plan.piece_qi[mine]]
    whole_output = alone & (lo == asked[:, 2:2 + nd]).all(axis=1) & (shape == asked[:, 2 + nd:]).all(axis=1)
    rows = part_row[where]
    for i, var, ndim, codec, is_alone, is_whole in zip(
            mine.tolist(), t.var[rows].tolist(), t.var_ndim[t.var[rows]].tolist(),
            t.codec[rows].tolist(), alone.tolist(), whole_output.tolist(), strict=True):
        if codec >= 0:
            continue
        declared, native = checker.declared_of(var)
        if not native:
            continue
        p = int(plan.piece_part[i])
        part = plan.parts[p]
        if is_alone:
            span = (0, math.prod(part.shape[:ndim].tolist()) * declared.itemsize)
        else:
            span = box_bytes(plan.piece_lo[i, :ndim] - part.lo[:ndim], plan.piece_shape[i, :ndim],
                             part.shape[:ndim], declared.itemsize)
        if span is None or not span[1]:
            continue
        if counts[p] > 1 and shared(i, p, span, ndim, declared.itemsize):
            continue  # another piece (another rank's, or another request's) needs these bytes of the buffer
        if counts[p] > 1 or span != (0, part.nbytes):  # a split part: checksums stream across its pieces
            if p not in splittable:
                splittable[p] = not verify or checker.block_spans(part) is not None
            if not splittable[p]:
                continue
        qi = int(plan.piece_qi[i])
        view = outputs[qi] if is_whole else outputs[qi][region(plan.piece_lo[i], plan.piece_shape[i],
                                                               records[qi, 2:2 + nd], ndim)]
        if view.flags.c_contiguous and view.nbytes == span[1] and not pagealign.slow_copy(
                memtypes.address(view), part.file_offset + span[0]):  # else: via the buffer, at fast shifts
            direct.setdefault(p, []).append((span[0], view.reshape(-1).view(np.uint8)))
            pieces.add(i)
    for stretches in direct.values():
        stretches.sort(key=lambda s: s[0])
    return direct, pieces


def send_streams(table: ExtentTable, k: int, plan: readplan.AggregatorPlan, arrays: Mapping[int, np.ndarray],
                 records: np.ndarray, outputs: list[np.ndarray], me: int, nd: int,
                 direct_pieces: set[int]) -> dict[int, memtypes.Stream]:
    """Local, an aggregator: round ``k``'s pieces for other ranks as streams of the read parts' memory, by
    destination; its own pieces not read straight into its outputs (``direct_pieces``) are copied there here."""
    lo_end = np.searchsorted(plan.piece_round, [k, k + 1]).tolist()
    sel = slice(*lo_end)
    dests, pidx, qis = plan.piece_dest[sel], plan.piece_part[sel], plan.piece_qi[sel]
    plo, pshape = plan.piece_lo[sel], plan.piece_shape[sel]
    t = table
    for i in np.flatnonzero(dests == me).tolist():  # my own requests: part -> output directly
        if lo_end[0] + i in direct_pieces:  # read straight into the output already
            continue
        part = plan.parts[int(pidx[i])]
        ndim = int(t.var_ndim[t.var[part.row]])
        qi = int(qis[i])
        src = arrays[int(pidx[i])][region(plo[i], pshape[i], part.lo, ndim)]
        dst = outputs[qi][region(plo[i], pshape[i], records[qi, 2:2 + nd], ndim)]
        if memtypes.address(src) != memtypes.address(dst):  # else read straight into the output
            dst[...] = src
    others = dests != me
    if not others.any():
        return {}
    keys = sorted(arrays)
    index = {p: a for a, p in enumerate(keys)}
    parts_table = memtypes.ArrayTable([arrays[p] for p in keys], nd)
    which = np.array([index[p] for p in pidx[others].tolist()], np.int64)
    part_lo = np.array([plan.parts[p].lo for p in keys], np.int64).reshape(-1, nd)
    rel = plo[others] - part_lo[which]
    return parts_table.streams(dests[others], which, rel, pshape[others], qis[others])


def recv_streams(incoming: Mapping[int, np.ndarray], records: np.ndarray, outputs: list[np.ndarray], me: int,
                 nd: int) -> dict[int, memtypes.Stream]:
    """Local: by source rank, the streams of this rank's outputs where its pieces of the round land
    (``incoming``: per source, the descriptors ``[qi, lo, shape]`` of what it sends this rank in this round)."""
    srcs = [s for s in sorted(incoming) if s != me and len(incoming[s])]
    if not srcs:
        return {}
    rows = np.concatenate([incoming[s] for s in srcs])
    peer = np.repeat(np.array(srcs, np.int64), [len(incoming[s]) for s in srcs])
    qi = rows[:, 0]
    rel = rows[:, 1:1 + nd] - records[qi, 2:2 + nd]
    return memtypes.ArrayTable(outputs, nd).streams(peer, qi, rel, rows[:, 1 + nd:], qi)

