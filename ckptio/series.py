"""A series of checkpoints in one directory, named by step, with retention and fallback on restart.

::

    series = ckptio.Series("run", comm, prefix="chk", keep=3, suffix="")
    start = series.latest()           # newest valid checkpoint of the series' timeline, or None
    with series.create(step, attrs={"step": step}) as ck:      # run/chk_000100
        ck.write(...)
    series.wait()                     # background (mode="async") checkpoints: raise any failure

Retention semantics (what a user can rely on):

* **Ownership by exact name.** The series' checkpoints are exactly ``{prefix}_{step:0{digits}d}{suffix}``
  (:class:`ckptio.tiers.catalog.NamePattern`). No other file is opened, chosen or deleted: not ``chk_notes.txt``,
  ``chk_000001.bak``, another series' ``chk_fine_000300``, Open MPI's ``NAME-<n>-<pid>.lock``/``.locktest.*``.
  Only checkpoints whose metadata can be read are ever deleted; a damaged file stays for the user to look at, and
  so does a checkpoint whose *data* a lookup found damaged (it is marked, :mod:`ckptio.engine.damage_marks`: never
  chosen, never deleted, takes none of the ``keep`` places, and moved aside to ``{name}.damaged`` when a new
  checkpoint is committed under its name).
* **Identity and timeline.** Each checkpoint records its series identity (document key ``series``, see
  :mod:`ckptio.model.series_record` and :mod:`ckptio.tiers.catalog`): the series id (a run continues the id of the
  checkpoint it restarted from, else of the newest checkpoint of the directory that has one, else a new one),
  this run's id, a commit sequence number within the series, the restart point, and the checkpoints the run
  abandoned. After a restart from an older step (the newest is corrupt, or the user reruns from step 20 while 30
  exists), every checkpoint at or above the run's first step is *superseded* as soon as the first new one
  commits, whoever wrote it (this series, ``ckptio.create``, C/Fortran, an older ckptio): ``latest()`` never
  chooses it again, and retention deletes it first. A checkpoint copied in from another series is placed by its
  step and never supersedes this series' checkpoints; retention never deletes it unless a run abandoned it.
* **keep=K, applied as each checkpoint commits** (synchronous: at the end of ``close()``; ``mode="async"``: in the
  I/O thread right after the background commit, on the duplicated communicator, in the same FIFO order on every
  rank): the newest K checkpoints of the timeline stay, then superseded ones if K allows; every other checkpoint
  of the series is deleted. Never deleted: the checkpoint just committed, the checkpoint this run restarted
  from (the one ``latest()`` returned, or else the newest of the timeline below the first step this Series
  object writes), for the lifetime of the Series object (so ``keep=1`` after a restart holds 2 checkpoints),
  and a checkpoint of another series that no run of this one abandoned. Nothing is deleted before a newer
  checkpoint committed. ``create(step)`` of the step this run restarted from is refused (it would replace the
  restart source).
* **Leftover temporaries** ``.{name}.ckptio-tmp-{12 hex}`` of killed writes of this series are deleted by
  retention once they are older (mtime) than the newest committed checkpoint: no writer of the series can still
  be using them (ckptio writes one checkpoint of a series at a time, and the I/O thread runs retention only
  between two of its jobs).

Every method documents its ranks; collective ones go through :mod:`ckptio.coord`, so an error on rank 0 (a
missing directory, a permission problem) is raised on every rank. With ``stage_dir``, checkpoints are written to
the fast tier (shared or node-local) first and drained to ``directory`` in the background; the stage's copies
are retained by :mod:`ckptio.tiers.staging` as each drain commits, and ``latest()`` first drains a staged checkpoint
whose drain was interrupted, on the same nodes (see :func:`ckptio.tiers.staging.recover`).
"""

from __future__ import annotations

