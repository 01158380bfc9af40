"""The checkpoint reader: the public restart API over the engine's two-phase restart.

:class:`Reader` is the facade: it takes the user's calls (``read``, ``read_many``, ``close``, the ``with`` block,
lazy ``ck["name"]`` views), checks each call's requests (:mod:`ckptio.model.requests`, inside an agreed phase so
a bad request on one rank is the same error on every rank) and holds back signals for the duration of each
collective call (``coord.collective_section``). The restart itself (rank 0's open plan, routing, the aggregators'
rounds, verification, the exchange) is :class:`ckptio.engine.restart.Restart`; every collective goes through
:mod:`ckptio.coord`. All public methods that read are collective over the communicator.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ckptio import coord
from ckptio.engine.restart import ReadStats, Restart
from ckptio.engine.restart_plan import resolve_options
from ckptio.errors import ClosedCheckpointError
from ckptio.model.document import CheckpointDocument
from ckptio.model.layout import Box
from ckptio.model.plan import Request, segment_box
from ckptio.model.requests import VariableInfo, checked_requests

__all__ = ["ReadStats", "Reader", "VariableInfo"]  # VariableInfo and ReadStats: the types a Reader hands out


class Reader:
    """An open checkpoint. Create with :func:`ckptio.open` on every rank of ``comm`` (collective)."""

    def __init__(self, path: str | os.PathLike, comm, hints: Mapping[str, Any] | None = None,
                 aggregators: int | None = None, buffer_bytes: int | str | None = None, verify: bool = True):
        self.path = os.fspath(path)
        self.comm = comm
        self._closed = True  # until opened: a failed open leaves nothing to close
        self._restart: Restart | None = None
        size = comm.Get_size()
        try:
            with coord.collective_section():
                self._restart = Restart(self.path, comm,
                                        lambda: resolve_options(size, hints, aggregators, buffer_bytes), verify)
        except BaseException as exc:
            if self._restart is None:  # the open failed, agreed on every rank: nothing to close
                raise
            # The open succeeded on every rank, and a signal held during it was delivered after its last
            # collective, on this rank alone (outside trial, 2026-12-06: the others went on into their first read
            # and waited for this rank forever). This rank leaves as one leaving the ``with`` block does: it
            # meets the others in their first read or their close, which raise, naming it.
            self._opened()
            coord.close_on_exit(self._close, exc)
            raise
        self._opened()

    def _opened(self) -> None:
        """Local: what the restart found at open, as the Reader's public attributes; the Reader is open."""
        r = self._restart
        self.meta: CheckpointDocument = r.meta
        self.backend = r.backend
        self.hints: dict[str, Any] = r.hints
        self.buffer_bytes: int = r.buffer_bytes
        self.stripe_unit: int = r.stripe_unit
        self.aggregators: list[int] = r.aggregators
        self.stats: ReadStats = r.stats
        self._attrs: dict[str, Any] = dict(self.meta.attrs)
        self._variables: Mapping[str, VariableInfo] = r.variables
        self._last_failed = False
        self._left_by: str | None = None  # other ranks closed it while this one read (see read_many)
        self._closed = False

    @property
    def verify(self) -> bool:
        """Local: whether reads verify the checksums (``verify=`` of :func:`ckptio.open`, agreed by every rank at
        open; False for a plain file). Read-only."""
        return self._restart.verify

    # ---------------------------------------------------------------------------------------------- API
    @property
    def checksummed(self) -> bool:
        """Local: whether the file carries checksums that reads verify (False for a plain HDF5 or netCDF file
        ckptio did not write, see :mod:`ckptio.model.plain`)."""
        return self.meta.checksummed

    @property
    def attrs(self) -> dict[str, Any]:
        """Local: the checkpoint's attributes."""
        self._check_open("attrs")
        return self._attrs

    @property
    def variables(self) -> Mapping[str, VariableInfo]:
        """Local: what the checkpoint holds, by variable name."""
        self._check_open("variables")
        return self._variables

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise ClosedCheckpointError(f"checkpoint {self.path}: {what} used after Reader.close()")

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        coord.close_on_exit(self._close, exc)  # collective: an exception here may be this rank's alone
        return False

    def read(self, name: str, offset: Sequence[int] | None = None, shape: Sequence[int] | None = None,
             out: np.ndarray | None = None) -> np.ndarray:
        """Collective: this rank's hyperslab of variable ``name`` (every rank may ask for a different one,
        or an empty one). With no offset/shape: the whole array; for a per-rank segment variable read by
        the same number of ranks that wrote it, this rank's own segment (by another count: the segments of
        writer ranks ``[r*W//P, (r+1)*W//P)``, concatenated).

        ``out``: an array to fill instead of a new one (returned), of the request's shape (``shape`` defaults to
        ``out.shape``) and the variable's dtype, writable; it may be a strided view (the interior of a halo'd
        array): the data lands in it without an intermediate copy. A wrong ``out`` on any rank is a
        ReadRequestError on every rank, before anything is read."""
        return self.read_many([(name, offset, shape)], out=None if out is None else [out])[0]

    def read_many(self, requests: Sequence[tuple[str, Sequence[int] | None, Sequence[int] | None]],
                  out: Sequence[np.ndarray | None] | None = None, *,
                  error: BaseException | None = None) -> list[np.ndarray]:
        """Collective: several hyperslabs in one two-phase exchange (the count may differ between ranks).
        ``out``: one array (or None: allocate) per request, as for :meth:`read`'s ``out``. ``error``: a problem
        this rank found with its own arguments before the call (the C/Fortran bindings': a NULL buffer, a dtype
        that does not match): raised in the read's first agreed phase, so every rank fails alike, naming it, and
        the reader stays usable (its requests are then not looked at)."""
        if self._closed:  # local: after close() this rank's collectives with the others are over
            raise ClosedCheckpointError(f"checkpoint {self.path}: read after Reader.close()")
        coord.raise_if_left(self.path, self._left_by)
        with coord.collective_section():
            self._last_failed = True  # until every rank got through: an agreed failure leaves it set everywhere
            # the restart engine's read, with this call's requests checked as its first agreed phase
            with coord.noting_ranks_that_left(self._note_left):
                outputs = self._restart.read(lambda: self._requests(requests, out, error))
            self._last_failed = False  # before a held signal is delivered (at the end of the section)
            return outputs

    def _note_left(self, ranks: str) -> None:
        """Local: the ranks that closed this reader during a read (see :func:`ckptio.coord.noting_ranks_that_left`)."""
        self._left_by = ranks

    def close(self) -> None:
        """Collective: agree with the other ranks, then close the file on the aggregators and free the
        communicators the restart made."""
        self._close(None)

    def _close(self, error: BaseException | None) -> None:
        """Collective: agree on ``error`` (this rank's exception from the ``with`` block, or None), then release.

        The agreement has the shape of every read's first phase (``coord.agree``), so a rank that leaves the
        ``with`` block with an exception of its own meets the other ranks wherever they are next: in their
        ``close()`` or in their next read, which then raises a CollectiveError naming it. A rank that closes
        without an error while the others read meets them the same way (``closing=True``): every rank raises,
        naming the ranks that closed, and none goes on into a collective they will not enter. It is skipped when
        this Reader's last read failed: that failure was agreed on every rank, which all skip it alike.
        """
        if self._closed:
            return
        self._closed = True
        with coord.collective_section():
            try:
                if not self._last_failed:
                    coord.agree(self.comm, f"close {self.path}", error, closing=True)
            finally:
                self._restart.close()

    # ------------------------------------------------------------------------------------------ helpers
    def _requests(self, requests, out=None, error: BaseException | None = None
                  ) -> tuple[list[Request], list[np.ndarray | None]]:
        """Local part of a read's first phase: this rank's requests and the arrays to fill (None: allocate),
        checked (ReadRequestError otherwise); ``error``: the caller's own finding, raised first."""
        if self._closed:
            raise ClosedCheckpointError(f"checkpoint {self.path}: read after Reader.close()")
        if error is not None:
            raise error
        return checked_requests(self.path, requests, out, self._variables, self._own_segment,
                                self.meta.get("plain_skipped", {}))

    def _own_segment(self, name: str) -> Box:
        """Local: the rows of segment variable ``name`` this rank reads by default."""
        start, length = self._restart.segments[name]
        return segment_box(start, length, self._variables[name].shape[1:])

    # ------------------------------------------------------------------ analysis views (see ckptio.lazy)
    def __getitem__(self, name: str) -> Any:
        """Local: ``ck["dens"]``, a lazy h5py-like view of one variable (indexing it is a collective read)."""
        from ckptio.lazy import LazyVariable

        return LazyVariable(self, name)

    def __repr__(self) -> str:
        from ckptio.lazy import describe_reader

        return describe_reader(self)
