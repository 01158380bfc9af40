"""What one rank does locally for the aggregated write (:mod:`ckptio.engine.write_aggregate`), between its
collectives: its pieces cut onto the aggregators' domains (:class:`SenderPlan`), an aggregator's rounds
(:class:`AggregatorPlan`), and the memory of each round's messages and writes.

Both sides of every message describe it alike (:class:`ckptio.coord.datatypes.Stream`): the sender's pieces of one
round for one aggregator in domain-position order, as runs of the caller's arrays (a strided view gives one run
per contiguous row: MPI reads them in place through an hindexed datatype); the aggregator's as the places of the
same pieces in its round buffer (position modulo the round size: the buffer holds the file's bytes at their file
alignment). An aggregator's own pieces never go through MPI nor through a round buffer: a contiguous one is
written straight from the caller's array; a strided one (:class:`StridedBytes`) from the caller's memory too, as
views of its rows (one ``pwritev`` iovec or one block of the ``MPI_File_write_at`` memory type each) when its rows
are long, or, when they are short (a halo'd 3-D interior: a few KiB), gathered a slab of rows at a time into a
staging buffer of at most ``STAGE_BYTES`` that each write call reuses (the byte-range writer's cost per array,
some microseconds, is far more than copying a short row). The round buffers hold only what other ranks send (at
most ``round_bytes`` each, two of them, allocated only when something arrives): no buffer of an aggregator grows
with its own data. A run's arrays go to the writer a group at a time (:func:`batches`).

Everything here is local; a descriptor row is ``[file offset, domain position, length]`` (int64).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from ckptio.backends.base import Run
from ckptio.coord import datatypes as memtypes
from ckptio.model import memsel, pagealign
from ckptio.model.write_domains import PieceCut, RankDomain, WriteDomains

_I64 = np.int64
WIDTH = 3  # a descriptor row: file offset, domain position, length
BATCH_ARRAYS = 512  # row views of strided pieces per write call (one pwritev's iovecs, < IOV_MAX = 1024)
SHORT_RUN_BYTES = 128 << 10  # rows shorter than this are gathered into a bounded staging buffer (see batches)
STAGE_BYTES = 1 << 20  # an aggregator's staging buffer for short rows (at most the round size)


def byte_view(array: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous array as a 1-D uint8 view (no copy)."""
    return array.reshape(-1).view(np.uint8)


def copy_bytes(src: np.ndarray, start: int, stop: int, dst: np.ndarray) -> None:
    """Bytes ``[start, stop)`` of ``src``'s elements in C order (a strided view: a memory selection) into the uint8
    array ``dst``, a slab of rows at a time (no per-row Python loop)."""
    if stop <= start:
        return
    if src.flags.c_contiguous:
        dst[:stop - start] = byte_view(src)[start:stop]
        return
    row = src.nbytes // src.shape[0]

    def sub(i: int) -> np.ndarray:
        return src[i] if src.ndim > 1 else src[i:i + 1]

    first, last = start // row, (stop - 1) // row
    if first == last:
        copy_bytes(sub(first), start - first * row, stop - first * row, dst)
        return
    pos, full_from = 0, first
    if start % row:
        copy_bytes(sub(first), start % row, row, dst)
        pos, full_from = row - start % row, first + 1
    full_to = last + 1 if stop - last * row == row else last
    if full_to > full_from:
        slab = src[full_from:full_to]
        dst[pos:pos + slab.nbytes].view(src.dtype).reshape(slab.shape)[...] = slab
        pos += slab.nbytes
    if full_to == last:
        copy_bytes(sub(last), 0, stop - last * row, dst[pos:])


