"""Space on the file system: reserve it before a collective write, and check afterwards that the data landed.

MPI-IO libraries do not report a full file system reliably: Open MPI 4.1's OMPIO hangs the collective write when
one aggregator gets ENOSPC (it leaves the collective, the others wait in it) and silently drops the rest of a short
write, so a checkpoint could even "succeed" with holes. ``fallocate`` turns that into one clean error on rank 0,
which the engine raises on every rank, before anything is written (:func:`reserve_space`). Where no space can be
reserved (NFSv3, older Lustre, some FUSE file systems), :func:`missing_data` finds what a full file system dropped
without an error: the holes in the data's byte ranges (``SEEK_HOLE``), whose blocks are then read back.

Everything here is local (one rank, normally rank 0): the engine (:mod:`ckptio.engine.commit`) runs it inside its
agreed phases.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ckptio.errors import CheckpointIOError
from ckptio.model.document import CheckpointDocument
from ckptio.model.extent_table import ExtentTable

_NO_PREALLOCATION = {errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}  # (ENOTSUP == EOPNOTSUPP on Linux)
_fallocate: Any = None
# Fault injection (tests/faults): set to 1, every reservation behaves as on a file system that cannot preallocate
NO_FALLOCATE_ENV = "CKPTIO_FAULT_NO_FALLOCATE"
# ... and every file system as one that shows no holes (CephFS through ceph-fuse): :func:`holes` finds none
NO_HOLES_ENV = "CKPTIO_FAULT_NO_HOLES"


def _fallocate_function():
    """Linux ``fallocate(2)`` from the C library, or None (another OS). Not ``os.posix_fallocate``: where a file
    system cannot preallocate (NFSv3, older Lustre, some FUSE), glibc emulates it by writing a byte into every
    block of the range, from one process, which would take hours for a large checkpoint on a parallel file
    system; the system call fails with EOPNOTSUPP instead, and then nothing is reserved."""
    global _fallocate
    if os.environ.get(NO_FALLOCATE_ENV) == "1":
        return None
    if _fallocate is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fn = getattr(libc, "fallocate64", None) or getattr(libc, "fallocate", None)
        except OSError:
            fn = None
        if fn is not None:
            fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
            fn.restype = ctypes.c_int
        _fallocate = fn or False
    return _fallocate or None


MERGE_GAP = 64 << 10  # reserve a gap between two ranges rather than make another call
MAX_RANGES = 1024  # fallocate calls per reservation at most (the smallest gaps are merged first)


def coalesce(ranges: Sequence[tuple[int, int]], merge_gap: int = MERGE_GAP,
             max_ranges: int = MAX_RANGES) -> list[tuple[int, int]]:
    """Byte ranges ``[start, end)`` sorted and merged: overlapping or adjacent ones, those less than
    ``merge_gap`` apart, and then the closest ones until at most ``max_ranges`` remain."""
    out: list[list[int]] = []
    for start, end in sorted((int(a), int(b)) for a, b in ranges if b > a):
        if out and start - out[-1][1] < merge_gap:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    if len(out) > max_ranges:
        gaps = sorted(range(len(out) - 1), key=lambda i: out[i + 1][0] - out[i][1])
        merge = set(gaps[:len(out) - max_ranges])
        merged: list[list[int]] = []
        for i, r in enumerate(out):
            if i and (i - 1) in merge:
                merged[-1][1] = r[1]
            else:
                merged.append(list(r))
        out = merged
    return [(a, b) for a, b in out]


def touching_runs(starts: np.ndarray, ends: np.ndarray) -> list[tuple[int, int]]:
    """:func:`coalesce` with ``merge_gap=1`` and no limit (overlapping or touching ranges merged), for int64
    columns: a few numpy calls for 10,000 small variables instead of a Python step per range. Local."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return []
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order])  # each run's reach so far
    first = np.ones(len(starts), bool)
    first[1:] = starts[1:] > ends[:-1]  # a gap before it: a new run
    heads = np.flatnonzero(first)
    tails = np.append(heads[1:], len(starts)) - 1
    return list(zip(starts[heads].tolist(), ends[tails].tolist(), strict=True))


