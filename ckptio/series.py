"""A series of checkpoints in one directory, named by step, with retention and fallback on restart.

::

    series = ckptio.Series("run", comm, prefix="chk", keep=3, suffix="")
    start = series.latest()           # newest valid checkpoint of the series' timeline, or None
    with series.create(step, attrs={"step": step}) as ck:      # run/chk_000100
        ck.write(...)
    series.wait()                     # background (mode="async") checkpoints: raise any failure

Retention semantics (what a user can rely on):

* **Ownership by exact name.** The series' checkpoints are exactly ``{prefix}_{step:0{digits}d}{suffix}``
  (:class:`ckptio.catalog.NamePattern`). No other file is opened, chosen or deleted: not ``chk_notes.txt``,
  ``chk_000001.bak``, another series' ``chk_fine_000300``, Open MPI's ``NAME-<n>-<pid>.lock``/``.locktest.*``.
  Only checkpoints whose metadata can be read are ever deleted; a damaged file stays for the user to look at.
* **Timeline.** Each checkpoint records its commit sequence number (attribute ``ckptio_series_seq``, see
  :mod:`ckptio.catalog`). After a restart from an older step (the newest is corrupt, or the user reruns from step
  20 while 30 exists), the abandoned newer checkpoints are *superseded* as soon as the first new one commits:
  ``latest()`` never chooses them again, and retention deletes them first.
* **keep=K, applied as each checkpoint commits** (synchronous: at the end of ``close()``; ``mode="async"``: in the
  I/O thread right after the background commit, on the duplicated communicator, in the same FIFO order on every
  rank): the newest K checkpoints of the timeline stay, then superseded ones if K allows; every other checkpoint
  of the series is deleted. Never deleted: the checkpoint just committed (the newest verified one) and the
  checkpoint this run restarted from (the one ``latest()`` returned, or else the newest of the timeline below
  the first step this Series object writes), for the lifetime of the Series object (so ``keep=1`` after a
  restart holds 2 checkpoints). Nothing is deleted before a newer checkpoint committed.
* **Leftover temporaries** ``.{name}.ckptio-tmp-{12 hex}`` of killed writes of this series are deleted by
  retention once they are older (mtime) than the newest committed checkpoint: no writer of the series can still
  be using them (ckptio writes one checkpoint of a series at a time, and the I/O thread runs retention only
  between two of its jobs).

Every method documents its ranks; collective ones go through :mod:`ckptio.coord`, so an error on rank 0 (a
missing directory, a permission problem) is raised on every rank. With ``stage_dir``, checkpoints are written to
the fast tier (shared or node-local) first and drained to ``directory`` in the background; the stage's copies
are retained by :mod:`ckptio.staging` as each drain commits, and ``latest()`` first drains a staged checkpoint
whose drain was interrupted, on the same nodes (see :func:`ckptio.staging.recover`).
"""

from __future__ import annotations

import operator
import os
import threading
from collections.abc import Mapping
from typing import Any

from . import async_io, catalog, coord, staging
from .errors import CheckpointIOError, DeclarationError
from .writer import Writer