import dataclasses
import operator
import os
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from ckptio import _warn, coord
from ckptio.engine import damage_marks
from ckptio.errors import CheckpointIOError, CorruptCheckpointError, DeclarationError
from ckptio.model.agreement import first_difference
from ckptio.model.series_record import SeriesRecord
from ckptio.tiers import async_io, batch, catalog, lease, staging
from ckptio.tiers import redundancy as redundancy_mod
from ckptio.writer import Writer, check_write_options, restaging_writer


class Series:
    """Checkpoints ``{directory}/{prefix}_{step:0{digits}d}{suffix}``. Construct on every rank of ``comm``
    (collective: every argument is checked, and compared between ranks, inside its first agreed phase, so a bad
    value on any rank is the same error on every rank; then rank 0 creates ``directory`` unless ``must_exist``;
    its failure is raised on every rank).

    ``backend``, ``mode``, ``hints``, ``compression`` and ``stage_dir`` are those of :func:`ckptio.create` and
    apply to every checkpoint of the series; they are checked here (an unknown backend, a backend this process
    cannot write, a misspelt mode, compression with a backend that has none), not one checkpoint interval later.

    Multi-level checkpoints (with ``stage_dir``, :mod:`ckptio.tiers.redundancy`): ``redundancy="single"``,
    ``"partner"`` or ``"xor"`` protects each staged checkpoint across nodes; ``drain_every=k`` drains only every
    k-th checkpoint this object creates (and one created with ``create(step, drain=True)``) to ``directory``;
    ``failure_group`` (this rank's node's group, e.g. its rack; the same on every rank of a node) keeps partners
    and XOR sets apart. ``latest()`` rebuilds a staged checkpoint a lost node took with it when it can.

    ``must_exist=True`` is for restart jobs: a directory that does not exist (a misspelt restart directory) is
    then a :class:`~ckptio.CheckpointIOError` on every rank instead of a new, empty series whose ``latest()`` is
    None, which would start the simulation from step 0. ``created`` says whether this object made the
    directory."""

    def __init__(self, directory: str | os.PathLike, comm, prefix: str = "chk", keep: int = 3,
                 backend: str = "mpiio", digits: int = 6, verify_on_restart: bool = True,
                 stage_dir: str | os.PathLike | None = None, suffix: str = "", must_exist: bool = False,
                 mode: str = "sync", hints: Mapping[str, Any] | None = None, compression: object = None,
                 redundancy: str | None = None, drain_every: int = 1, failure_group: str | int | None = None):
        self.directory = os.fspath(directory)
        self.comm = comm
        self.prefix, self.keep, self.backend, self.digits, self.suffix = prefix, keep, backend, digits, suffix
        self.verify_on_restart = verify_on_restart
        self.must_exist = must_exist
        self.stage_dir = os.fspath(stage_dir) if stage_dir is not None else None
        self.create_options: dict[str, Any] = {"mode": mode, "hints": hints, "compression": compression}
        self.redundancy, self.drain_every = redundancy, drain_every
        self._group = None if failure_group is None else str(failure_group)
        self._staged = 0  # checkpoints created so far (drain_every counts them)
        self._previous: Writer | None = None
        self._highest_step: int | None = None  # the highest step this object created (a step again: a warning)
        self._background: list[async_io.AsyncCheckpoint] = []  # not yet waited for by Series.wait()
        self._restart_from: str | None = None  # protected from retention while this object lives
        self.skipped: tuple[str, ...] = ()  # what the last latest() skipped as unreadable or damaged
        self._record: SeriesRecord | None = None  # the next checkpoint's series identity, once the run started
        self._lease: lease.Lease | None = None  # rank 0: this run's lease on the series (ckptio.tiers.lease)
        self._last_commit: float | None = None  # rank 0: when this run's last checkpoint committed (monotonic)
        self._lock = threading.Lock()  # rank 0: the main thread and the I/O thread's retention share the directory

        def checked_settings() -> dict[str, Any]:
            """Local: every argument checked by itself; what must be the same on every rank."""
            if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
                raise DeclarationError(f"keep={keep!r}: must be an int of at least 1")
            if not isinstance(prefix, str) or not prefix:
                raise DeclarationError(f"prefix={prefix!r}: must be a non-empty string (a series owns exactly "
                                       "the names {prefix}_{step}{suffix})")
            if not isinstance(must_exist, bool):
                raise DeclarationError(f"must_exist={must_exist!r}: must be True or False")
            if not isinstance(verify_on_restart, bool):
                raise DeclarationError(f"verify_on_restart={verify_on_restart!r}: must be True or False")
            if not isinstance(suffix, str):
                raise DeclarationError(f"suffix={suffix!r}: must be a string")
            try:
                self.pattern = catalog.NamePattern.for_prefix(prefix, suffix, digits)
            except ValueError as exc:
                raise DeclarationError(str(exc)) from None
            redundancy_mod.check_policy(redundancy, drain_every, failure_group, stage_dir)
            chosen = check_write_options(comm.Get_size(), backend, hints, compression, mode)
            chosen.backend.require_writable()
            return {"directory": os.path.abspath(self.directory), "prefix": prefix, "suffix": suffix,
                    "digits": digits, "keep": keep, "backend": backend, "mode": mode,
                    "compression": chosen.compression_text, "must_exist": must_exist,
                    "stage_dir": os.path.abspath(self.stage_dir) if self.stage_dir else None,
                    "redundancy": redundancy, "drain_every": drain_every}  # failure_group may differ by node

        def check_and_make(gathered: list[dict[str, Any]]) -> bool:
            found = first_difference(gathered)
            if found is not None:
                key, rank = found
                raise DeclarationError(f"Series: {key} differs between ranks (rank 0: {gathered[0][key]!r}, rank "
                                       f"{rank}: {gathered[rank][key]!r}); construct the Series with the same "
                                       "arguments on every rank")
            if os.path.isdir(self.directory):
                return False
            if must_exist:
                why = "is not a directory" if os.path.exists(self.directory) else "does not exist"
                raise CheckpointIOError(f"series {self.directory}: the directory {why} (must_exist=True: a restart "
                                        "job does not start a new series; check the path)")
            os.makedirs(self.directory, exist_ok=True)
            return True

        self.created: bool = coord.gather_and_plan(comm, f"series {self.directory}: arguments and directory",
                                                   checked_settings, check_and_make)

    def path(self, step: int) -> str:
        return os.path.join(self.directory, self.pattern.name(step))

    # ------------------------------------------------------------------------------------------ writing
    def create(self, step: int, attrs: Mapping[str, Any] | None = None, **options: Any) -> Writer:
        """Start the checkpoint of ``step`` (collective at close, like :func:`ckptio.create`).

        Collective the first time (rank 0 reads the directory's series identities, every rank gets this run's).
        A ``step`` that is not a non-negative integer, or is the step this run restarted from, is raised by the
        checkpoint's ``close()`` on every rank, in its first phase (a rank that raised here would leave the
        others waiting in ``close()``). Retention runs when the checkpoint commits (see the module docstring)."""
        if self._record is None:  # collective, on every rank whatever its step: one rank's bad step is agreed
            self._start_timeline(step)
        problem = _step_problem(step)
        if problem is None:
            step = operator.index(step)  # numpy integers too
        if problem is None and self.path(step) == self._restart_from:
            problem = (f"step {step} is the checkpoint this run restarted from ({self._restart_from}); writing it "
                       "would replace the restart source before anything newer exists: checkpoint a later step")
        if problem is None:
            self._warn_on_an_old_step(step)
        series = self

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

        if self._previous is not None and self.create_options.get("mode") != "async" and not self.stage_dir:
            # a synchronous series: the previous checkpoint is committed already (this returns at once). Never
            # for async or staged ones: the next checkpoint must not wait for the previous one's background
            # write or drain, nor be lost because that failed (its close() reports the failure once it is
            # submitted itself, as ckptio.tiers.async_io describes)
            self._previous.wait()
        path = self.path(step) if problem is None else os.path.join(self.directory, f"{self.prefix}_<bad step>")
        drain = options.pop("drain", None)  # multi-level: True drains this one whatever drain_every says
        writer = _SeriesWriter(path, self.comm, backend=self.backend, attrs=attrs, stage_dir=self.stage_dir,
                               **{**self.create_options, **options})
        if self.stage_dir:  # the stage's retention keeps to this series' names (other series may share it)
            writer.stage_family = lambda name: self.pattern.step(name) is not None  # type: ignore[attr-defined]
        if self.stage_dir and (self.redundancy is not None or self.drain_every > 1):
            self._staged += 1
            writer.stage_policy = redundancy_mod.StagePolicy(  # type: ignore[attr-defined]
                self.redundancy or "single", bool(drain) or self._staged % self.drain_every == 0, self._group)
        if problem is not None:
            writer._error = writer._error or DeclarationError(f"series {self.directory}: {problem}")
        else:
            writer.series_record = self._record
            writer.before_rename = self._check_lease
            self._record = self._record.next()  # type: ignore[union-attr]
        self._previous = writer
        return writer

    def _warn_on_an_old_step(self, step: int) -> None:
        """Local (rank 0 warns): a step not higher than one this object created before. Its checkpoint replaces
        the one of the same step this run wrote, or is older than the newest one; ``latest()`` then returns
        whichever committed last (and warns that it skips the other as superseded): a run's steps should grow
        (an outside trial created step 2 twice, then step 1, without a word)."""
        highest, self._highest_step = self._highest_step, step if self._highest_step is None else max(
            step, self._highest_step)
        if highest is None or step > highest or self.comm.Get_rank() != 0:
            return
        what = (f"it replaces {self.path(step)}, which this run wrote" if step == highest else
                f"it is older than step {highest}, which this run wrote")
        _warn.warn(f"series {self.directory}: create({step}) after create({highest}): {what}; latest() returns "
                   "the checkpoint committed last. A run's steps should grow")

    def _start_timeline(self, step: object) -> None:
        """Collective: this run's series identity (see :mod:`ckptio.tiers.catalog`), and the checkpoint it restarted
        from (the one ``latest()`` returned, else the newest of the timeline below ``step``). A ``step`` that is
        bad on any rank, or differs between ranks, is the same DeclarationError on every rank."""
        chosen = self._restart_from

        def checked_step() -> int:
            problem = _step_problem(step)
            if problem is not None:
                raise DeclarationError(f"series {self.directory}: {problem}")
            return operator.index(step)  # type: ignore[arg-type]

        def look(steps: list[int]) -> tuple[dict[str, Any], str | None]:
            differ = [r for r, s in enumerate(steps) if s != steps[0]]
            if differ:
                raise DeclarationError(f"series {self.directory}: create() of step {steps[0]} on rank 0 but of "
                                       f"step {steps[differ[0]]} on rank {differ[0]}; every rank must create the "
                                       "same step")
            run_id = uuid.uuid4().hex
            with self._lock:
                self._lease = lease.Lease.mine(run_id)  # one writer per series (ckptio.tiers.lease); rank 0 holds it
                lease.acquire(self._lease_path(), self._lease)
                entries = catalog.scan(self.directory, self.pattern)
            record, parent = start_record(entries, steps[0], chosen, run_id)
            return record.to_json(), parent

        record, parent = coord.gather_and_plan(self.comm, f"series {self.directory}: take the lease, read the timeline",
                                               checked_step, look)
        self._record = SeriesRecord.from_json(record)
        if self._restart_from is None:
            self._restart_from = parent

    def _lease_path(self) -> str:
        return lease.lease_path(self.directory, self.pattern.stem, self.pattern.suffix)

    def _check_lease(self) -> None:
        """Rank 0, right before one of this series' checkpoints is renamed onto its name (ckptio.tiers.lease)."""
        if self._lease is not None:
            with self._lock:
                lease.check(self._lease_path(), self._lease)

    def _retention_after(self, committed: str, comm) -> None:
        """Collective over ``comm``: retention right after ``committed`` was committed (which it never deletes)."""
        self._prune(comm, f"series {self.directory}: retention after {os.path.basename(committed)} committed",
                    committed)

    # ------------------------------------------------------------------------------------------ retention
    def prune(self) -> list[str]:
        """Collective: apply retention now (rank 0 deletes, every rank gets the removed paths or the error)."""
        return self._prune(self.comm, f"series {self.directory}: retention")

    def _prune(self, comm, phase: str, committed: str | None = None) -> list[str]:
        return coord.bcast_from_root(comm, phase, lambda: self._prune_local(committed))

    def _prune_local(self, committed: str | None) -> list[str]:
        """Rank 0: delete what retention does not keep; returns the removed paths. Before this run's first
        checkpoint (``prune()`` alone, as the C/Fortran retention after ``ckptio_create`` calls it), the series is
        the one a first checkpoint would continue (:func:`continued_series`)."""
        with self._lock:
            if committed is not None and self._lease is not None:  # the lease's heartbeat and commit interval
                now = time.monotonic()
                interval = None if self._last_commit is None else now - self._last_commit
                self._last_commit = now
                self._lease = dataclasses.replace(self._lease, interval=interval)
                lease.refresh(self._lease_path(), self._lease)
            entries = catalog.scan(self.directory, self.pattern)
            damage_marks.remove_stale(self.directory, catalog.list_directory(self.directory))
            protected = {p for p in (self._restart_from, committed) if p}
            series_id = self._record.series_id if self._record is not None else \
                continued_series(catalog.timeline(entries), None)
            doomed, newest = plan_retention(entries, self.keep, protected, series_id)
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
        :func:`ckptio.tiers.staging.recover`), falling back with a warning; None if there is none. Raises on every rank
        if ``directory`` is missing. Called before this object wrote a checkpoint, its answer is the checkpoint
        this run restarts from: retention never deletes it while this object lives.

        ``skipped``: the newer checkpoints it passed over as unreadable or damaged (kept, see above). When none
        is valid but some were skipped, a ``must_exist=True`` Series (a restart job) raises
        :class:`~ckptio.CorruptCheckpointError` on every rank naming them instead of returning None."""
        found = self.latest_and_skipped()
        if found is None and self.skipped and self.must_exist:
            raise _nothing_valid(self.directory, self.skipped)
        return found

    def latest_and_skipped(self) -> str | None:
        """Collective: :meth:`latest` without the ``must_exist`` error (None and ``skipped`` set when every
        checkpoint is damaged): for a caller that reports the skipped checkpoints itself (the C/Fortran API)."""
        if self.stage_dir:  # a staged checkpoint whose drain was interrupted: drain it now, on the same nodes
            staging.recover(self.comm, self.directory, self.pattern, self.stage_dir, restaging_writer)

        def look() -> tuple[str | None, list[str]]:
            with self._lock:
                if self.must_exist and not catalog.scan(self.directory, self.pattern, read=False):
                    misses = catalog.near_misses(self.directory, self.pattern)
                    if misses:  # a restart job whose pattern is misspelt: an error, not a silent cold start
                        raise CheckpointIOError(catalog.near_miss_message(self.directory, self.pattern, misses))
                skipped: list[str] = []  # (filled by find_latest)
                return catalog.find_latest(self.directory, self.pattern, self.verify_on_restart, skipped), skipped

        found, skipped = coord.bcast_from_root(self.comm, f"series {self.directory}: latest checkpoint", look)
        self.skipped = tuple(skipped)
        if found is not None and self._record is None:  # before this object wrote anything: the restart point
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
        ``margin``); see :func:`ckptio.tiers.batch.should_exit`. One small allreduce per call."""
        return batch.should_exit(self.comm, last_checkpoint=self._previous, margin=margin)