def reserve_space(path: str, ranges: Sequence[tuple[int, int]], what: str) -> bool:
    """Local (one rank): allocate the file system blocks of the byte ranges ``[start, end)`` of the existing
    file ``path`` (merged by :func:`coalesce`; ``fallocate`` mode 0: the size grows to the last end; blocks already
    allocated stay as they are). ``what`` names the bytes for the message ("its data", "the index").

    Returns True when reserved, False when the file system or OS cannot preallocate (nothing to do then).
    Raises CheckpointIOError saying the space ran out (ENOSPC, EDQUOT) or why else it failed.
    """
    ranges = coalesce(ranges)
    fn = _fallocate_function() if ranges else None
    if fn is None:
        return not ranges
    err, grown = 0, 0
    fd = os.open(path, os.O_WRONLY)
    try:
        blocks_before = os.fstat(fd).st_blocks
        for start, end in ranges:
            while fn(fd, 0, start, end - start) != 0:
                err = ctypes.get_errno()
                if err != errno.EINTR:
                    break
            else:
                continue
            grown = (os.fstat(fd).st_blocks - blocks_before) * 512  # taken so far: earlier ranges, part of this one
            break
    finally:
        os.close(fd)
    if not err:
        return True
    if err in _NO_PREALLOCATION:
        return False
    directory = os.path.dirname(os.path.abspath(path))
    needed = sum(end - start for start, end in ranges)
    if err in (errno.ENOSPC, errno.EDQUOT):
        try:
            st = os.statvfs(directory)  # free before this reservation: what it took itself comes back with the file
            free = f"; {st.f_bavail * st.f_frsize + max(grown, 0):,} bytes were free there"
        except OSError:
            free = ""
        raise CheckpointIOError(f"{path}: {os.strerror(err).lower()}: no space for {what} on the file system of "
                                f"{directory}: it needs {needed:,} bytes{free}")
    raise CheckpointIOError(f"{path}: cannot reserve {needed:,} bytes for {what}: {os.strerror(err)}")


