"""Background checkpointing: an I/O thread per communicator, with double-buffered, 4096-aligned staging.

``ckptio.create(..., mode="async")``: at ``close()`` every rank copies its declared blocks into a staging
buffer (one of two pre-allocated slots, reused between checkpoints), hands the collective write + commit to
an I/O thread that runs it on a *duplicated* communicator, and returns. The simulation then overwrites its
arrays freely: the checkpoint holds the values at the time of ``close()``. A new checkpoint waits only when
both slots are still busy (double buffering, as in Lee et al., HiPC 2021).

Every rank submits checkpoints in the same program order, and the I/O thread runs them in FIFO order, so the
collectives of background checkpoints match across ranks. A background failure is agreed on every rank (the
same ckptio.coord phases as a synchronous write) and raised at the next ckptio call on that communicator
(``wait()``, or the next ``create``), never lost. This needs ``MPI_THREAD_MULTIPLE``; without it ckptio
warns and writes synchronously.
"""

from __future__ import annotations

import atexit
import queue
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

ALIGN = 4096
SLOTS = 2


def thread_multiple_available() -> bool:
    from mpi4py import MPI

    return MPI.Query_thread() >= MPI.THREAD_MULTIPLE


class StagingPool:
    """Two reusable 4096-aligned byte buffers; ``acquire`` blocks while both are in use."""

    def __init__(self, slots: int = SLOTS):
        self._buffers: list[np.ndarray] = [np.empty(0, np.uint8) for _ in range(slots)]
        self._free = list(range(slots))
        self._cond = threading.Condition()

    def acquire(self, nbytes: int) -> tuple[int, np.ndarray]:
        with self._cond:
            while not self._free:
                self._cond.wait()
            slot = self._free.pop(0)
        if self._buffers[slot].nbytes < nbytes:
            raw = np.empty(nbytes + ALIGN, np.uint8)
            start = (-raw.ctypes.data) % ALIGN
            self._buffers[slot] = raw[start:start + nbytes]
        return slot, self._buffers[slot][:nbytes]

    def release(self, slot: int) -> None:
        with self._cond:
            self._free.append(slot)
            self._cond.notify_all()


def stage_arrays(pool: StagingPool, arrays: list[np.ndarray]) -> tuple[int, list[np.ndarray]]:
    """Copy arrays (C order) into one staging slot, each at a 64-byte aligned position; returns the copies."""
    sizes = [(a.nbytes + 63) // 64 * 64 for a in arrays]
    slot, buf = pool.acquire(max(sum(sizes), 1))
    copies, pos = [], 0
    for a, size in zip(arrays, sizes, strict=True):
        view = buf[pos:pos + a.nbytes].view(a.dtype).reshape(a.shape) if a.size else np.empty(a.shape, a.dtype)
        np.copyto(view, a, casting="no")
        copies.append(view)
        pos += size
    return slot, copies


class AsyncCheckpoint:
    """Handle of one background checkpoint (returned by ``Writer.close()`` in async mode)."""

    def __init__(self, path: str):
        self.path = path
        self._event = threading.Event()
        self.error: BaseException | None = None
        self.reported = False

    def done(self) -> bool:
        """Local: True once the background write and commit finished (successfully or not)."""
        return self._event.is_set()

    def wait(self) -> None:
        """Local: block until finished; raise its error (the same on every rank) if it failed."""
        self._event.wait()
        if self.error is not None:
            self.reported = True
            raise self.error

    def _finish(self, error: BaseException | None) -> None:
        self.error = error
        self._event.set()


class IOEngine:
    """The I/O thread of one communicator. Created collectively (it duplicates the communicator)."""

    def __init__(self, comm):
        self.comm = comm.Dup()
        self.pool = StagingPool()
        self._queue: queue.Queue = queue.Queue()
        self._handles: list[AsyncCheckpoint] = []
        self._thread = threading.Thread(target=self._run, name="ckptio-io", daemon=True)
        self._thread.start()

    def submit(self, handle: AsyncCheckpoint, job: Callable[[Any], None], on_done: Callable[[], None]) -> None:
        self._handles.append(handle)
        self._queue.put((handle, job, on_done))

    def check_finished_before_new(self) -> None:
        """Before checkpoint k: wait for checkpoints up to k - SLOTS (their buffers are needed anyway) and raise
        the first unreported failure among every finished one of those. Deterministic, so the same on every rank
        (a failure was agreed collectively in the background before the handle finished)."""
        must_finish = self._handles[:-SLOTS + 1] if SLOTS > 1 else list(self._handles)
        for handle in must_finish:
            handle._event.wait()
        self._handles = self._handles[len(must_finish):]
        for handle in must_finish:
            if handle.error is not None and not handle.reported:
                handle.reported = True
                raise handle.error

    def drain(self) -> None:
        """Local: wait for every submitted checkpoint (failures stay on their handles)."""
        for handle in list(self._handles):
            handle._event.wait()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            handle, job, on_done = item
            error = None
            try:
                job(self.comm)
            except BaseException as exc:
                error = exc
            finally:
                on_done()
            handle._finish(error)

    def shutdown(self) -> None:
        self.drain()
        self._queue.put(None)
        self._thread.join()


_ENGINES: dict[int, IOEngine] = {}


def engine_for(comm) -> IOEngine:
    """Collective the first time for a communicator (duplicates it); cached afterwards."""
    key = comm.py2f() if hasattr(comm, "py2f") else id(comm)
    if key not in _ENGINES:
        _ENGINES[key] = IOEngine(comm)
    return _ENGINES[key]


def wait_all() -> None:
    """Local: wait for every background checkpoint of this process (also run at interpreter exit)."""
    for engine in list(_ENGINES.values()):
        engine.drain()


def warn_no_threads() -> None:
    warnings.warn("ckptio: MPI was not initialized with MPI_THREAD_MULTIPLE; mode='async' falls back to "
                  "synchronous checkpoints", RuntimeWarning, stacklevel=4)


# mpi4py finalizes MPI in its own atexit handler, registered when mpi4py.MPI was imported (before us):
# atexit runs handlers last-in first-out, so background checkpoints finish before MPI_Finalize.
atexit.register(wait_all)
