"""Checking a checkpoint's stored blocks against their checksums at the storage's speed: one process's share.

What calls :func:`check_rows`: :func:`ckptio.verify.verify_blocks` with every row of the extent table (``ckptio
inspect --verify``, ``latest(verify=True)``, one process), and :func:`ckptio.verify.verify_parallel` on each restart
aggregator with its own rows (its file domains). Local: no MPI; each caller opens the file itself.

How (issue 29: the per-extent ``pread`` and per-block numpy work of the first version verified at 0.34x a cold
sequential read of the file):

* the rows are read in file order, in *windows* of consecutive rows of up to :data:`WINDOW` bytes (a quarter of
  the CPU's last-level cache, 8 MiB on a 32 MiB L3, so that a window is still in the cache when it is checked;
  holes of up to :data:`GAP` bytes read through; a larger row in pieces of that size, its blocks' checksums
  running across them), one large ``preadv`` each into one of two reusable page-aligned buffers, placed so that
  the kernel's copy from the page cache runs at a fast page shift (:mod:`ckptio.model.pagealign`);
* a helper thread reads window k+1 while the calling thread checks window k (``preadv`` and xxhash release the
  GIL, so both run at once);
* the common block (stored raw, in the declared dtype, one contiguous byte range of its extent: every block of
  the native format, the blocks of a band that span its trailing axes) is hashed straight from the buffer: one
  xxh3-64 call per block over a slice computed for all blocks at once (no numpy array, no Python object per
  block besides the slice), and each variable's min/max (``inspect --verify``) is one numpy reduction per run of
  its rows; the other extents (compressed, foreign byte order, a block that is not one byte range) are read and
  decoded one at a time by the backend's serial extent reader, as before.

Findings carry the messages ``ckptio inspect --verify`` always printed: a checksum mismatch names the stored and
computed checksums, an extent past the end of the file says where the file ends, a block that cannot be decoded
gets its decoder's error; one finding per block, in file order.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import xxhash

from ckptio.engine import cpu_cache
from ckptio.errors import CheckpointError
from ckptio.model import pagealign
from ckptio.model.document import VariableRecord
from ckptio.model.extent_table import ExtentTable

# bytes per read (a larger extent is read in pieces of this size): two windows in flight fill half the last-level
# cache, so that the hashes and min/max still find a window there after the kernel's copy (ckptio.engine.cpu_cache)
WINDOW = cpu_cache.window_bytes(buffers=2, default=8 << 20, lowest=2 << 20, highest=32 << 20)
SHARED_WINDOW_MIN = 1 << 20  # the smallest window of a process sharing its cache with other scans (see check_rows)
GAP = 256 << 10  # a hole between two extents up to this size is read through (one request instead of two)
_MAX_CALL = 1 << 30


class Finding(NamedTuple):
    """One problem: the extent's file offset (the order of findings), the variable, the writer block (index in the
    variable and the rank that wrote it; None for an extent that holds no whole block), and the message."""

    file_offset: int
    variable: str
    block: int | None
    rank: int | None
    message: str


@dataclass
class _Window:
    """Rows (file order) and the file range ``[start, end)`` that holds them; ``piece``: the window is part of
    one row larger than WINDOW (rows[0]), whose blocks are hashed across its pieces, in order."""

    rows: np.ndarray
    start: int
    end: int
    piece: bool = False


@dataclass
class Result:
    """What a scan found (in file order) and, with ``ranges``, each integer or float variable's
    ``[min, max, NaN count]`` over the rows it read (min/max None where it saw no value)."""

    findings: list[Finding]
    ranges: dict[str, list[Any]]


def check_rows(path: str, variables: Mapping[str, VariableRecord], table: ExtentTable, reader: Any, threaded: bool,
               ranges: bool = False, sharing: int = 1) -> Result:
    """Local: read every row of ``table`` and check the checksum of every block it holds; with ``ranges``, also
    the minimum and maximum of every integer and float variable in the same pass (``ckptio inspect --verify``
    prints them).

    ``path``: the file whose bytes at each row's offset are the row's stored bytes (the backend's serial reader
    says so: ``reader.file_bytes``); the common rows are read from it in large windows, the others (compressed,
    foreign byte order, a block that is not one byte range) one at a time through ``reader``, which decodes them.
    ``variables``: the document's variables (dtype, storage), with or without their block lists; ``threaded``:
    read ahead in a helper thread (never calls MPI); ``sharing``: how many processes on this host scan at once
    (:func:`ckptio.verify.verify_parallel`'s aggregators there), each reading windows of WINDOW / ``sharing``
    bytes (at least :data:`SHARED_WINDOW_MIN`), so that their windows together still fit the cache (2 scans
    of 2 GiB on the 2-vCPU VM, file cached: 0.13 s with 4 MiB windows, 0.18 with 8, 0.27 with 32). An OSError
    reading the file propagates; everything about the data is a :class:`Finding`."""
    acc = _Ranges(variables) if ranges else None
    findings: list[Finding] = []
    window = max(min(WINDOW, SHARED_WINDOW_MIN), WINDOW // max(1, sharing))
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        plan = _Plan(table, variables, os.fstat(fd).st_size, acc, window)
        findings.extend(plan.past_end())
        findings.extend(plan.through_reader(reader, plan.order[~plan.direct[plan.order]]))
        windows = _Reader(fd, plan.windows, threaded)
        try:
            for w, (buf, base, got) in zip(plan.windows, windows, strict=True):
                findings.extend(plan.check(w, buf, base, got))
        finally:
            windows.close()
    finally:
        os.close(fd)
    findings.sort(key=lambda f: f.file_offset)  # (stable: a row's blocks stay in their order)
    return Result(findings, acc.values if acc is not None else {})


def check_with_reader(reader: Any, variables: Mapping[str, VariableRecord], table: ExtentTable, ranges: bool = False
                      ) -> Result:
    """Local: :func:`check_rows` with every row read through the backend's own serial extent reader, one at a time
    (a backend whose bytes are not plain file bytes, e.g. the in-memory reference backend of
    :mod:`ckptio.testing`; and the first implementation, which the tests compare with)."""
    acc = _Ranges(variables) if ranges else None
    plan = _Plan(table, variables, None, acc)
    return Result(list(plan.through_reader(reader, plan.order)), acc.values if acc is not None else {})


class _Ranges:
    """Minimum, maximum and NaN count of every integer and float variable, accumulated over arrays of it."""

    def __init__(self, variables: Mapping[str, Any]):
        self.values: dict[str, list[Any]] = {name: [None, None, 0] for name, dtype in _declared(variables).items()
                                             if dtype.kind in "iuf"}

    def add(self, name: str, a: np.ndarray) -> None:
        v = self.values.get(name)
        if v is None or a.size == 0:
            return
        lo, hi = a.min(), a.max()
        if a.dtype.kind == "f" and (np.isnan(lo) or np.isnan(hi)):  # NaNs (rare): counted and left out
            isnan = np.isnan(a)
            v[2] += int(isnan.sum())
            a = a[~isnan]
            if a.size == 0:
                return
            lo, hi = a.min(), a.max()
        lo, hi = lo.item(), hi.item()
        v[0] = lo if v[0] is None else min(v[0], lo)
        v[1] = hi if v[1] is None else max(v[1], hi)


class _Plan:
    """The rows of one scan in file order, their windows, and which blocks are hashed straight from the buffer."""

    def __init__(self, table: ExtentTable, variables: Mapping[str, Any], size: int | None,
                 ranges: _Ranges | None = None, window: int | None = None):
        t = self.table = table
        self.variables = variables
        self.ranges = ranges
        self.order = np.argsort(t.file_offset, kind="stable")
        end = t.file_offset + t.nbytes
        # rows past the end of the file are findings, never read (size None: not a file, the reader decides)
        self.inside = end <= size if size is not None else np.ones(len(t), bool)
        dtypes = _declared(variables)
        declared = self.declared = [dtypes[name] for name in t.names]
        raw_ok = np.array([d.isnative and np.dtype(variables[name].file_dtype) == d
                           for name, d in zip(t.names, declared, strict=True)] or [False], bool)
        itemsize = np.array([d.itemsize for d in declared] or [1], np.int64)
        self.spans = _block_spans(t, itemsize)  # per block: (start in its row, length), or -1 where not one range
        row_of_block = np.repeat(np.arange(len(t), dtype=np.int64), np.diff(t.vptr))
        whole = np.ones(len(t), bool)  # every block of the row is one byte range inside it
        np.logical_and.at(whole, row_of_block, (self.spans[:, 0] >= 0)
                          & (self.spans.sum(axis=1) <= t.nbytes[row_of_block]))
        exact = t.shape.prod(axis=1) * itemsize[t.var] == t.nbytes  # stored raw: the box's bytes exactly
        self.direct = (t.codec < 0) & raw_ok[t.var] & whole & exact  # hashed straight from the buffer
        direct = self.order[self.direct[self.order]]  # (file order)
        self.windows = list(_windows(direct, t.file_offset[direct], t.nbytes[direct], self.inside[direct],
                                     int(np.lcm.reduce(itemsize)), WINDOW if window is None else window))
        self.running: dict[int, Any] = {}  # block -> its running checksum, in a row read in pieces
        self.cut_short: set[int] = set()  # rows read in pieces whose end the file no longer has

    def through_reader(self, reader: Any, rows: np.ndarray) -> Iterator[Finding]:
        """Check ``rows`` one at a time, each read and decoded by the backend's serial extent ``reader`` (the first
        implementation, per extent: a read error is a finding for each block of the extent)."""
        for i in rows.tolist():
            try:
                (arr,), _ = reader.read([self.table.extent(i)])
            except CheckpointError as exc:
                yield from self._per_block(i, str(exc))
                continue
            yield from self._check_array(i, arr)

    def past_end(self) -> Iterator[Finding]:
        """The rows read from the file directly that end past its end (the message the serial reader gives)."""
        rows = self.order[self.direct[self.order] & ~self.inside[self.order]]
        for i in rows.tolist():
            yield from self._per_block(i, f"variable {self._name(i)!r}: file ends inside the data at offset "
                                          f"{int(self.table.file_offset[i])}")

    def check(self, w: _Window, buf: np.ndarray, base: int, got: int) -> list[Finding]:
        """The findings of window ``w``, whose file range starts at ``buf[base]`` (``got`` bytes of it were read:
        fewer when the file shrank since the scan began)."""
        if w.piece:
            return self._check_piece(w, buf[base:base + got], got < w.end - w.start)
        t = self.table
        rows = w.rows
        short = t.file_offset[rows] + t.nbytes[rows] > w.start + got
        out: list[Finding] = []
        for i in rows[short].tolist():  # the file ends inside them now
            out.extend(self._per_block(i, f"variable {self._name(i)!r}: file ends inside the data at offset "
                                          f"{int(t.file_offset[i])}"))
        rows = rows[~short]
        if len(rows):
            out.extend(self._check_direct(rows, buf, base - w.start))
            if self.ranges is not None:
                self._range_direct(rows, buf, base - w.start)
        return out

    def _check_piece(self, w: _Window, data: np.ndarray, short: bool) -> list[Finding]:
        """One piece of a row larger than WINDOW: each block it meets fed to its running checksum, checked where
        the block ends (a row's blocks are contiguous byte ranges of it, in any order)."""
        t = self.table
        i = int(w.rows[0])
        at = w.start - int(t.file_offset[i])  # the piece's first byte in the row
        out: list[Finding] = []
        if i in self.cut_short:  # an earlier piece found the end of the file
            return out
        if short:  # the file shrank while it was read: every block of the row not checked yet
            self.cut_short.add(i)
            pending = [j for j in range(int(t.vptr[i]), int(t.vptr[i + 1])) if self.spans[j].sum() > at]
            for j in pending:
                self.running.pop(j, None)
                out.append(Finding(int(t.file_offset[i]), self._name(i), int(t.vblock[j]), int(t.vrank[j]),
                                   f"variable {self._name(i)!r}: file ends inside the data at offset "
                                   f"{int(t.file_offset[i])}"))
            return out
        view = memoryview(data)
        for j in range(int(t.vptr[i]), int(t.vptr[i + 1])):
            lo, hi = int(self.spans[j, 0]), int(self.spans[j].sum())
            if hi <= at or lo >= at + len(view):
                continue
            h = self.running.setdefault(j, xxhash.xxh3_64())
            h.update(view[max(lo, at) - at:min(hi, at + len(view)) - at])
            if hi <= at + len(view):
                digest = self.running.pop(j).intdigest()
                if digest != int(t.vsum[j]):
                    out.append(self._mismatch(i, j, digest))
        if self.ranges is not None:
            self.ranges.add(self._name(i), data.view(self.declared[int(t.var[i])]))
        return out

    def _range_direct(self, rows: np.ndarray, buf: np.ndarray, shift: int) -> None:
        """Add rows (raw, file order) to the ranges, one array per run of rows of one variable that follow one
        another in the file (a writer's blocks of a variable: one numpy reduction, not one per block)."""
        t = self.table
        start = t.file_offset[rows]
        stop = start + t.nbytes[rows]
        var = t.var[rows]
        cut = np.flatnonzero((start[1:] != stop[:-1]) | (var[1:] != var[:-1])) + 1
        for a, b in zip([0, *cut.tolist()], [*cut.tolist(), len(rows)], strict=True):
            v = int(var[a])
            lo, hi = int(start[a]) + shift, int(stop[b - 1]) + shift
            self.ranges.add(self.table.names[v], buf[lo:hi].view(self.declared[v]))

    def _check_direct(self, rows: np.ndarray, buf: np.ndarray, shift: int) -> list[Finding]:
        """Hash every block of ``rows`` (raw, whole byte ranges) where it lies in ``buf`` (file offset + shift)."""
        t = self.table
        counts = t.vptr[rows + 1] - t.vptr[rows]
        blocks = _ranges(t.vptr[rows], counts)
        starts = np.repeat(t.file_offset[rows] + shift, counts) + self.spans[blocks, 0]
        stops = starts + self.spans[blocks, 1]
        view = memoryview(buf)
        digests = np.fromiter(map(xxhash.xxh3_64_intdigest, map(view.__getitem__, map(slice, starts.tolist(),
                                                                                     stops.tolist()))),
                              np.uint64, count=len(blocks))
        bad = np.flatnonzero(digests != t.vsum[blocks])
        if not len(bad):
            return []
        row_of = np.repeat(rows, counts)
        return [self._mismatch(int(row_of[b]), int(blocks[b]), int(digests[b])) for b in bad.tolist()]

    def _check_array(self, i: int, arr: np.ndarray) -> list[Finding]:
        """Row ``i`` as an array of its box (native byte order): each block hashed in the declared dtype
        (``ckptio inspect --verify``'s first implementation, per extent), and its values added to the ranges."""
        t = self.table
        declared = self.declared[int(t.var[i])]
        if self.ranges is not None:
            self.ranges.add(self._name(i), arr)
        out = []
        for j in range(int(t.vptr[i]), int(t.vptr[i + 1])):
            nd = int(t.var_ndim[t.var[i]])
            sub = arr[tuple(slice(int(a - b), int(a - b + s)) for a, b, s in
                            zip(t.vlo[j, :nd], t.lo[i, :nd], t.vshape[j, :nd], strict=True))]
            digest = xxhash.xxh3_64_intdigest(memoryview(np.ascontiguousarray(sub, dtype=declared)).cast("B"))
            if digest != int(t.vsum[j]):
                out.append(self._mismatch(i, j, digest))
        return out

    def _mismatch(self, i: int, j: int, digest: int) -> Finding:
        t = self.table
        return Finding(int(t.file_offset[i]), self._name(i), int(t.vblock[j]), int(t.vrank[j]),
                       f"checksum mismatch (stored {int(t.vsum[j]):016x}, computed {digest:016x})")

    def _per_block(self, i: int, message: str) -> Iterator[Finding]:
        """``message`` once per block of row ``i`` (once, with no block, for a row that holds none)."""
        t = self.table
        first, stop = int(t.vptr[i]), int(t.vptr[i + 1])
        if first == stop:
            yield Finding(int(t.file_offset[i]), self._name(i), None, None, message)
        for j in range(first, stop):
            yield Finding(int(t.file_offset[i]), self._name(i), int(t.vblock[j]), int(t.vrank[j]), message)

    def _name(self, i: int) -> str:
        return self.table.names[int(self.table.var[i])]


def _block_spans(t: ExtentTable, itemsize: np.ndarray) -> np.ndarray:
    """Per block (rows of the ``v*`` columns): ``(byte offset in its row, byte length)`` where its elements are one
    contiguous byte range of the row's C-ordered box (every axis after its first longer than 1 is whole), else
    ``(-1, -1)``. Vectorized over all blocks."""
    m = len(t.vblock)
    out = np.full((m, 2), -1, np.int64)
    if m == 0:
        return out
    row = np.repeat(np.arange(len(t), dtype=np.int64), np.diff(t.vptr))
    full, shape = t.shape[row], t.vshape
    rel = t.vlo - t.lo[row]
    longer = shape > 1
    first = np.where(longer.any(axis=1), longer.argmax(axis=1), shape.shape[1])
    after = np.arange(shape.shape[1])[None, :] > first[:, None]
    one_range = ((shape == full) | ~after).all(axis=1)
    strides = np.ones_like(full)
    if full.shape[1] > 1:
        strides[:, :-1] = np.cumprod(full[:, :0:-1], axis=1)[:, ::-1]
    item = itemsize[t.var[row]]
    out[one_range, 0] = (rel * strides).sum(axis=1)[one_range] * item[one_range]
    out[one_range, 1] = shape.prod(axis=1)[one_range] * item[one_range]
    return out


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + c)`` for every (s, c), vectorized."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(counts)
    return np.repeat(starts - (ends - counts), counts) + np.arange(total, dtype=np.int64)


