"""A write aggregator's file writes, round by round (the write side's mirror of :mod:`ckptio.engine.readpipe`).

Round k is written from buffer slot ``k % 2`` (and from the caller's own arrays: in place, or their short rows
gathered into one staging buffer of at most ``STAGE_BYTES`` reused by every write call) while round k+1 is received
into the other slot: with an independent byte-range writer (``pwritev``, no MPI) and threads allowed
(``CKPTIO_WRITE_THREAD`` not 0 and an MPI thread level above ``MPI_THREAD_SINGLE``), in one helper thread, one
round behind the exchange; otherwise (``CKPTIO_WRITE_IO=mpiio``: MPI calls stay in the calling thread) at once,
in the calling thread. Before round k is received into slot ``k % 2``, :meth:`RoundWriter.wait` makes sure round
k-2's write from that slot is done. The helper thread never calls MPI.

A failed write surfaces as the error returned by :meth:`~RoundWriter.wait` or :meth:`~RoundWriter.finish` (the
engine agrees on it at the next round or at the end, so every rank raises); :meth:`~RoundWriter.close` always
waits for a write still running (it reads memory the engine owns). Local: one aggregator, between the caller's
collectives.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ckptio import settings
from ckptio.backends.base import RangeWriter
from ckptio.engine import placement_stats
from ckptio.engine.write_rounds import STAGE_BYTES, PlannedRun, batches
from ckptio.model import pagealign

THREAD_ENV = "CKPTIO_WRITE_THREAD"  # "0": write in the calling thread (no overlap)


def threads_allowed() -> bool:
    """Whether a helper thread may write beside MPI here: the MPI thread level is above MPI_THREAD_SINGLE and
    CKPTIO_WRITE_THREAD is not 0 (a collective setting, agreed when the checkpoint was closed)."""
    if settings.get(THREAD_ENV) == "0":
        return False
    from ckptio.coord.mpi import MPI

    return MPI.Query_thread() > MPI.THREAD_SINGLE


class RoundWriter:
    """Writes an aggregator's rounds through ``writer``; ``seconds`` accumulates ``write_io`` (time inside the
    writer), ``write_io_cpu`` (its thread's CPU time) and ``write_wait`` (the calling thread blocked on the helper);
    :attr:`file_bytes`, :attr:`file_calls` and :attr:`storage_bytes` (what the kernel accounted to the writing
    thread as storage writes, None where it cannot: ``stats.write.placement``) count what was written."""

    def __init__(self, writer: RangeWriter, threaded: bool, seconds: dict[str, float], stage_bytes: int = STAGE_BYTES):
        self._writer = writer
        self._seconds = seconds
        self._stage_bytes = stage_bytes
        self._stage: np.ndarray | None = None  # short rows of strided own pieces are gathered here (the writing thread)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ckptio-write") if (
            threaded and writer.independent) else None
        self.threaded = self._pool is not None  # (stays as it was after close)
        self._pending: dict[int, Future] = {}
        self.file_bytes = 0
        self.file_calls = 0
        self.storage_bytes: int | None = 0

    def _write(self, runs: Sequence[PlannedRun]) -> None:
        """Local, in the writing thread: one round's runs (their arrays a batch at a time: views of the rows of
        a strided piece exist only for the write call that takes them), timed and accounted."""
        t, c = time.perf_counter(), time.thread_time()
        mark = placement_stats.storage_bytes_written() if self._pool is not None else None
        try:
            for group in batches(runs, stage=self._staging):
                self.file_calls += self._writer.write(group)
                self.file_bytes += sum(a.nbytes for _, arrays in group for a in arrays)
        finally:
            if self._pool is not None:  # (the calling thread's own writes are measured by the engine)
                now = placement_stats.storage_bytes_written()
                if mark is None or now is None or self.storage_bytes is None:
                    self.storage_bytes = None
                else:
                    self.storage_bytes += max(0, now - mark)
            self._seconds["write_io"] += time.perf_counter() - t
            self._seconds["write_io_cpu"] += time.thread_time() - c

    def _staging(self) -> np.ndarray:
        """The staging buffer (page-aligned, allocated at first use; one writing thread uses it at a time)."""
        if self._stage is None:
            self._stage = pagealign.page_aligned_bytes(self._stage_bytes)
        return self._stage

    def submit(self, k: int, runs: Sequence[PlannedRun]) -> BaseException | None:
        """Round ``k``'s runs: handed to the helper thread (None: its outcome comes with :meth:`wait`), or
        written now (this rank's failure, or None)."""
        if not runs:
            return None
        if self._pool is not None:
            self._pending[k] = self._pool.submit(self._write, runs)
            return None
        try:
            self._write(runs)
        except BaseException as exc:  # agreed on by the caller
            return exc
        return None

    def wait(self, k: int) -> BaseException | None:
        """Round ``k``'s write is finished (nothing to wait for if it was not handed to the thread): its failure,
        or None."""
        future = self._pending.pop(k, None)
        if future is None:
            return None
        t = time.perf_counter()
        try:
            future.result()
            return None
        except BaseException as exc:  # the helper thread's failure, agreed on by the caller
            return exc
        finally:
            self._seconds["write_wait"] += time.perf_counter() - t

    def finish(self) -> BaseException | None:
        """Every round handed over is written: the first failure, or None."""
        error = None
        for k in sorted(self._pending):
            failed = self.wait(k)
            error = error or failed
        return error

    def close(self) -> None:
        """Wait for a write still running (it reads buffers and arrays the engine owns) and end the thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
            self._pending.clear()
