"""The memory of the arrays a restart allocates itself (reads without ``out=``): whole huge pages, recycled.

Why (issue 29; measured on the development VM, 2-vCPU Firecracker guest, Linux 6.18, THP ``madvise``): what the
allocating restart paid over the same restart into ``out=`` arrays was the first touch of its fresh outputs,
inside the kernel copies that fill them (``preadv`` on the aggregators, the exchange's CMA copies elsewhere).
Touching 256 MiB of fresh private anonymous memory, one process:

* in 4 KiB pages (65,536 faults): 0.46-0.59 GiB/s;
* in 2 MiB transparent huge pages (128 faults): 2.4-3.0 GiB/s when the memory had been freed just before, but
  0.38-0.73 GiB/s when it had been free for more than ~2 s: the guest reports free 2 MiB blocks to the host
  (virtio-balloon free page reporting, ``page_reporting_order`` 9), which takes them back, so the next touch of
  each 4 KiB costs a fault in the host as well. Which case a read gets depends on what the allocator hands out:
  the same read ran 2-3x slower from one repeat to the next (h5py's allocating read too: 0.66 s when run right
  after another read freed its arrays, 2.0 s five seconds later);
* memory the process already touched: nothing.

``numpy.empty`` puts a large array 16 bytes past a page in a mapping that is not 2 MiB-aligned, so up to 2 MiB at
each end of every output are 4 KiB pages (about 500 of the 550 faults of a 43 MiB output). So:

1. an array of at least :data:`MIN_BYTES` is a view of its own private anonymous mapping, started on a 2 MiB
   boundary inside it and advised ``MADV_HUGEPAGE``: every page of it a huge page where the kernel has them;
2. when the caller drops it (its last view), the mapping is kept, its pages mapped, and the next restart output
   of a size it fits (at most twice its need) is made in it: no fault, no zeroing. A kept mapping is advised
   ``MADV_FREE`` (Linux 5.18 and later, see :func:`_lazy_free`): under memory pressure the kernel may take its
   pages back, in LRU order with clean page cache, rather than having to leave them in place until the helper
   thread unmaps them (a page taken comes back zeroed at its next touch, which then faults). They still count
   as the process's resident memory until taken. A kept mapping the kernel took pages of is unmapped when it
   would be reused, and the output gets a fresh one (:func:`_all_pages_mapped`: reclaim splits huge pages, so
   the pages that come back are 4 KiB pages, one fault each). Mappings kept longer than
   ``CKPTIO_RECYCLE_SECONDS`` (default 60; 0: none kept) are unmapped by a helper thread (it makes no MPI call;
   none is started, and nothing is kept, where the MPI thread level is ``MPI_THREAD_SINGLE`` or
   ``CKPTIO_READ_THREAD=0``), and never more is kept than this process's restarts had in use at once.

Every element of a restart's output is written by the read (blocks tile each variable exactly), so a recycled
array's old contents never show; like ``numpy.empty``, nothing else is promised about them. Smaller arrays come
from :func:`ckptio.model.pagealign.restart_empty` as before. Local, no MPI;
thread-safe (an array may die in any thread).
"""

from __future__ import annotations

import ctypes
import math
import mmap
import os
import re
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio import settings
from ckptio.model import pagealign

HUGE_PAGE = 2 << 20
MIN_BYTES = 4 << 20  # below this numpy/glibc's own allocation (and numpy's own huge page advice) is as good
MAX_WASTE = 2  # a kept mapping is reused for a need of at least 1/MAX_WASTE of its size
RECYCLE_ENV = "CKPTIO_RECYCLE_SECONDS"


def empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Local: an uninitialised C-ordered array for a restart to fill (``numpy.empty`` semantics): from
    :data:`RECYCLED` when it has at least :data:`MIN_BYTES`, else :func:`ckptio.model.pagealign.restart_empty`."""
    dt = np.dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize
    if nbytes < MIN_BYTES or dt.hasobject or dt.subdtype is not None:
        return pagealign.restart_empty(shape, dt)
    return RECYCLED.take(nbytes).view(dt).reshape(shape)


@dataclass(eq=False)
class _Mapping:
    """One private anonymous mapping: ``size`` usable bytes from ``offset`` (a 2 MiB boundary)."""

    mm: mmap.mmap
    offset: int
    size: int
    keep_for: float = 0.0  # seconds to keep it once freed (decided when it is handed out, inside a read)
    freed_at: float = 0.0
    filled: bool = False  # every page was mapped when it was freed (a read filled it)


class RecycledMemory:
    """The mappings of this process's restart outputs: those in use (by arrays the caller holds) and those kept
    for reuse. Local; every method may be called from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._kept: list[_Mapping] = []  # free, pages mapped, oldest first
        self._in_use_bytes = 0
        self._peak_bytes = 0  # the most this process's restart outputs had in use at once
        self._trimmer: threading.Thread | None = None
        self.fresh = 0  # mappings made (for tests and benchmarks: how often a read got fresh memory)
        self.reused = 0  # outputs made in a kept mapping
        self.taken_back = 0  # kept mappings unmapped at reuse because the kernel had taken pages of them back

    # ------------------------------------------------------------------ the arrays
    def take(self, nbytes: int) -> np.ndarray:
        """``nbytes`` uninitialised uint8 on a 2 MiB boundary: in the smallest kept mapping that fits (and wastes
        at most half of itself), else in a fresh one. The mapping comes back when the array's last view goes."""
        with self._lock:
            fits = [m for m in self._kept if nbytes <= m.size <= MAX_WASTE * max(nbytes, HUGE_PAGE)]
            found = min(fits, key=lambda m: m.size) if fits else None
            if found is not None:
                self._kept.remove(found)
        if found is not None and found.filled and not _all_pages_mapped(found):  # the kernel took pages back
            _unmap([found])
            found = None
            with self._lock:
                self.taken_back += 1
        if found is None:
            found = self._map(nbytes)
        else:
            with self._lock:
                self.reused += 1
        found.keep_for = _retain_seconds()
        with self._lock:
            self._in_use_bytes += found.size
            self._peak_bytes = max(self._peak_bytes, self._in_use_bytes)
        array = np.frombuffer(memoryview(found.mm)[found.offset:found.offset + nbytes], np.uint8)
        # the array's base is the memoryview numpy made of the mapping: it lives as long as any view of the array
        finalizer = weakref.finalize(array.base, self._give_back, found)
        finalizer.atexit = False
        return array

    def _map(self, nbytes: int) -> _Mapping:
        """A fresh mapping for ``nbytes``: whole 2 MiB pages, one more of address space to start on a boundary
        (never touched, so never backed), advised MADV_HUGEPAGE."""
        size = -(-nbytes // HUGE_PAGE) * HUGE_PAGE
        mm = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        probe = np.frombuffer(mm, np.uint8, count=1)
        offset = (-probe.ctypes.data) % HUGE_PAGE
        del probe  # (releases the buffer: a mapping with an export cannot be closed)
        if hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                mm.madvise(mmap.MADV_HUGEPAGE, offset, size)
            except OSError:  # a kernel without transparent huge pages: 4 KiB pages, still recycled
                pass
        with self._lock:
            self.fresh += 1
        return _Mapping(mm, offset, size)

    def _give_back(self, found: _Mapping) -> None:
        """The last view of an array over ``found`` went: keep the mapping for reuse, or unmap it.

        A kept mapping is advised ``MADV_FREE`` first (:func:`_lazy_free`; before the kept list holds it, so no
        other thread can have written an output into it yet): its pages stay mapped, and a later output made in
        it is written without a fault where they are still there, but the kernel may take them back when memory
        runs short, in LRU order with clean page cache. A page it took comes back zeroed at its next touch,
        which a restart output never reads before the read writes it."""
        if found.keep_for > 0:
            found.filled = _all_pages_mapped(found)
            _lazy_free(found)
        with self._lock:
            self._in_use_bytes -= found.size
            drop = [found]
            if found.keep_for > 0 and self._ensure_trimmer():
                found.freed_at = time.monotonic()
                self._kept.append(found)
                drop = self._over_budget()
                self._wake.notify()
        _unmap(drop)

    # ------------------------------------------------------------------ trimming
    def release(self) -> int:
        """Unmap every kept mapping now; returns the bytes released. Local."""
        with self._lock:
            drop, self._kept = self._kept, []
        _unmap(drop)
        return sum(m.size for m in drop)

    @property
    def kept_bytes(self) -> int:
        with self._lock:
            return sum(m.size for m in self._kept)

    def _over_budget(self) -> list[_Mapping]:
        """(lock held) The oldest kept mappings beyond what this process's restarts had in use at once."""
        drop = []
        while self._kept and sum(m.size for m in self._kept) > self._peak_bytes:
            drop.append(self._kept.pop(0))
        return drop

    def _ensure_trimmer(self) -> bool:
        """(lock held) Whether the thread that unmaps mappings kept too long runs (started once per process; not
        while the interpreter shuts down)."""
        if self._trimmer is None or not self._trimmer.is_alive():
            try:
                trimmer = threading.Thread(target=self._trim_forever, name="ckptio-recycle", daemon=True)
                trimmer.start()
            except RuntimeError:  # "can't create new thread at interpreter shutdown": keep nothing
                return False
            self._trimmer = trimmer
        return True

    def _trim_forever(self) -> None:
        """The helper thread: unmap each kept mapping ``CKPTIO_RECYCLE_SECONDS`` after it was freed. No MPI."""
        while True:
            with self._lock:
                now = time.monotonic()
                drop = [m for m in self._kept if now - m.freed_at >= m.keep_for]
                self._kept = [m for m in self._kept if m not in drop]
                wait = min((m.freed_at + m.keep_for - now for m in self._kept), default=None)
                if not drop:
                    self._wake.wait(timeout=wait)
            _unmap(drop)

    def _after_fork(self) -> None:
        """In a forked child: forget the parent's thread and lock (the kept mappings are the child's copies)."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._trimmer = None


def _lazy_free(found: _Mapping) -> None:
    """``MADV_FREE`` over ``found``'s usable pages, on Linux 5.18 and later only: before "mm: fix race between
    MADV_FREE reclaim and blkdev direct IO read" (5.18) reclaim could discard a lazily freed page that was still
    pinned for I/O, e.g. registered for RDMA by an MPI library's registration cache, which would then deliver a
    next output's data into the old page. Elsewhere (and where the call fails) the pages stay as they are."""
    if hasattr(mmap, "MADV_FREE") and _kernel_at_least(5, 18):
        try:
            found.mm.madvise(mmap.MADV_FREE, found.offset, found.size)
        except OSError:
            pass


_libc_mincore: Any = None  # libc's mincore, found at first use (False: none)


def _all_pages_mapped(found: _Mapping) -> bool:
    """Whether every page of ``found``'s usable bytes is still mapped (``mincore``; True where it cannot be asked).

    A kept mapping is advised ``MADV_FREE``; under memory pressure (a page cache filling the node, a cgroup's
    limit) the kernel takes its pages back, splitting its huge pages to do so: the pages that come back at the
    next touch are 4 KiB pages, one fault each, where a fresh mapping gets a 2 MiB page per fault. Measured in a
    320 MiB cgroup (tests/test_restart_memory.py): 16,384 faults to touch a reused 160 MiB output whose 64 MiB had
    been taken back, 84 for a fresh one; in ``make bench`` on the 2-vCPU Intel VM the allocating restart averaged
    203,505 faults per cold 4 -> 2 read with every output made in kept memory, against 4,048 into ``out=``.
    Such a mapping is not worth reusing: any missing page may sit in a split huge page. (One that was not filled
    when it was freed, an output a failed read never wrote, is reused as it is: nothing was taken from it.)"""
    probe = np.frombuffer(found.mm, np.uint8, count=1)
    start = probe.ctypes.data + found.offset
    del probe  # (a mapping with an export cannot be closed)
    npages = found.size // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * npages)()
    if _mincore(start, found.size, vec) != 0:
        return True
    return bool(np.all(np.frombuffer(vec, np.uint8) & 1))


def _mincore(start: int, size: int, vec) -> int:
    """``mincore(2)``, or -1 where libc has none."""
    global _libc_mincore
    if _libc_mincore is None:
        try:
            _libc_mincore = ctypes.CDLL(None, use_errno=True).mincore
            _libc_mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
            _libc_mincore.restype = ctypes.c_int
        except (OSError, AttributeError):
            _libc_mincore = False
    return _libc_mincore(start, size, vec) if _libc_mincore else -1


def _kernel_at_least(major: int, minor: int) -> bool:
    """Whether this is Linux ``major.minor`` or later (``os.uname().release``, e.g. "6.18.0-foo")."""
    uname = os.uname()
    found = re.match(r"(\d+)\.(\d+)", uname.release)
    return uname.sysname == "Linux" and found is not None and (int(found[1]), int(found[2])) >= (major, minor)


def _retain_seconds() -> float:
    """How long a dropped output's mapping is kept: ``CKPTIO_RECYCLE_SECONDS``, or 0 where no helper thread may
    run beside MPI (:func:`ckptio.engine.readpipe.helper_thread_allowed`). Asked when an array is handed out, never
    when it dies (which may be after ``MPI_Finalize``)."""
    from ckptio.engine import readpipe

    seconds = settings.get(RECYCLE_ENV)
    return seconds if seconds > 0 and readpipe.helper_thread_allowed() else 0.0


def _unmap(mappings: list[_Mapping]) -> None:
    for m in mappings:
        try:
            m.mm.close()
        except BufferError:  # still exported somewhere (not by a restart array): left to the garbage collector
            pass


RECYCLED = RecycledMemory()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=RECYCLED._after_fork)