def _windows(rows: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, inside: np.ndarray,
             unit: int, window: int) -> Iterator[_Window]:
    """``rows`` (file order; their offsets and lengths) grouped into file ranges of up to ``window`` bytes,
    through holes up to GAP; a row larger than ``window`` alone, in pieces of ``window`` bytes (rounded down to a
    multiple of ``unit``, so that each piece holds whole elements); rows past the end of the file (``inside``
    False) belong to no window."""
    rows, offsets, lengths = rows[inside], offsets[inside], lengths[inside]
    step = max(unit, window - window % unit)
    first, start, end = None, 0, 0
    for k, (off, length) in enumerate(zip(offsets.tolist(), lengths.tolist(), strict=True)):
        if first is not None and (off - end > GAP or max(end, off + length) - start > window or length > window):
            yield _Window(rows[first:k], start, end)
            first = None
        if length > window:
            for at in range(off, off + length, step):
                yield _Window(rows[k:k + 1], at, min(at + step, off + length), piece=True)
            continue
        if first is None:
            first, start, end = k, off, off + length
        else:
            end = max(end, off + length)
    if first is not None:
        yield _Window(rows[first:], start, end)


def _declared(variables: Mapping[str, VariableRecord]) -> dict[str, np.dtype]:
    """Each variable's declared dtype (the one its checksums are computed in)."""
    return {name: np.dtype(var.dtype) for name, var in variables.items()}


