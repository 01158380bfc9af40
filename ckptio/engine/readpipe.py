"""The restart's read pipeline on an aggregator: round k+1 is read in a helper thread while the calling thread
verifies round k's checksums and exchanges it over MPI (so even a lone reader hashes one round while the next
is read).

Two buffer slots alternate: round k lands in slot ``k % 2``; round k+1 is started only when :meth:`get` hands
round k over, i.e. after the exchange of round k-1 (the previous user of round k+1's slot) finished. The
helper thread never calls MPI, so any MPI thread level above ``MPI_THREAD_SINGLE`` suffices (the calling
thread keeps making every MPI call); under ``MPI_THREAD_SINGLE``, with an extent reader that is collective
(``CKPTIO_READ_IO=mpiio``), or with ``CKPTIO_READ_THREAD=0``, rounds are read in the calling thread, one after
the other, with the same results. Local: used by one aggregator, between the caller's collectives.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ckptio import settings

THREAD_ENV = "CKPTIO_READ_THREAD"  # "0": read in the calling thread (no overlap)


def threads_allowed() -> bool:
    """Whether a helper thread may run beside MPI here: the MPI thread level is above MPI_THREAD_SINGLE (an
    MPI library may assume a single-threaded process there) and CKPTIO_READ_THREAD is not 0."""
    if settings.get(THREAD_ENV) == "0":  # checked, and agreed between ranks, when the reader was opened
        return False
    from ckptio.coord.mpi import MPI

    return MPI.Query_thread() > MPI.THREAD_SINGLE


def helper_thread_allowed() -> bool:
    """:func:`threads_allowed` without initialising MPI: in a process where MPI is not (or no longer) initialised
    (``ckptio inspect``, a serial tool, an array freed after ``MPI_Finalize``) only ``CKPTIO_READ_THREAD`` decides;
    nothing else is there for a helper thread to disturb. Local."""
    import sys

    if settings.get(THREAD_ENV) == "0":
        return False
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return True
    return mpi.Query_thread() > mpi.THREAD_SINGLE


class RoundLoader:
    """Rounds ``0..nrounds-1`` of ``load(k, slot) -> arrays``, read ahead by one round in a helper thread when
    ``independent`` (the loader makes no MPI calls) and threads are allowed.

    ``seconds["wait"]`` accumulates the time :meth:`get` blocks on the helper thread (0 without one: the read
    itself is then counted by ``load`` as I/O on the critical path)."""

    def __init__(self, load: Callable[[int, int], dict[int, Any]], nrounds: int, independent: bool,
                 seconds: dict[str, float]):
        self._load = load
        self._nrounds = nrounds
        self._seconds = seconds
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ckptio-read") if (
            independent and nrounds > 1 and threads_allowed()) else None
        self._pending: dict[int, Future] = {}
        if self._pool is not None:
            self._start(0)

    @property
    def threaded(self) -> bool:
        return self._pool is not None

    def _start(self, k: int) -> None:
        if k < self._nrounds:
            self._pending[k] = self._pool.submit(self._load, k, k % 2)

    def get(self, k: int) -> tuple[dict[int, Any], BaseException | None]:
        """Round ``k``'s arrays and this rank's failure reading or verifying them (None); rounds in order.
        Starts reading round k+1 unless round k failed (every rank stops after the round's agreement)."""
        if self._pool is None:
            try:
                return self._load(k, k % 2), None
            except BaseException as exc:  # agreed on by the caller after the exchange
                return {}, exc
        t = time.perf_counter()
        future = self._pending.pop(k)
        try:
            arrays, error = future.result(), None
        except BaseException as exc:  # the helper thread's failure, agreed on by the caller
            arrays, error = {}, exc
        self._seconds["wait"] += time.perf_counter() - t
        if error is None:
            self._start(k + 1)
        return arrays, error

    def close(self) -> None:
        """Wait for a read still running (it writes into a buffer this Reader owns) and end the thread."""
        if self._pool is not None:
            for future in self._pending.values():
                future.cancel()
            self._pool.shutdown(wait=True)
            self._pool = None
            self._pending.clear()