def _nothing_valid(directory: str, skipped: tuple[str, ...]) -> CorruptCheckpointError:
    """The error of a restart job's ``latest()`` when every checkpoint of its series was ``skipped``."""
    names = ", ".join(os.path.basename(p) for p in skipped[:5]) + (", ..." if len(skipped) > 5 else "")
    return CorruptCheckpointError(
        f"series {directory}: no valid checkpoint to restart from: {len(skipped)} checkpoint(s) of the series are "
        f"damaged or unreadable ({names}; the warnings above say why). They are kept. To start over anyway, "
        "construct the Series with must_exist=False (its latest() then returns None)")


def start_record(entries: list[catalog.Entry], step: int, chosen: str | None,
                 run_id: str) -> tuple[SeriesRecord, str | None]:
    """The series identity of a run whose first checkpoint is ``step`` (pure: ``entries`` is the directory as
    rank 0 scanned it), and the path of the checkpoint it restarts from.

    The restart point is ``chosen`` (what ``latest()`` returned) or else the newest checkpoint of the timeline below
    ``step``. The run continues the series of its restart point, else of the newest timeline checkpoint that has a
    series identity (a cold start over an existing series, or a Series after C/Fortran checkpoints of it), else
    starts a new one. It abandons every committed checkpoint at or above ``step`` that the ``seq`` rule cannot
    order (no series identity, an older ckptio's counter, another series)."""
    line = catalog.timeline(entries)
    by_path = {e.path: e for e in entries}
    parent = by_path.get(chosen) if chosen else next((e for e in line if e.step < step), None)
    series_id = continued_series(line, parent) or uuid.uuid4().hex
    abandons = tuple(e.identity() for e in entries
                     if e.committed and e.series_id != series_id and e.step >= step)
    record = SeriesRecord(series_id, run_id, catalog.max_seq(entries, series_id) + 1,  # type: ignore[arg-type]
                          parent.name if parent is not None else None, abandons)
    return record, (parent.path if parent is not None else chosen)


