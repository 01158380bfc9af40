"""Background checkpointing: an I/O thread per communicator, with double-buffered, 4096-aligned staging.

``ckptio.create(..., mode="async")``: at ``close()`` every rank copies its declared blocks into a staging
buffer (one of two pre-allocated slots, reused between checkpoints), hands the collective write + commit to
an I/O thread that runs it on a *duplicated* communicator, and returns. The simulation then overwrites its
arrays freely: the checkpoint holds the values at the time of ``close()``. A new checkpoint waits only when
both slots are still busy (double buffering, as in Lee et al., HiPC 2021).

Every rank submits checkpoints in the same program order, and the I/O thread runs them in FIFO order, so the
collectives of background checkpoints match across ranks. This needs ``MPI_THREAD_MULTIPLE``; without it ckptio
warns and writes synchronously.

A background failure is never lost. It is agreed on every rank (the same ckptio.coord phases as a synchronous
write), so every rank holds the same error, and it is raised, once, by the first of:

* ``Writer.wait()`` of that checkpoint, or ``Series.wait()`` (which raises if ANY of the series' background
  checkpoints failed since the last report, the others named in the error's notes);
* ``close()`` of a later background checkpoint on the same communicator, once the failed one is at least
  ``SLOTS`` checkpoints old (it must have finished by then on every rank, so every rank raises alike; the later
  checkpoint is still submitted and written);
* interpreter exit (:func:`report_at_exit`): every unreported failure is printed on stderr, naming the checkpoint
  and the error, and the exit status is made 1 when that is safe. Python gives an exit handler no way to change
  the status; the only way is ``os._exit``, which skips whatever would still run after ckptio's handler. ckptio
  does it only when what remains is known: the exit handlers registered before ckptio's are only ``logging``'s
  and ``h5py``'s (ckptio runs the first itself; the second only frees memory), and no HDF5 file is left open.
  It then flushes every open Python file, finalizes MPI (every rank holds the same failure, so every rank does
  this) and exits with status 1. Otherwise the status stays what the program set, and the message says so.
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ckptio import _warn
from ckptio.coord import comms

ALIGN = 4096
SLOTS = 2


def thread_multiple_available() -> bool:
    from ckptio.coord.mpi import MPI

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

    def done_event(self) -> threading.Event:
        """Set when the background work finished (successfully or not)."""
        return self._event

    def wait(self) -> None:
        """Local: block until finished; raise its error (the same on every rank) if it failed."""
        self._event.wait()
        if self.error is not None:
            self.reported = True
            raise self.error

    def _finish(self, error: BaseException | None) -> None:
        self.error = error
        if error is not None:
            _FAILED.append(self)
        self._event.set()


_FAILED: list[AsyncCheckpoint] = []  # every failed background checkpoint of this process (reported or not)


def raise_failures(handles: list[AsyncCheckpoint], where: str) -> None:
    """Raise the first unreported failure among the finished ``handles`` (the others, marked reported too, are
    named in its notes). Deterministic when every rank passes the same handles, all finished."""
    failed = [h for h in handles if h.done() and h.error is not None and not h.reported]
    if not failed:
        return
    for h in failed:
        h.reported = True
    first = failed[0].error
    assert first is not None
    first.add_note(f"ckptio: background checkpoint {failed[0].path} failed; reported by {where}")
    for h in failed[1:]:
        first.add_note(f"ckptio: background checkpoint {h.path} failed too: {type(h.error).__name__}: {h.error}")
    raise first


class IOEngine:
    """The I/O thread of one communicator. Created collectively (it duplicates the communicator)."""

    def __init__(self, comm):
        self.comm = comms.duplicate(comm)
        self.pool = StagingPool()
        self._queue: queue.Queue = queue.Queue()
        self._handles: list[AsyncCheckpoint] = []
        self._thread = threading.Thread(target=self._run, name="ckptio-io", daemon=True)
        self._thread.start()

    def submit(self, handle: AsyncCheckpoint, job: Callable[[Any], None], on_done: Callable[[], None]) -> None:
        """Local: queue ``job`` for the I/O thread. The caller has loaded the backend's library in this thread
        first (see :func:`finish_before_later_exit_handlers`)."""
        self._handles.append(handle)
        self._queue.put((handle, job, on_done))
        finish_before_later_exit_handlers()

    def settle_before_new(self) -> list[AsyncCheckpoint]:
        """Before checkpoint k: wait for checkpoints up to k - SLOTS (their buffers are needed anyway); returns
        them. The same list on every rank (program order), each finished everywhere."""
        must_finish = self._handles[:-SLOTS + 1] if SLOTS > 1 else list(self._handles)
        for handle in must_finish:
            handle._event.wait()
        self._handles = self._handles[len(must_finish):]
        return must_finish

    def check_finished_before_new(self) -> None:
        """:meth:`settle_before_new`, then raise the unreported failures among them (:func:`raise_failures`);
        deterministic, so the same on every rank (a failure was agreed collectively before its handle finished)."""
        raise_failures(self.settle_before_new(), "the next background checkpoint's close()")

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
    """Local: wait for every background checkpoint of this process (failures stay on their handles)."""
    for engine in list(_ENGINES.values()):
        engine.drain()


def finish_before_later_exit_handlers() -> None:
    """Local: make :func:`wait_all` the first exit handler to run (``atexit`` runs the newest first).

    A library imported after ckptio registers exit handlers that run before ckptio's :func:`report_at_exit`:
    h5py's tears down its type conversions, after which the I/O thread's HDF5 writes fail ("Operation not defined
    for data type class") and MPI_Finalize may crash (issue 23). Re-registered at every submit, after the backend's
    library is loaded, so the background checkpoints still in flight finish while every library still works."""
    atexit.unregister(wait_all)
    atexit.register(wait_all)


def warn_no_threads() -> None:
    _warn.warn("ckptio: MPI was not initialized with MPI_THREAD_MULTIPLE; mode='async' falls back to "
               "synchronous checkpoints", RuntimeWarning)


def unreported_failures() -> list[AsyncCheckpoint]:
    return [h for h in _FAILED if not h.reported]


def report_at_exit() -> None:
    """Interpreter exit: wait for background checkpoints, then report every failure nobody was told about
    (stderr, and exit status 1 when safe; see the module docstring)."""
    wait_all()
    lost = unreported_failures()
    if not lost:
        return
    for h in lost:
        h.reported = True
    safe = _safe_to_force_exit()
    lines = [f"ckptio: ERROR: {len(lost)} background checkpoint(s) failed and the program never asked "
             f"(no wait()/close() after the failure):"]
    lines += [f"ckptio:   {h.path}: {type(h.error).__name__}: {h.error}" for h in lost]
    lines.append("ckptio: exiting with status 1" if safe else
                 "ckptio: the exit status cannot be changed safely here (other exit handlers must still run); "
                 "call Series.wait() or Writer.wait() before exiting to get the error as an exception")
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
    if safe:
        _force_exit(1)


# Exit handlers that may be registered before ckptio's (they then run after it): what to do instead of them.
_KNOWN_EARLIER_HANDLERS = ("logging", "h5py._conv")
_EARLIER_AT_IMPORT = atexit._ncallbacks()  # handlers registered before ours (see _safe_to_force_exit)
_KNOWN_AT_IMPORT = sum(1 for m in _KNOWN_EARLIER_HANDLERS if m in sys.modules)


def _safe_to_force_exit() -> bool:
    """Whether ``os._exit`` skips nothing but what :func:`_force_exit` does itself or need not be done."""
    from ckptio import settings

    if settings.get("CKPTIO_EXIT_STATUS_ON_LOST_FAILURE") == "0":
        return False
    if _EARLIER_AT_IMPORT != _KNOWN_AT_IMPORT:
        return False  # an unknown exit handler registered before ckptio's would be skipped
    h5f = getattr(sys.modules.get("h5py"), "h5f", None)
    try:
        if h5f is not None and h5f.get_obj_count(h5f.OBJ_ALL, h5f.OBJ_FILE) > 0:
            return False  # an open HDF5 file is flushed only by HDF5's own exit handler
    except Exception:
        return False
    return True


def _force_exit(status: int) -> None:
    """Do what the skipped exit steps would do that matters (log handlers, buffered files, MPI_Finalize), then
    ``os._exit(status)``."""
    if "logging" in sys.modules:
        sys.modules["logging"].shutdown()
    for obj in gc.get_objects():
        if isinstance(obj, io.IOBase):
            try:
                if not obj.closed:
                    obj.flush()
            except Exception:
                pass
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        for engine in list(_ENGINES.values()):
            engine.shutdown()
        mpi.Finalize()
    os._exit(status)


# mpi4py finalizes MPI after every Python exit handler (it uses Py_AtExit), so background checkpoints can
# finish here, with MPI still usable.
atexit.register(report_at_exit)