class StridedBytes:
    """Bytes ``[start, stop)`` (C order) of a strided piece ``array`` (a passable view, :mod:`ckptio.model.memsel`),
    in the caller's memory; ``run`` is the length of a whole run (a row of the view). Its contiguous runs
    (``runs()``: starts relative to :attr:`span`, the uint8 memory from the view's first to its last element, and
    lengths) are computed only when they are written as views (:meth:`arrays`), not when they are gathered. Local."""

    def __init__(self, array: np.ndarray, start: int, stop: int,
                 runs: Callable[[], tuple[np.ndarray, np.ndarray]]):
        self.array, self.start, self.stop = array, start, stop
        self.nbytes = stop - start
        self.run = memsel.run_layout(array)[2]
        self._runs = runs
        self._got: tuple[np.ndarray, np.ndarray] | None = None

    def _starts_lengths(self) -> tuple[np.ndarray, np.ndarray]:
        if self._got is None:
            self._got = self._runs()
        return self._got

    @property
    def span(self) -> np.ndarray:
        return memsel.span(self.array).view(np.uint8)

    def __len__(self) -> int:
        return len(self._starts_lengths()[0])

    def arrays(self, lo: int, hi: int) -> list[np.ndarray]:
        """Runs ``[lo, hi)`` as uint8 views of the caller's memory."""
        span = self.span
        starts, lengths = self._starts_lengths()
        return [span[a:a + n] for a, n in zip(starts[lo:hi].tolist(), lengths[lo:hi].tolist(), strict=True)]


#: What a run of an aggregator's round is made of: contiguous uint8 arrays (a round buffer's bytes, a caller's
#: contiguous array) and the runs of strided pieces, in file order (see :func:`batches`).
Memory = np.ndarray | StridedBytes
PlannedRun = tuple[int, list[Memory]]


def batches(runs: Sequence[PlannedRun], limit: int = BATCH_ARRAYS, stage: Callable[[], np.ndarray] | None = None,
            short: int = SHORT_RUN_BYTES) -> Iterator[list[Run]]:
    """Local: ``runs`` as byte-range writer runs (``Run``: a file offset and contiguous uint8 arrays), in file
    order, in groups; a run is continued in the next group at the file offset where it stopped.

    Contiguous arrays (a round buffer's bytes, the caller's contiguous arrays) go as they are. A strided piece
    goes from the caller's memory: as views of its rows (at most ``limit`` made per group), or, when its rows are
    ``short`` (below that many bytes: a writer's cost per array, some microseconds, would exceed the copy) and
    ``stage()`` gives a staging buffer, gathered into it a slab of rows at a time (``copy_bytes``), a group
    ending whenever the buffer is full. The consumer writes each group before it asks for the next one, so the
    buffer (its size bounds the memory: never the piece's) is reused. Only one group's views exist at a time."""
    group: list[Run] = []
    made = filled = 0
    buf: np.ndarray | None = None
    for offset, parts in runs:
        at, current = offset, []
        for part in parts:
            if isinstance(part, np.ndarray):
                current.append(part)
                continue
            staged = stage is not None and part.run < short
            done, total = 0, (part.nbytes if staged else len(part))
            while done < total:
                if staged:
                    buf = stage() if buf is None else buf
                    take = min(total - done, buf.nbytes - filled)
                    copy_bytes(part.array, part.start + done, part.start + done + take, buf[filled:filled + take])
                    current.append(buf[filled:filled + take])
                    filled += take
                else:
                    take = min(total - done, limit - made)
                    current.extend(part.arrays(done, done + take))
                    made += take
                done += take
                if made == limit or (buf is not None and filled == buf.nbytes):
                    group.append((at, current))
                    yield group
                    at += sum(a.nbytes for a in current)
                    group, current, made, filled = [], [], 0, 0
        if current:
            group.append((at, current))
    if group:
        yield group