class _Reader:
    """The windows' bytes, in order, as ``(buffer, where the window starts in it, bytes read)``: window k+1 read
    by a helper thread (when ``threaded``) while the caller checks window k; two alternating buffers."""

    def __init__(self, fd: int, windows: list[_Window], threaded: bool):
        self.fd, self.windows = fd, windows
        self.buffers: dict[int, np.ndarray] = {}
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="ckptio-verify") if threaded and len(windows) > 1 \
            else None
        self.pending: Future | None = None

    def __iter__(self) -> Iterator[tuple[np.ndarray, int, int]]:
        if self.pool is None:
            for k in range(len(self.windows)):
                yield self._read(k)
            return
        self.pending = self.pool.submit(self._read, 0)
        for k in range(len(self.windows)):
            done = self.pending.result()
            # window k+1 goes to the other buffer, which window k-1 used (checked: the caller asked for window k)
            self.pending = self.pool.submit(self._read, k + 1) if k + 1 < len(self.windows) else None
            yield done

    def _read(self, k: int) -> tuple[np.ndarray, int, int]:
        """Read window ``k`` into buffer ``k % 2``: ``(buffer, offset of the window's first byte in it, bytes
        read)``; fewer bytes than the window only where the file ends first."""
        w = self.windows[k]
        base = pagealign.staging_position(0, w.start)
        need = base + w.end - w.start
        buf = self.buffers.get(k % 2)
        if buf is None or buf.nbytes < need:
            buf = self.buffers[k % 2] = pagealign.page_aligned_bytes(need)
        view = memoryview(buf)
        done = 0
        while done < w.end - w.start:
            got = os.preadv(self.fd, [view[base + done:base + min(w.end - w.start, done + _MAX_CALL)]], w.start + done)
            if got == 0:
                break
            done += got
        return buf, base, done

    def close(self) -> None:
        """Wait for a read still running (it writes into a buffer of this reader) and end the thread."""
        if self.pool is not None:
            if self.pending is not None:
                self.pending.cancel()
            self.pool.shutdown(wait=True)
            self.pool = None