def continued_series(line: list[catalog.Entry], parent: catalog.Entry | None) -> str | None:
    """The series id a run continues: its restart point's, else that of the newest checkpoint of the timeline
    ``line`` that has one; None when no checkpoint has a series identity (a new series starts)."""
    if parent is not None and parent.record is not None:
        return parent.series_id
    return next((e.series_id for e in line if e.record is not None), None)


def plan_retention(entries: list[catalog.Entry], keep: int, protected: set[str],
                   series_id: str | None = None) -> tuple[list[catalog.Entry], catalog.Entry | None]:
    """Which checkpoints retention deletes, and the newest checkpoint of the timeline (None if it is empty).

    Order of preference: the timeline newest first, then superseded checkpoints newest first; the first ``keep``
    and every ``protected`` path stay. Deletable are the checkpoints of series ``series_id``, those without a
    series identity or with an older ckptio's counter, and superseded ones; never a checkpoint of another series
    that no run abandoned (a copy from elsewhere), never an unreadable file (not in the timeline), never one
    marked damaged (which takes no ``keep`` place either)."""
    gone = catalog.superseded(entries)
    line = catalog.timeline(entries)
    abandoned = sorted((e for e in entries if e.path in gone), key=lambda e: e.step, reverse=True)
    order = [e for e in line + abandoned if e.damage is None]
    stay = {e.path for e in order[:keep]} | protected
    ours = {None, catalog.LEGACY_SERIES, series_id}
    newest = line[0] if line else None
    return [e for e in order if e.path not in stay and (e.series_id in ours or e.path in gone)], newest


def _step_problem(step: object) -> str | None:
    """Why ``step`` cannot name a checkpoint (None when it can). Local."""
    if not isinstance(step, bool):
        try:
            if operator.index(step) >= 0:  # type: ignore[arg-type]
                return None
        except TypeError:
            pass
    return f"step={step!r} must be a non-negative integer"


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