class Series:
    """Checkpoints ``{directory}/{prefix}_{step:0{digits}d}{suffix}``. Construct on every rank of ``comm``
    (collective: rank 0 creates ``directory`` unless ``must_exist``; its failure is raised on every rank).

    ``must_exist=True`` is for restart jobs: a directory that does not exist (a misspelt restart directory) is
    then a :class:`~ckptio.CheckpointIOError` on every rank instead of a new, empty series whose ``latest()`` is
    None, which would start the simulation from step 0. ``created`` says whether this object made the
    directory."""

    def __init__(self, directory: str | os.PathLike, comm, prefix: str = "chk", keep: int = 3,
                 backend: str = "mpiio", digits: int = 6, verify_on_restart: bool = True,
                 stage_dir: str | os.PathLike | None = None, suffix: str = "", must_exist: bool = False,
                 **create_options: Any):
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep={keep!r}: must be an int of at least 1")
        if not prefix:
            raise ValueError("prefix must not be empty: a series owns exactly the names {prefix}_{step}{suffix}")
        self.directory = os.fspath(directory)
        self.comm = comm
        self.prefix, self.keep, self.backend, self.digits, self.suffix = prefix, keep, backend, digits, suffix
        self.pattern = catalog.NamePattern(prefix + "_", suffix, digits)
        self.verify_on_restart = verify_on_restart
        self.stage_dir = os.fspath(stage_dir) if stage_dir is not None else None
        self.create_options = create_options
        self._previous: Writer | None = None
        self._background: list[async_io.AsyncCheckpoint] = []  # not yet waited for by Series.wait()
        self._restart_from: str | None = None  # protected from retention while this object lives
        self._next_seq: int | None = None
        self._lock = threading.Lock()  # rank 0: the main thread and the I/O thread's retention share the directory

        # what decides which files the series owns and deletes must be the same on every rank (rank 0 acts on it)
        settings = {"directory": os.path.abspath(self.directory), "prefix": prefix, "suffix": suffix,
                    "digits": digits, "keep": keep, "backend": backend,
                    "stage_dir": os.path.abspath(self.stage_dir) if self.stage_dir else None}

        def check_and_make(gathered: list[dict[str, Any]]) -> None:
            for key in settings:
                differ = [r for r, g in enumerate(gathered) if g[key] != gathered[0][key]]
                if differ:
                    raise DeclarationError(f"Series: {key} differs between ranks (rank 0: {gathered[0][key]!r}, "
                                           f"rank {differ[0]}: {gathered[differ[0]][key]!r}); construct the Series "
                                           "with the same arguments on every rank")
            if os.path.isdir(self.directory):
                return False
            if must_exist:
                why = "is not a directory" if os.path.exists(self.directory) else "does not exist"
                raise CheckpointIOError(f"series {self.directory}: the directory {why} (must_exist=True: a restart "
                                        "job does not start a new series; check the path)")
            os.makedirs(self.directory, exist_ok=True)
            return True

        if not isinstance(must_exist, bool):
            raise ValueError(f"must_exist={must_exist!r}: must be True or False")
        settings["must_exist"] = must_exist
        self.created: bool = coord.gather_and_plan(comm, f"series {self.directory}: arguments and directory",
                                                   lambda: settings, check_and_make)

    def path(self, step: int) -> str:
        return os.path.join(self.directory, self.pattern.name(step))

    # ------------------------------------------------------------------------------------------ writing
    def create(self, step: int, attrs: Mapping[str, Any] | None = None, **options: Any) -> Writer:
        """Start the checkpoint of ``step`` (collective at close, like :func:`ckptio.create`).

        Collective the first time (rank 0 reads the series' sequence numbers, every rank gets them). Retention
        runs when the checkpoint commits (see the module docstring)."""
        given = step
        try:
            if isinstance(step, bool):
                raise TypeError
            step = operator.index(step)  # numpy integers too
        except TypeError:
            step = -1
        if step < 0:
            raise DeclarationError(f"series {self.directory}: step={given!r} must be a non-negative integer")
        series = self
        if self._next_seq is None:
            self._start_timeline(step)
        seq = self._next_seq
        self._next_seq += 1  # type: ignore[operator]
        attrs = {**(attrs or {}), catalog.SEQ_ATTR: seq}

        class _SeriesWriter(Writer):
            def close(self) -> None:
                was_closed = self._closed
                try:
                    super().close()
                finally:  # a background checkpoint submitted by a close() that raised an older failure
                    if not was_closed and self.handle is not None:
                        series._background.append(self.handle)
                if not was_closed and self.handle is None:
                    series._retention_after(self.path, series.comm)

            def _on_commit(self, comm) -> None:  # async: run by the I/O thread after the background commit
                series._retention_after(self.path, comm)

        if self._previous is not None and self.create_options.get("mode") != "async":
            self._previous.wait()
        writer = _SeriesWriter(self.path(step), self.comm, backend=self.backend, attrs=attrs,
                               stage_dir=self.stage_dir, **{**self.create_options, **options})
        self._previous = writer
        return writer

    def _start_timeline(self, step: int) -> None:
        """Collective: the first sequence number of this run, and the checkpoint it restarted from."""

        def look() -> tuple[int, str | None]:
            with self._lock:
                entries = catalog.scan(self.directory, self.pattern)
            below = [e for e in catalog.timeline(entries) if e.step < step]
            return catalog.max_seq(entries) + 1, (below[0].path if below else None)

        first, parent = coord.bcast_from_root(self.comm, f"series {self.directory}: read the timeline", look)
        self._next_seq = first
        if self._restart_from is None:
            self._restart_from = parent

    def _retention_after(self, committed: str, comm) -> None:
        """Collective over ``comm``: retention right after ``committed`` was committed."""
        self._prune(comm, f"series {self.directory}: retention after {os.path.basename(committed)} committed")

    # ------------------------------------------------------------------------------------------ retention
    def prune(self) -> list[str]:
        """Collective: apply retention now (rank 0 deletes, every rank gets the removed paths or the error)."""
        return self._prune(self.comm, f"series {self.directory}: retention")

    def _prune(self, comm, phase: str) -> list[str]:
        return coord.bcast_from_root(comm, phase, self._prune_local)

    def _prune_local(self) -> list[str]:
        """Rank 0: delete what retention does not keep; returns the removed paths."""
        with self._lock:
            entries = catalog.scan(self.directory, self.pattern)
            protected = {self._restart_from} if self._restart_from else set()
            doomed, newest = plan_retention(entries, self.keep, protected)
            removed = []
            for e in doomed:
                _unlink(e.path)
                removed.append(e.path)
            if newest is not None:
                removed += _remove_stale_temporaries(self.directory, self.pattern, newest.mtime_ns)
        return removed

    # ------------------------------------------------------------------------------------------ restart
    def latest(self) -> str | None:
        """Collective: the newest valid checkpoint of the timeline (after draining an interrupted staged one, see
        :func:`ckptio.staging.recover`), falling back with a warning; None if there is none. Raises on every rank
        if ``directory`` is missing. Called before this object wrote a checkpoint, its answer is the checkpoint
        this run restarts from: retention never deletes it while this object lives."""

        if self.stage_dir:  # a staged checkpoint whose drain was interrupted: drain it now, on the same nodes
            staging.recover(self.comm, self.directory, self.pattern, self.stage_dir)

        def look() -> str | None:
            with self._lock:
                return catalog.find_latest(self.directory, self.pattern, verify=self.verify_on_restart)

        found = coord.bcast_from_root(self.comm, f"series {self.directory}: latest checkpoint", look)
        if found is not None and self._next_seq is None:  # before this object wrote anything: the restart point
            self._restart_from = os.path.join(self.directory, os.path.basename(found))
        return found

    def wait(self) -> None:
        """Collective: wait for every background checkpoint of this series, raise if ANY of them failed since the
        last report (the same error on every rank: background failures are agreed collectively), then apply
        retention."""
        pending, self._background = self._background, []
        for handle in pending:
            handle.done_event().wait()
        async_io.raise_failures(pending, "Series.wait()")
        self.prune()

    def should_exit(self, margin: float | None = None) -> bool:
        """Collective: True on every rank when the batch job should write its final checkpoint and leave (a
        warning signal on any rank, or less wall time left than this series' last checkpoint took plus
        ``margin``); see :func:`ckptio.batch.should_exit`. One small allreduce per call."""
        from . import batch

        return batch.should_exit(self.comm, last_checkpoint=self._previous, margin=margin)