class SenderPlan:
    """A rank's pieces (``(file offset, array)``, from ``Backend.placed_pieces``) cut onto the domains: the parts
    for other aggregators by round and destination, and its own parts (an aggregator's)."""

    def __init__(self, pieces: Sequence[tuple[int, np.ndarray]], domains: WriteDomains, own: RankDomain | None,
                 me: int):
        self.arrays = [a for _, a in pieces]
        self.starts = np.array([o for o, _ in pieces], _I64)
        cut = domains.cut(self.starts, [a.nbytes for a in self.arrays], own)
        dest = np.asarray(domains.aggregators, _I64)[cut.aggregator] if len(cut) else np.zeros(0, _I64)
        mine = dest == me
        self.own = cut.take(np.flatnonzero(mine))
        order = np.lexsort((cut.position, dest, cut.round))
        order = order[~mine[order]]
        self.sent = cut.take(order)
        self.dest = dest[order]
        self.nrounds = cut.nrounds
        self._runs: dict[int, tuple[np.ndarray, int]] = {}  # strided pieces: their runs (computed once)

    def descriptors(self) -> dict[int, np.ndarray]:
        """By destination rank, the rows ``[file offset, position, length]`` of what this rank sends it (in
        round and position order, the order of the messages)."""
        if not len(self.sent):
            return {}
        rows = np.column_stack([self.sent.offset, self.sent.position, self.sent.length]).astype(_I64)
        order = np.argsort(self.dest, kind="stable")
        dests, first = np.unique(self.dest[order], return_index=True)
        last = np.append(first[1:], len(order))
        return {int(d): rows[order[a:b]] for d, a, b in zip(dests.tolist(), first.tolist(), last.tolist(),
                                                              strict=True)}

    def streams(self, k: int) -> dict[int, memtypes.Stream]:
        """Round ``k``'s messages to other aggregators, by destination rank: runs of the caller's arrays."""
        lo, hi = np.searchsorted(self.sent.round, [k, k + 1]).tolist()
        if lo == hi:
            return {}
        rows = self.sent.take(np.arange(lo, hi))
        dests = self.dest[lo:hi]
        addrs, lens = self.memory(rows)
        counts = np.array([len(a) for a in addrs], _I64)
        flat_a, flat_n = np.concatenate(addrs), np.concatenate(lens)
        ends = np.cumsum(counts)
        out = {}
        uniq, first = np.unique(dests, return_index=True)
        last = np.append(first[1:], len(dests))
        for d, a, b in zip(uniq.tolist(), first.tolist(), last.tolist(), strict=True):
            ra, rb = (int(ends[a - 1]) if a else 0), int(ends[b - 1])
            out[int(d)] = memtypes.Stream(*memtypes.merge(flat_a[ra:rb], flat_n[ra:rb]), rows.length[a:b],
                                          np.zeros(b - a, _I64))
        return out

    def memory(self, rows: PieceCut) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per row, the runs ``(addresses, lengths)`` of its bytes in the caller's memory."""
        addrs, lens = [], []
        for p, off, n in zip(rows.piece.tolist(), rows.offset.tolist(), rows.length.tolist(), strict=True):
            arr = self.arrays[p]
            start = off - int(self.starts[p])
            if arr.flags.c_contiguous:
                addrs.append(np.array([memtypes.address(arr) + start], _I64))
                lens.append(np.array([n], _I64))
                continue
            a, m = self._strided(p, start, start + n)
            addrs.append(a)
            lens.append(m)
        return addrs, lens

    def _strided(self, p: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """The runs of bytes ``[start, stop)`` of strided piece ``p`` (runs of equal length: index arithmetic)."""
        if p not in self._runs:
            offsets, run = memsel.runs(self.arrays[p])
            self._runs[p] = (offsets + memsel.address(self.arrays[p]), run)
        starts, run = self._runs[p]
        first, last = start // run, (stop - 1) // run
        addrs = starts[first:last + 1].copy()
        lens = np.full(len(addrs), run, _I64)
        addrs[0] += start - first * run
        lens[0] -= start - first * run
        lens[-1] -= (last + 1) * run - stop
        return addrs, lens

    def own_memory(self, row: int) -> Memory:
        """Own part ``row``'s bytes for the write, in the caller's memory: a uint8 view of a contiguous array, or
        the runs of a strided one (no copy either way)."""
        p = int(self.own.piece[row])
        start = int(self.own.offset[row]) - int(self.starts[p])
        n = int(self.own.length[row])
        arr = self.arrays[p]
        if arr.flags.c_contiguous:
            return byte_view(arr)[start:start + n]
        def runs() -> tuple[np.ndarray, np.ndarray]:
            addrs, lens = self._strided(p, start, start + n)
            return addrs - memsel.address(arr), lens

        return StridedBytes(arr, start, start + n, runs)


class AggregatorPlan:
    """What an aggregator writes: the rows it received (``received``: by source rank) and its own parts, by
    round; its two round buffers (allocated only when something lands in them).

    A round buffer holds only what other ranks send: round k's received rows at ``position mod round_bytes -
    base[k]``, with ``base[k]`` their lowest place in the round rounded down to the ``align`` bytes that keep file
    and buffer alignment alike (the cell: the file's bytes stay at their alignment modulo the cell). So an
    aggregator's own region, which would have been the start of the round, is no hole in the buffer: its size is
    the largest received extent of a round, at most ``round_bytes``."""

    def __init__(self, received: Mapping[int, np.ndarray], sender: SenderPlan, round_bytes: int, align: int = 1):
        self.round_bytes = round_bytes
        srcs = sorted(s for s, rows in received.items() if len(rows))
        rows = (np.concatenate([received[s] for s in srcs]) if srcs else np.zeros((0, 3), _I64)).reshape(-1, 3)
        src = np.repeat(np.array(srcs, _I64), [len(received[s]) for s in srcs]) if srcs else np.zeros(0, _I64)
        rnd = rows[:, 1] // round_bytes
        order = np.lexsort((rows[:, 1], src, rnd))
        self.rows, self.src, self.round = rows[order], src[order], rnd[order]
        self.sender = sender
        self._base: dict[int, int] = {}
        self.slot_bytes = 0  # only what other ranks send lands in a round buffer
        if len(self.rows):
            place = self.rows[:, 1] % round_bytes
            rounds, first = np.unique(self.round, return_index=True)
            base = np.minimum.reduceat(place, first) // align * align
            ends = np.maximum.reduceat(place + self.rows[:, 2], first)
            self._base = dict(zip(rounds.tolist(), base.tolist(), strict=True))
            self.slot_bytes = min(round_bytes, int((ends - base).max()))
        self.nrounds = max(int(self.round.max()) + 1 if len(self.round) else 0, sender.own.nrounds)
        self._slots: dict[int, np.ndarray] = {}

    def slot(self, k: int) -> np.ndarray:
        """Round ``k``'s buffer (slot ``k % 2``, page-aligned, allocated once)."""
        s = k % 2
        if s not in self._slots:
            self._slots[s] = pagealign.page_aligned_bytes(self.slot_bytes)
        return self._slots[s]

    def receives(self, k: int) -> dict[int, memtypes.Stream]:
        """Round ``k``'s messages from other ranks, by source: places in the round buffer."""
        lo, hi = np.searchsorted(self.round, [k, k + 1]).tolist()
        if lo == hi:
            return {}
        base = memtypes.address(self.slot(k)) - self._base[k]
        rows, src = self.rows[lo:hi], self.src[lo:hi]
        out = {}
        uniq, first = np.unique(src, return_index=True)
        last = np.append(first[1:], len(src))
        for s, a, b in zip(uniq.tolist(), first.tolist(), last.tolist(), strict=True):
            part = rows[a:b]
            addrs = base + part[:, 1] % self.round_bytes
            out[int(s)] = memtypes.Stream(*memtypes.merge(addrs, part[:, 2].copy()), part[:, 2],
                                          np.zeros(b - a, _I64))
        return out

    def runs(self, k: int) -> list[PlannedRun]:
        """Round ``k``'s writes, in file order: the received rows (from the round buffer) and the own parts
        (the caller's memory, contiguous arrays or the runs of strided ones), consecutive file ranges joined
        into one run."""
        entries: list[tuple[int, Memory]] = []
        lo, hi = np.searchsorted(self.round, [k, k + 1]).tolist()
        if hi > lo:
            buf, base = self.slot(k), self._base[k]
            for off, pos, n in self.rows[lo:hi].tolist():
                at = pos % self.round_bytes - base
                entries.append((off, buf[at:at + n]))
        for i in np.flatnonzero(self.sender.own.round == k).tolist():
            entries.append((int(self.sender.own.offset[i]), self.sender.own_memory(i)))
        entries.sort(key=lambda e: e[0])
        out: list[PlannedRun] = []
        end = -1
        for off, mem in entries:
            if off == end:
                out[-1][1].append(mem)
            else:
                out.append((off, [mem]))
            end = off + mem.nbytes
        return out