def holes(path: str, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Local: the parts of the byte ranges ``[start, end)`` of ``path`` that the file system reports as holes
    (``SEEK_HOLE``/``SEEK_DATA``) or that lie beyond the end of the file. A file system that cannot tell
    reports no holes. Written data is never a hole, except where a file system stores blocks of zeros as holes
    (ZFS or btrfs with compression): callers check the contents of what this finds."""
    if os.environ.get(NO_HOLES_ENV) == "1":
        return []
    ranges = coalesce(ranges, merge_gap=1, max_ranges=1 << 62)  # only touching ranges: gaps between them are no data
    found: list[tuple[int, int]] = []
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        for start, end in ranges:
            pos = start
            while pos < end:
                if pos >= size:
                    found.append((pos, end))
                    break
                try:
                    hole = os.lseek(fd, pos, os.SEEK_HOLE)
                except OSError as exc:
                    if exc.errno == errno.ENXIO:  # pos is past the end (the file shrank)
                        found.append((pos, end))
                        break
                    return []  # EINVAL/EOPNOTSUPP: this file system cannot tell
                if hole >= end:
                    break
                try:
                    data = os.lseek(fd, hole, os.SEEK_DATA)
                except OSError:  # ENXIO: no data after the hole
                    data = max(size, end)
                found.append((hole, min(data, end)))
                pos = data
    finally:
        os.close(fd)
    return found


_SHOWN: dict[int, bool] = {}  # lost_writes_show's answer, by file system (st_dev)


def lost_writes_show(directory: str) -> bool:
    """Local: whether data that was never written reads as a hole on the file system of ``directory``, as
    :func:`missing_data` needs to find it: bytes reserved as :func:`reserve_space` reserves them, or, where nothing
    can be reserved, left sparse. Probed once per file system and process with a file of ckptio's own (created
    exclusively, removed at once): its first 64 KiB reserved, a byte written at 128 KiB, then ``SEEK_HOLE`` from
    offset 0. ext4, XFS and tmpfs show the hole; CephFS through ceph-fuse answers the file's end (measured: a
    lost write of an HDF5 checkpoint was found only at its restart). False where the probe cannot be made."""
    if os.environ.get(NO_HOLES_ENV) == "1":
        return False
    try:
        device = os.stat(directory).st_dev
    except OSError:
        return False
    if device in _SHOWN:
        return _SHOWN[device]
    probe = os.path.join(directory, f".ckptio-holes-probe-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return False
    shown = False
    try:
        fn = _fallocate_function()
        if fn is not None:
            fn(fd, 0, 0, 64 << 10)  # (where it cannot, the range stays sparse: the other case)
        os.pwrite(fd, b"\x01", 128 << 10)
        shown = os.lseek(fd, 0, os.SEEK_HOLE) == 0
    except OSError:
        shown = False
    finally:
        os.close(fd)
        try:
            os.unlink(probe)
        except OSError:
            pass
    _SHOWN[device] = shown
    return shown


def _not_landed(path: str, backend: Any, meta: CheckpointDocument | Mapping[str, Any], table: ExtentTable,
                rows: np.ndarray) -> str | None:
    """Local: read back the extents ``rows`` (a boolean mask over ``table``) and compare their blocks' checksums;
    what did not land, or None."""
    from ckptio.verify import verify_rows  # (verify reads through the backends: imported where it is needed)

    chosen = np.flatnonzero(rows)
    if not len(chosen):
        return None
    problems = verify_rows(backend, path, meta, table, chosen)
    return f"{len(problems)} block(s) of the data did not land ({problems[0]})" if problems else None


def missing_data(path: str, backend: Any, meta: CheckpointDocument | Mapping[str, Any]) -> str | None:
    """Local, rank 0 after the data was written and synced: why the data of the checkpoint ``meta`` did not all
    land in ``path``, or None. Extents that cross a hole (:func:`holes`) are read back and their blocks'
    checksums compared (a hole whose blocks check out holds zeros a file system chose not to store); nothing
    else is read, so a complete file costs a few ``lseek`` calls and a checkpoint of many small variables a few
    numpy calls (the backend's columns, :meth:`~ckptio.backends.base.Backend.extent_table`)."""
    table = backend.extent_table(meta)
    starts, ends = table.file_offset, table.file_offset + table.nbytes
    gaps = holes(path, touching_runs(starts, ends))
    if not gaps:
        return None
    crossing = np.zeros(len(table), bool)
    for a, b in gaps:
        crossing |= (starts < b) & (a < ends)
    why = _not_landed(path, backend, meta, table, crossing)
    if why is None:
        return None
    missing = sum(b - a for a, b in gaps)
    return f"{why}; the file has {missing:,} bytes of holes where data was written, first at byte {gaps[0][0]:,}"


def unseen_losses(path: str, backend: Any, meta: CheckpointDocument | Mapping[str, Any], below: int,
                  names: set[str] | None = None) -> str | None:
    """Local, the planning rank, where a client's write error may have been lost (Open MPI's OMPIO) on a file
    system that shows holes (:func:`lost_writes_show`): why the data of ``meta`` did not all land in ``path``, from
    reading back and checking every extent smaller than ``below`` bytes, or None. :func:`missing_data` finds a lost
    share only where it left a whole block unwritten; an aggregator's share of a collective call of an extent of
    ``below`` = 4 x aggregators x block bytes or more holds half a stripe, two blocks or more, in one piece (OMPIO's
    stripes are a call's extent over the aggregators), so only the smaller ones are read here: an outside trial lost
    1,000 B of each 3,000 B variable on 3 ranks in blocks that the other ranks had filled in part. ``names``: only
    these variables' extents (the write handle's :meth:`~ckptio.backends.base.WriteHandle.in_small_calls`: a small
    variable written independently reports its errors, one in a large call leaves a hole)."""
    if names is not None and not names:
        return None
    table = backend.extent_table(meta)
    rows = (np.isin(table.var, [i for i, name in enumerate(table.names) if name in names]) if names is not None
            else table.nbytes < below)
    return _not_landed(path, backend, meta, table, rows)