def plan_retention(entries: list[catalog.Entry], keep: int,
                   protected: set[str]) -> tuple[list[catalog.Entry], catalog.Entry | None]:
    """Which checkpoints retention deletes, and the newest checkpoint of the timeline (None if it is empty).

    Order of preference: the timeline newest first, then superseded checkpoints newest first; the first ``keep``
    and every ``protected`` path stay. Unreadable files are never deleted."""
    gone = catalog.superseded(entries)
    line = catalog.timeline(entries)
    abandoned = sorted((e for e in entries if e.path in gone), key=lambda e: (e.seq, e.step), reverse=True)
    order = line + abandoned
    stay = {e.path for e in order[:keep]} | protected
    newest = line[0] if line else None
    return [e for e in order if e.path not in stay], newest


def _remove_stale_temporaries(directory: str, pattern: catalog.NamePattern, newest_mtime_ns: int) -> list[str]:
    """Rank 0: ckptio temporaries of this series last modified before the newest committed checkpoint."""
    removed = []
    for name in catalog.list_directory(directory):
        if pattern.temp_of(name) is None:
            continue
        path = os.path.join(directory, name)
        try:
            if os.stat(path).st_mtime_ns < newest_mtime_ns:
                _unlink(path)
                removed.append(path)
        except FileNotFoundError:
            pass
    return removed


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
