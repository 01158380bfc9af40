"""The checkpoint writer: declare blocks locally, then one collective close() does all I/O and commits.

Phases of :meth:`Writer.close` (every one collective, every failure raised on every rank, see ckptio.coord):

1. *declare*  each rank prepares its blocks (C order, checksum, optional compression) and sends their
   descriptions to rank 0, which validates them all (shapes, dtypes, overlaps, coverage, attrs), picks a
   temporary file name next to the target and lays the blocks out (backend-specific);
2. *create*   the backend creates the temporary file with the MPI hints (striping, collective buffering),
   and rank 0 reserves the space the data needs (``fallocate``), so that a full file system fails here,
   cleanly on every rank, and not inside the collective write;
3. *write*    one collective write of every rank's blocks, then a file sync;
4. *index*    block checksums and statistics are gathered on rank 0, which builds the metadata document;
5. *commit*   the backend reserves the rest of the file, stores the metadata and then the completion mark,
   syncing in between; all ranks agree that it succeeded (the vote);
6. *rename*   rank 0 reads the metadata back from the temporary file (a file system that dropped writes
   silently fails here), renames it to its final name and syncs the directory.

A failure at any phase removes the temporary file and leaves an existing checkpoint of the same name and
every other checkpoint untouched; nothing at the final name ever claims to be complete unless it is.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import itertools
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _faults, _warn, async_io, coord, fslayout, memsel, placement_stats, settings, varmeta
from . import codec as codecs
from . import hints as hintsmod
from . import meta as metamod
from .backends import Backend, get_backend, known_backends
from .backends.rawio import reserve_space
from .block_table import BlockTable
from .errors import (
    CapabilityError,
    CheckpointError,
    CheckpointIOError,
    ClosedCheckpointError,
    CollectiveError,
    DeclarationError,
)
from .model.series_record import SeriesRecord
from .pathcheck import symlink_problem
from .plan import (
    SEGMENT,
    VariablePlan,
    declaration,
    own_plan,
    pack_declarations,
    plan_headers,
    plan_packed,
    segment_starts,
)


@dataclass
class _Pending:
    decl: dict[str, Any]
    data: np.ndarray  # C-contiguous (a reference to the user's array when it already was)
    stored: Any = None  # compressed bytes, or the array itself


@dataclass
class WriteStats:
    """Per-phase seconds (max over ranks) and the bytes handed to the write: in total and the least and most of
    any rank (O(1), whatever the job; where the bytes went per node: ``meta["stats"]["write"]["placement"]``)."""

    seconds: dict[str, float] = field(default_factory=dict)
    bytes_total: int = 0
    bytes_min: int = 0
    bytes_max: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "bytes_total": self.bytes_total, "bytes_min": self.bytes_min,
                "bytes_max": self.bytes_max}


def light_copy(document: Mapping[str, Any]) -> dict[str, Any]:
    """Rank 0: what every other rank receives of the document it committed: no block tables (each variable's
    ``nblocks`` instead) and of the write statistics the seconds and bytes (the per-node placement stays in the
    file): O(variables), whatever the job."""
    light = metamod.without_blocks(document)
    light["stats"] = {"write": {k: v for k, v in document["stats"]["write"].items() if k != "placement"}}
    return light


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Any rank: no cyclic garbage collection inside (restored after). Rank 0 unpickles and builds objects for
    every rank in the declare and index phases: at 30,000 ranks the collector's passes over them made these
    phases grow faster than the job (they hold no reference cycles; reference counting frees them)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def written_columns(written: Sequence[Any]) -> dict[str, list[Any]]:
    """Any rank: what it wrote of its blocks (``WrittenBlock`` s, in its declaration order) as three short lists
    for rank 0's :meth:`Writer._build_meta`: file offsets (-1: none, as in HDF5/netCDF), stored bytes, codecs."""
    return {"file_offset": [-1 if w.file_offset is None else int(w.file_offset) for w in written],
            "stored": [int(w.stored_nbytes) for w in written], "codec": [w.codec for w in written]}


def byte_summary(per_rank: Sequence[int]) -> dict[str, int]:
    """Rank 0: the bytes of every rank as the O(1) summary the metadata and :class:`WriteStats` keep."""
    return {"total": int(sum(per_rank)), "min": int(min(per_rank, default=0)), "max": int(max(per_rank, default=0))}


@dataclass(frozen=True)
class WriteOptions:
    """The checked options of one checkpoint (:func:`check_write_options`)."""

    backend: Backend
    hints: dict[str, str]
    compression: tuple[str, int] | None

    @property
    def compression_text(self) -> str | None:
        return compression_text(self.compression)


def compression_text(compression: tuple[str, int] | None) -> str | None:
    """``("zstd", 3)`` -> ``"zstd:3"`` (what ranks compare, and what the stored codec names say); None -> None."""
    return None if compression is None else ":".join(map(str, compression))


def check_write_options(nprocs: int, backend: str, hints: Mapping[str, Any] | None, compression: object,
                        mode: str) -> WriteOptions:
    """Local: the options of :func:`ckptio.create` (and of every checkpoint of a :class:`ckptio.Series`), each
    checked by itself; raises a CheckpointError subclass naming the bad one."""
    if mode not in ("sync", "async"):
        raise DeclarationError(f"mode={mode!r}: expected 'sync' or 'async'")
    if not isinstance(backend, str):
        raise DeclarationError(f"backend={backend!r}: expected a backend name ({', '.join(known_backends())})")
    chosen = get_backend(backend)
    if hints is not None and not isinstance(hints, Mapping):
        raise DeclarationError(f"hints={hints!r}: expected a mapping of MPI-IO hint names to values")
    try:
        resolved = hintsmod.resolve_hints(nprocs, hints)
        codec = codecs.parse_compression(compression)
    except (TypeError, ValueError) as exc:
        raise DeclarationError(str(exc)) from None
    for key, value in chosen.extra_hints.items():
        resolved.setdefault(key, value)
    if codec is not None and not chosen.capabilities.compression:
        raise CapabilityError(f"backend {chosen.name!r} does not support compression "
                              f"(compression={compression!r}); use backend='mpiio'")
    return WriteOptions(chosen, resolved, codec)


def created_now() -> str:
    """The commit time a document records (UTC, microseconds)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Writer:
    """A checkpoint being declared. Create with :func:`ckptio.create` on every rank of ``comm``.

    :meth:`write` is local (no communication); :meth:`close` is collective.
    """

    def __init__(self, path: str | os.PathLike, comm, backend: str = "mpiio", attrs: Mapping[str, Any] | None = None,
                 hints: Mapping[str, Any] | None = None, compression: object = None, mode: str = "sync",
                 stage_dir: str | os.PathLike | None = None):
        self.mode = mode
        self.stage_dir = os.fspath(stage_dir) if stage_dir is not None else None
        self.handle: async_io.AsyncCheckpoint | None = None
        self._user_hints = hints
        self._compression_spec = compression
        self.path = os.fspath(path)
        self.comm = comm
        self.attrs: dict[str, Any] = {}
        self._pending: list[_Pending] = []
        self._described: dict[str, varmeta.Description] = {}  # dims/attrs per variable this rank declared
        self._error: BaseException | None = None
        self._closed = False
        self.stats = WriteStats()
        self.series_record: SeriesRecord | None = None  # set by ckptio.Series: stored as the document's "series"
        self.before_rename: Callable[[], None] | None = None  # rank 0, just before the rename (Series: its lease)
        # Argument errors are deferred, never raised here: an argument may be bad on one rank only, and a rank that
        # leaves here has no Writer to take part in close(), where the others would wait forever. close() raises
        # the first one on every rank, in its first phase (naming this rank), before anything is written.
        try:
            chosen = check_write_options(comm.Get_size(), backend, hints, compression, mode)
            self.backend, self.hints, self.compression = chosen.backend, chosen.hints, chosen.compression
            self.attrs = self._checked_attrs(attrs)
        except CheckpointError as exc:
            self._error = _naming_rank(exc, comm.Get_rank())
        if self._error is not None and not hasattr(self, "backend"):
            self.backend, self.hints, self.compression = None, {}, None  # type: ignore[assignment]

    # ------------------------------------------------------------------------------------------- local API
    def write(self, name: str, array: np.ndarray, offset: Sequence[int] | None = None,
              global_shape: Sequence[int] | None = None, *, dims: Sequence[str] | None = None,
              attrs: Mapping[str, Any] | None = None) -> None:
        """Declare one block of a global N-d array (``offset`` + ``global_shape``), or, with neither, this
        rank's variable-length segment of ``name``: its rows (the first axis, any length, 0 included) are laid
        end to end in rank order; the other axes must be the same on every rank (tracers of shape ``(n, 4)``
        make a variable of shape ``(sum of n, 4)``). Local: no I/O and no communication happen here.

        ``dims`` names the variable's axes (default ``<name>_d0``, ...; one name is one length in the whole
        checkpoint, so variables sharing a dimension share it in HDF5 and netCDF files), ``attrs`` are its own
        attributes (``units``, ``long_name``, ...: JSON-compatible values). Every block of a variable, on every
        rank, must declare the same ``dims`` and ``attrs`` (or none): a difference within this rank raises
        DeclarationError here, between ranks in :meth:`close`, on every rank.

        The array must stay unchanged until :meth:`close` returns (it is referenced, not copied). It may be a
        strided view, e.g. the interior ``u[g:-g, g:-g]`` of an array with ``g`` guard cells: the backends write
        its elements in C order straight from the larger array, through a memory datatype or dataspace (no
        copy; see :mod:`ckptio.memsel`). Views whose last axis is not contiguous (a Fortran-ordered array,
        ``a[:, ::2]``) are gathered into a C-order copy at :meth:`close`.
        """
        self._check_open("write", name)
        if self.backend is None:
            return  # the arguments of ckptio.create were wrong: close() raises that on every rank
        rank = self.comm.Get_rank()
        if isinstance(array, np.generic):  # a numpy scalar (np.float32(3.5)) is the 0-d array it stands for
            array = np.array(array)
        try:
            d = declaration(name, array, offset, global_shape, rank)
            self.backend.check_dtype(name, array.dtype)
            if d["kind"] == SEGMENT and not self.backend.capabilities.segments:
                raise CapabilityError(f"variable {name!r}: backend {self.backend.name!r} has no per-rank segments")
            described = varmeta.declare(name, array.ndim, dims, attrs, rank)
            for key, value in described.get("attrs", {}).items():
                try:
                    self.backend.check_attr(key, value)
                except CapabilityError as exc:
                    raise CapabilityError(f"variable {name!r}: {exc}") from None
            earlier = self._described.setdefault(name, described)
            if not varmeta.same(earlier, described):
                raise DeclarationError(f"variable {name!r} on rank {rank}: this block declares "
                                       f"{varmeta.show(described)} but an earlier block declared "
                                       f"{varmeta.show(earlier)}; every block of a variable must declare the same")
            self._pending.append(_Pending(d, array))
        except CheckpointError as exc:
            self._fail_locally(exc)

    def set_attr(self, key: str, value: Any) -> None:
        """Set one attribute (JSON-compatible; must be the same on every rank). Local."""
        self._check_open("set_attr", key)
        try:
            self.attrs.update(self._checked_attrs({key: value}))
        except CheckpointError as exc:
            self._fail_locally(exc)

    def _checked_attrs(self, attrs: Mapping[str, Any] | None) -> dict[str, Any]:
        """Local: ``attrs`` as stored (plain JSON types), refused now when the backend cannot store one."""
        normalized = metamod.normalize_attrs(attrs)
        for key, value in normalized.items():
            self.backend.check_attr(key, value)
        return normalized

    def _check_open(self, method: str, name: object) -> None:
        """Local: a declaration after close() would be silently lost; refuse it."""
        if self._closed:
            raise ClosedCheckpointError(f"checkpoint {self.path}: {method}({name!r}) after close(); the checkpoint "
                                        "is already written (or failed), declare everything before close()")

    def _fail_locally(self, exc: CheckpointError) -> None:
        """Remember a local declaration error for close() (which raises it on every rank) and raise it here,
        naming this rank."""
        named = _naming_rank(exc, self.comm.Get_rank())
        self._error = self._error or named
        if named is exc:
            raise exc
        raise named from None

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            self.close()
            return False
        # This rank failed inside the with-block (any exception: also sys.exit() or Ctrl-C): tell the others,
        # which are, or will be, in close(), and only then let the original exception go on.
        if not self._closed:
            self._error = self._error or exc
            try:
                self.close()
            except BaseException as close_exc:  # the original exception is the one to report
                if close_exc is not exc and not isinstance(close_exc, CheckpointError):
                    raise  # something new happened meanwhile (a signal held during close): it wins
            finally:
                if self.handle is not None:  # async: the background write fails because of ``exc``, which goes on
                    self.handle.reported = True  # to the caller: on this rank it is not reported again at exit
        return False

    # ------------------------------------------------------------------------------------------ collective
    def wait(self) -> None:
        """Local: for an asynchronous or staged checkpoint, block until it is committed (raise its error)."""
        if self.handle is not None:
            self.handle.wait()

    def done(self) -> bool:
        """Local: True when nothing of this checkpoint is still being written in the background."""
        return self.handle is None or self.handle.done()

    def close(self) -> None:
        """Collective: validate, write, commit and rename. Raises the same error on every rank on failure.

        ``mode="async"``: copies the blocks into a staging buffer and returns; the I/O thread does the rest
        (see :mod:`ckptio.async_io`). ``stage_dir``: writes each rank's blocks to the stage synchronously, then
        drains it to ``path`` in the background.
        """
        if self._closed:
            return
        with coord.collective_section():
            self._closed = True  # whatever happens below, declarations after this point are refused
            coord.gather_and_plan(self.comm, f"checkpoint {self.path}: declare (arguments)", self._arguments,
                                  _same_arguments)
            self._close_chosen()

    def _arguments(self) -> dict[str, Any]:
        """Local part of close()'s first phase: an argument of ckptio.create that was wrong in itself on this rank
        is raised here (so on every rank); then the arguments that every rank must pass alike (they select the
        code path and the file: a difference would hang or write somewhere unexpected)."""
        if self._error is not None and self.backend is None:
            raise self._error
        _check_checkpoint_name(self.path, self.comm.Get_size(), check_length=self.comm.Get_rank() == 0)
        return {"settings": settings.collective_snapshot(), "backend": self.backend.name, "mode": self.mode,
                "path": os.path.abspath(self.path),
                "stage_dir": None if self.stage_dir is None else os.path.abspath(self.stage_dir),
                "compression": compression_text(self.compression)}

    def _close_chosen(self) -> None:
        background = (self.mode == "async" or self.stage_dir is not None)
        if background and not async_io.thread_multiple_available():
            async_io.warn_no_threads()
            background = False
        if self.stage_dir is not None:
            self._close_staged(background)
        elif background:
            self._close_async()
        else:
            self._close_now()

    def _adopt(self, twin: Writer, seconds: Mapping[str, float] | None = None) -> None:
        """After the background write ``twin`` committed this checkpoint: its statistics and document (rank 0's
        whole, a light copy elsewhere) become this writer's, so ``stats`` and ``meta`` mean the same after
        ``wait()`` as after a synchronous ``close()``."""
        self.stats = WriteStats({**(seconds or {}), **twin.stats.seconds}, twin.stats.bytes_total,
                                twin.stats.bytes_min, twin.stats.bytes_max)
        self.meta = twin.meta

    def _clone(self, path: str, comm) -> Writer:
        twin = Writer(path, comm, backend=self.backend.name, attrs=self.attrs, hints=self._user_hints,
                      compression=self._compression_spec)
        twin._error = self._error
        twin.series_record = self.series_record
        twin.before_rename = self.before_rename
        return twin

    def _close_async(self) -> None:
        """Stage the blocks and hand the write to the I/O thread. Older background checkpoints whose buffers
        are needed are waited for first; their unreported failures are raised here, after this checkpoint was
        submitted (so it is not lost because an older one failed). A subclass's ``_on_commit(comm)`` (Series
        retention) runs in the I/O thread right after the commit, collectively on the duplicated communicator."""
        self._closed = True
        engine = async_io.engine_for(self.comm)
        finished = engine.settle_before_new()
        self.backend.write_problem()  # loads the backend's library here, before the exit handler order is set
        slot, copies = async_io.stage_arrays(engine.pool, [p.data for p in self._pending])
        twin = self._clone(self.path, engine.comm)
        twin._pending = [_Pending(dict(p.decl), c) for p, c in zip(self._pending, copies, strict=True)]
        twin._described = dict(self._described)
        self._pending = []
        self.handle = async_io.AsyncCheckpoint(self.path)
        on_commit = getattr(self, "_on_commit", None)

        def job(comm) -> None:
            twin.close()
            self._adopt(twin)  # read after wait(), which orders it after this
            if on_commit is not None:
                on_commit(comm)

        engine.submit(self.handle, job, lambda: engine.pool.release(slot))
        async_io.raise_failures(finished, f"close() of {self.path} (which was submitted normally)")

    def _close_staged(self, background: bool) -> None:
        """Collective: write every rank's blocks into its own node's stage (shared or node-local, found out by
        :func:`ckptio.staging.locate`), then drain them to ``path`` through the usual collective write, in
        the background (see :mod:`ckptio.staging`)."""
        from . import staging

        self._closed = True
        comm = self.comm
        rank, nprocs = comm.Get_rank(), comm.Get_size()
        t0 = time.perf_counter()
        try:
            token = coord.gather_and_plan(comm, f"checkpoint {self.path}: declare (staged)", self._prepare_staged,
                                          self._plan_staged)
            info = staging.locate(comm, self.stage_dir)
            directory = staging.checkpoint_dir(self.stage_dir, self.path, token)
            header = {"final": os.path.abspath(self.path), "token": token, "host": info.hosts[rank],
                      "backend": self.backend.name, "attrs": self.attrs,
                      "series": None if self.series_record is None else self.series_record.to_json()}
            blocks = [({**p.decl, **self._described.get(p.decl["name"], {})}, p.data) for p in self._pending]

            def write_piece() -> int:
                spare = staging.spare_data_file(self.stage_dir, self.path, rank, nprocs)
                return staging.write_piece(directory, rank, nprocs, header, blocks, spare)

            try:
                written = coord.run(comm, f"checkpoint {self.path}: write to stage {self.stage_dir}", write_piece)
            except BaseException:  # failed on some rank (a full stage): no rank keeps its piece of it
                staging.remove_piece(directory, rank, nprocs)
                raise
        finally:
            self._pending = []
        total, least, most = coord.sum_min_max(comm, written)
        self.stats = WriteStats({"stage": time.perf_counter() - t0}, total, least, most)
        final = self.path
        on_commit = getattr(self, "_on_commit", None)  # Series retention, as in _close_async

        twins: list[Writer] = []
        stage_seconds = self.stats.seconds["stage"]

        def twin(path: str, comm, _manifest) -> Writer:  # the drain's writer, kept for its stats and document
            twins.append(self._clone(path, comm))
            return twins[-1]

        def drain(comm) -> None:
            staging.drain(comm, twin, directory, final)
            self._adopt(twins[-1], {"stage": stage_seconds})
            staging.retain(comm, info, final, token)
            if on_commit is not None and background:  # synchronous: Series runs it after close() returns
                on_commit(comm)

        if not background:
            drain(comm)
            return
        engine = async_io.engine_for(comm)
        finished = engine.settle_before_new()
        self.backend.write_problem()  # loads the backend's library here (see async_io.IOEngine.submit)
        self.handle = async_io.AsyncCheckpoint(self.path)
        engine.submit(self.handle, drain, lambda: None)
        async_io.raise_failures(finished, f"close() of {self.path} (which was submitted normally)")

    def _prepare_staged(self) -> dict[str, Any]:
        """Local part of a staged close's declare phase: C order (checksums are computed while writing the
        stage, compression is the drain's work), and whether this rank sees the final directory (the drain
        opens a file there)."""
        if self._error is not None:
            raise self._error
        _check_stage_dir(self.stage_dir)
        t = time.perf_counter()
        for p in self._pending:
            p.data = np.ascontiguousarray(p.data).reshape(p.data.shape)  # (ascontiguousarray makes 0-d 1-d)
        from mpi4py import MPI

        final_dir = os.path.dirname(os.path.abspath(self.path))
        problem = None if os.path.isdir(final_dir) else (f"{final_dir} is not a directory seen from "
                                                         f"{MPI.Get_processor_name()} (rank {self.comm.Get_rank()})")
        return {"decls": pack_declarations([p.decl for p in self._pending]), "attrs": self.attrs,
                "described": varmeta.pack(self._described), "prepare_seconds": time.perf_counter() - t,
                "dir_problem": _directory_problem(self.path) if self.comm.Get_rank() == 0 else None,
                "sees_final": problem}

    def _plan_staged(self, gathered: list[dict[str, Any]]) -> str:
        """Rank 0: validate the declarations as a direct write would (so a staged checkpoint fails now, not in
        the drain) and name the staged checkpoint (its token)."""
        from . import staging

        blind = [g["sees_final"] for g in gathered if g["sees_final"]]
        if blind:
            raise CheckpointIOError(f"checkpoint {self.path}: " + "; ".join(blind))
        self._plan_global(gathered)
        return staging.new_token()

    def _close_now(self) -> None:
        self._closed = True
        comm = self.comm
        rank = comm.Get_rank()
        t0 = time.perf_counter()
        timings: dict[str, float] = {}

        _faults.point("declare", comm)
        # rank 0 plans with every rank's declarations; every rank gets the plan's O(variables) part, then only its
        # own share of the rest (its segments' offsets, its blocks' file offsets): never the whole plan
        with gc_paused():  # rank 0 unpickles and plans every rank's declarations: no cyclic GC passes meanwhile
            headers, tmp, described = coord.gather_and_plan(comm, f"checkpoint {self.path}: declare",
                                                            self._prepare_local, self._plan_common)
        share = coord.scatter_from_root(comm, f"checkpoint {self.path}: declare (each rank's share)",
                                        self._plan_shares)
        if rank == 0:
            variables, layout = self._full_plan
        else:
            variables = own_plan(headers, [p.decl for p in self._pending], rank, share["segments"])
            layout = share["layout"]
        timings["declare"] = time.perf_counter() - t0
        session = None
        created: list[Any] = []  # the session even when the create phase failed on another rank: abort it
        info = hintsmod.to_info(self.hints)
        try:
            t = time.perf_counter()
            # rank 0 creates the empty file with ckptio's stripe layout where the file system allows (ckptio.fslayout)
            self._fs_layout = (tmp, coord.bcast_from_root(comm, f"checkpoint {self.path}: set layout",
                                                          lambda: fslayout.prepare(tmp, self.hints)))
            _faults.point("create file", comm)
            session = coord.run(comm, f"checkpoint {self.path}: create file",
                                lambda: created.append(self.backend.create(tmp, comm, info, variables, layout,
                                                                           {"hints": self.hints,
                                                                            "nprocs": comm.Get_size(),
                                                                            "attrs": self.attrs,
                                                                            "described": described}))
                                or created[0])
            # before any collective write: a full file system is one clean error (MPI-IO may hang or lose data)
            coord.bcast_from_root(comm, f"checkpoint {self.path}: reserve space",
                                  lambda: reserve_space(tmp, session.data_ranges(), "its data"))
            timings["open"] = time.perf_counter() - t
            t = time.perf_counter()
            mine = self._my_blocks(variables, rank)
            _faults.point("write data", comm)
            io_mark = placement_stats.io_mark()  # what this rank really moves to the file (stats.write.placement)
            written = coord.run(comm, f"checkpoint {self.path}: write data", lambda: session.write_blocks(mine))
            timings["write"] = time.perf_counter() - t
            local_report = {"written": written_columns(written), "bytes": sum(w.stored_nbytes for w in written),
                            "timings": timings,
                            "placement": placement_stats.local_record(io_mark)}
            t = time.perf_counter()
            _faults.point("checksum gather", comm)
            # rank 0's effective hints are asked for inside the phase: an MPI error there is agreed on too. The
            # document stays on rank 0; every rank gets it without the block tables (O(variables + nodes))
            with gc_paused():
                light = coord.gather_and_plan(comm, f"checkpoint {self.path}: build index", lambda: local_report,
                                              lambda reports: self._index(variables, reports, session.effective_hints(),
                                                                          session.storage_info(), described))
            meta = self._document if rank == 0 else light
            _faults.point("write index", comm)
            coord.run(comm, f"checkpoint {self.path}: commit",
                      lambda: (session.commit(meta if rank == 0 else None), _faults.point("commit vote", comm)))
            session = None
            created.clear()  # committed: nothing to abort any more
            timings["commit"] = time.perf_counter() - t
            _faults.point("rename", comm)
            coord.bcast_from_root(comm, f"checkpoint {self.path}: check and rename",
                                  lambda: (self._check_written(tmp), self.before_rename and self.before_rename(),
                                           _rename_durably(tmp, self.path)))
            written_bytes = meta["stats"]["write"]["bytes"]
            self.stats = WriteStats(dict(meta["stats"]["write"]["seconds"]), written_bytes["total"],
                                    written_bytes["min"], written_bytes["max"])
            self.stats.seconds["commit"] = timings["commit"]
            self.stats.seconds["total"] = time.perf_counter() - t0
            self.meta = meta
        except BaseException:
            if session is None and created:
                session = created[0]  # created on this rank, but the create phase failed (on some rank)
            if session is not None:
                session.abort()
            if rank == 0:
                _remove_quietly(tmp)
            raise
        finally:
            info.Free()
            self._pending = []

    # ------------------------------------------------------------------------------------------- helpers
    def _check_written(self, tmp: str) -> None:
        """Rank 0, before the rename: read the metadata back from the file as the file system has it (header,
        index or document, completion mark; not the data). Where space could not be reserved (no
        ``fallocate``), a full file system may drop writes without any error (Open MPI's OMPIO ignores short
        writes): the lost tail then shows here, and the checkpoint fails instead of being renamed."""
        try:
            self.backend.read_metadata(tmp)
        except CheckpointError as exc:
            raise CheckpointIOError(f"{tmp}: the file as written is not a complete checkpoint, so the file system "
                                    f"lost writes (no space left, or quota exceeded?): {exc}") from None

    def _prepare_local(self) -> dict[str, Any]:
        """Local part of the declare phase: C order, checksums, compression; returns what rank 0 needs."""
        if self._error is not None:
            raise self._error
        t = time.perf_counter()
        for p in self._pending:
            data = memsel.gathered(p.data)  # a strided view stays a view (written in place): ckptio.memsel
            p.data = data
            p.decl["checksum"] = memsel.checksum(data)  # of its C-order bytes, without a copy of the block
            if self.compression is not None:
                codec, level = self.compression
                p.stored = np.frombuffer(codecs.compress(np.ascontiguousarray(data), codec, level), np.uint8)
                p.decl["stored_nbytes"], p.decl["codec"] = int(p.stored.nbytes), f"{codec}:{level}"
            else:
                p.stored = data
        check_dir = _directory_problem(self.path) if self.comm.Get_rank() == 0 else None
        return {"decls": pack_declarations([p.decl for p in self._pending]), "attrs": self.attrs,
                "described": varmeta.pack(self._described), "dir_problem": check_dir,
                "prepare_seconds": time.perf_counter() - t}

    def _plan_global(self, gathered: list[dict[str, Any]]):
        """Rank 0: validate everything (the variables' dims and attrs too: the same on every rank, one length per
        dimension name), choose the temporary name and the file layout."""
        if gathered[0]["dir_problem"]:
            raise CheckpointIOError(gathered[0]["dir_problem"])
        for r, g in enumerate(gathered):
            if not metamod.attrs_identical(g["attrs"], gathered[0]["attrs"]):
                a0, ar = gathered[0]["attrs"], g["attrs"]
                key = next(k for k in sorted(set(a0) | set(ar))
                           if not metamod.attrs_identical(a0.get(k, "<unset>"), ar.get(k, "<unset>")))
                raise DeclarationError(f"attribute {key!r} differs between rank 0 ({a0.get(key, '<unset>')!r}) and "
                                       f"rank {r} ({ar.get(key, '<unset>')!r}); attrs must be identical on every rank")
        variables = plan_packed([g["decls"] for g in gathered])
        described = varmeta.agree([g["described"] for g in gathered])
        varmeta.check_dimensions({name: var.shape for name, var in variables.items()}, described)
        if not variables and not gathered[0]["attrs"]:
            _warn.warn(f"checkpoint {self.path} holds no variables and no attributes")
        stripe_unit = fslayout.write_alignment(self.path, self.hints)  # whole storage objects where known
        layout = self.backend.layout(variables, stripe_unit, len(gathered))
        directory, base = os.path.split(os.path.abspath(self.path))
        tmp = os.path.join(directory, f".{base}.ckptio-tmp-{uuid.uuid4().hex[:12]}")
        self._prepare_seconds = max(g["prepare_seconds"] for g in gathered)
        return variables, layout, tmp, {name: d for name, d in described.items() if d}

    def _plan_common(self, gathered: list[dict[str, Any]]):
        """Rank 0: the whole plan (:meth:`_plan_global`, kept for :meth:`_plan_shares` and rank 0's own session),
        and what every rank needs of it: per variable dtype, shape, kind and block count, the temporary name,
        the variables' dims and attrs."""
        variables, layout, tmp, described = self._plan_global(gathered)
        self._full_plan = (variables, layout)
        return plan_headers(variables), tmp, described

    def _plan_shares(self) -> list[dict[str, Any]]:
        """Rank 0, after :meth:`_plan_common`: each rank's own share of the plan (its segments' offsets and its
        part of the backend's layout), O(its blocks)."""
        variables, layout = self._full_plan
        nprocs = self.comm.Get_size()
        segments = segment_starts(variables, nprocs)
        layouts = self.backend.layout_shares(layout, nprocs)
        return [{"segments": segments[r], "layout": layouts[r]} for r in range(nprocs)]

    def _index(self, variables: Mapping[str, VariablePlan], reports: list[dict[str, Any]],
               effective: Mapping[str, str], storage: Mapping[str, dict[str, Any]],
               described: Mapping[str, varmeta.Description]) -> dict[str, Any]:
        """Rank 0: the metadata document (kept as ``self._document`` for the commit), and the light copy every
        rank receives: each variable's ``nblocks`` instead of its block table, and of the write statistics the
        seconds and bytes (the per-node placement stays in the document): O(variables)."""
        self._document = self._build_meta(variables, reports, effective, storage, described)
        return light_copy(self._document)

    def _my_blocks(self, variables: Mapping[str, VariablePlan], rank: int):
        """This rank's (BlockPlan, stored bytes) in declaration order."""
        by_index = {b.local_index: b for v in variables.values() for b in v.blocks_of(rank)}
        return [(by_index[i], p.stored) for i, p in enumerate(self._pending)]

    def _build_meta(self, variables: Mapping[str, VariablePlan], reports: list[dict[str, Any]],
                    effective: Mapping[str, str], storage: Mapping[str, dict[str, Any]],
                    described: Mapping[str, varmeta.Description]) -> dict[str, Any]:
        """Rank 0: the metadata document (schema in ckptio.meta). The block tables are the plan's columns (where
        each block is, its checksum from the declaration) with what every rank reported writing (file offset,
        stored bytes, codec: :func:`written_columns`, in its declaration order), joined without a Python step
        per block."""
        firsts = np.cumsum([0] + [len(rep["written"]["file_offset"]) for rep in reports])
        file_offset = np.fromiter(itertools.chain.from_iterable(rep["written"]["file_offset"] for rep in reports),
                                  np.int64, int(firsts[-1]))
        stored = np.fromiter(itertools.chain.from_iterable(rep["written"]["stored"] for rep in reports), np.int64,
                             int(firsts[-1]))
        codec_of = list(itertools.chain.from_iterable(rep["written"]["codec"] for rep in reports))
        codec_names = sorted(set(codec_of) - {None})
        ids = {None: -1, **{c: i for i, c in enumerate(codec_names)}}
        codec = np.fromiter(map(ids.__getitem__, codec_of), np.int64, len(codec_of))
        out_vars: dict[str, Any] = {}
        for name, var in variables.items():
            rows = firsts[var.rank] + var.local_index  # where each block's report is
            if codec_names:
                used = np.unique(codec[rows][codec[rows] >= 0])
                codec_ids = np.where(codec[rows] >= 0, np.searchsorted(used, codec[rows]), -1)
                names = [codec_names[u] for u in used.tolist()]
            else:
                codec_ids, names = np.full(len(rows), -1, np.int64), []
            blocks = BlockTable.of_columns(var.rank, var.offset, var.size, var.checksum, file_offset[rows],
                                           stored[rows], codec_ids, names)
            out_vars[name] = {"dtype": var.dtype, "shape": list(var.shape), "kind": var.kind, "blocks": blocks,
                              **described.get(name, {})}
            if name in storage:
                out_vars[name]["storage"] = storage[name]
        stripe_count, stripe_unit = hintsmod.stripe_layout(self.hints)
        seconds = {"prepare": getattr(self, "_prepare_seconds", 0.0)}
        for phase in ("declare", "open", "write"):
            seconds[phase] = max(rep["timings"].get(phase, 0.0) for rep in reports)
        return {
            "schema": metamod.SCHEMA_VERSION,
            "ckptio_version": metamod.__version__,
            "backend": self.backend.name,
            "backend_format_version": self.backend.format_version,
            "created": created_now(),
            "nprocs": len(reports),
            "byteorder": sys.byteorder,
            "checksum": metamod.CHECKSUM_ALGORITHM,
            "attrs": self.attrs,
            "layout": {"stripe_count": stripe_count, "stripe_unit": stripe_unit,
                       **fslayout.recorded(getattr(self, "_fs_layout", None))},
            "hints": {"requested": dict(self.hints), "effective": dict(effective),
                      "io_component": hintsmod.io_component()},
            "stats": {"write": {"seconds": seconds, "bytes": byte_summary([rep["bytes"] for rep in reports]),
                                "placement": placement_stats.summarize([rep["placement"] for rep in reports],
                                                                       [rep["bytes"] for rep in reports])}},
            "variables": out_vars,
            **({"series": self.series_record.to_json()} if self.series_record is not None else {}),
        }


def _same_arguments(gathered: list[dict[str, Any]]) -> None:
    """Rank 0: DeclarationError naming the ranks when the ranks passed different ckptio.create arguments, or
    see different collective CKPTIO_* settings."""
    settings.check_same([g.pop("settings") for g in gathered], "ckptio.create")
    for key in gathered[0]:
        groups: dict[Any, list[int]] = {}
        for rank, g in enumerate(gathered):
            groups.setdefault(g[key], []).append(rank)
        if len(groups) > 1:
            parts = "; ".join(f"{value!r} on {_ranks_text(ranks)}" for value, ranks in groups.items())
            name = "path" if key == "path" else f"{key}="
            raise DeclarationError(f"ckptio.create was called with different {name} on different ranks: {parts}; "
                                   "every rank must pass the same path, backend=, mode=, stage_dir= and "
                                   "compression=")


_TMP_MARK = ".ckptio-tmp-"  # the temporary name is f".{base}{_TMP_MARK}{12 hex digits}" (Writer._plan_global)


def _check_checkpoint_name(path: str, nprocs: int, check_length: bool) -> None:
    """Local, in close()'s first agreed phase (so an error reaches every rank before anything is written):

    * every rank: ``path`` must name a file. A trailing ``/`` (or a last component ``.``/``..``) names a
      directory; the data would be written to a temporary file beside it and only the final rename would fail;
    * ``check_length`` (rank 0, which creates the temporary file; one file-system call, not one per rank): the
      temporary name (``.NAME.ckptio-tmp-`` + 12 characters: 25 bytes more than the name) must fit in the
      directory's NAME_MAX (``os.pathconf(dir, "PC_NAME_MAX")``, 255 bytes on most Linux file systems), and, under
      Open MPI's OMPIO, the temporary file's whole path must fit in :func:`ompio_path_limit` bytes. OMPIO aborts
      every rank (SIGABRT in its ``sharedfp/lockedfile`` component) on a longer path instead of raising."""
    text = os.fspath(path)
    base = os.path.basename(text)
    if text.endswith(os.sep) or (os.altsep and text.endswith(os.altsep)) or base in ("", ".", ".."):
        raise DeclarationError(f"checkpoint path {text!r} names a directory (it ends with "
                               f"{'/' if base == '' else repr(base)}); give a file name for the checkpoint, "
                               f"e.g. {os.path.join(text.rstrip(os.sep) or '.', 'chk_000010')!r}")
    if not check_length:
        return
    directory = os.path.dirname(os.path.abspath(text))
    extra = len(os.fsencode(f".{_TMP_MARK}")) + 12  # the temporary name's bytes besides the checkpoint's name
    try:
        name_max = os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):  # a missing directory is reported by the declare phase, which names it
        name_max = -1
    if 0 < name_max < len(os.fsencode(base)) + extra:
        raise CheckpointIOError(
            f"checkpoint {text}: file name too long: {len(os.fsencode(base))} bytes, and its temporary file's name "
            f"('.' + name + '{_TMP_MARK}' + 12 characters) would exceed the limit of {name_max} bytes (NAME_MAX) of "
            f"the file system of {directory}; use a name of at most {name_max - extra} bytes")
    limit = ompio_path_limit(nprocs)
    tmp_path = len(os.fsencode(os.path.join(directory, base))) + extra
    if limit is not None and tmp_path > limit:
        raise CheckpointIOError(
            f"checkpoint {text}: path too long for Open MPI's OMPIO: its temporary file's path would have "
            f"{tmp_path} bytes, and OMPIO aborts every rank on paths of more than {limit} bytes at {nprocs} "
            f"rank(s) (a fixed 256-byte buffer in its sharedfp/lockedfile component); use a shorter directory or "
            f"name (at most {limit - (tmp_path - len(os.fsencode(base)))} bytes here), or ROMIO "
            "(OMPI_MCA_io=romio321)")


def ompio_path_limit(nprocs: int) -> int | None:
    """Local: the longest file path Open MPI's OMPIO opens without aborting the job, or None (another MPI-IO).
    Measured on Open MPI 4.1 (tests/faults/test_edges.py): its ``sharedfp/lockedfile`` component formats
    ``path + ".locktest." + rank`` into a 256-byte buffer (``__sprintf_chk`` aborts beyond it), so the limit is
    256 - 1 - 10 - the digits of the highest rank: 244 bytes at up to 10 ranks."""
    from mpi4py import MPI

    if not MPI.Get_library_version().startswith("Open MPI") or "romio" in os.environ.get("OMPI_MCA_io", ""):
        return None
    return 256 - 1 - len(".locktest.") - len(str(max(nprocs - 1, 0)))


def _check_stage_dir(stage_dir: str | None) -> None:
    """Local, every rank, in a staged close()'s declare phase (agreed, before the stage is probed by
    :func:`ckptio.staging.locate`): ``stage_dir``, or the nearest part of its path that exists, must be a
    directory. A regular file there made the probe fail and then its cleanup, which reported "remove the probe
    failed: NotADirectoryError" instead of the cause (issue 23)."""
    if stage_dir is None:
        return
    path = os.path.abspath(stage_dir)
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    if os.path.isdir(path):
        return
    from mpi4py import MPI

    why = symlink_problem(path)
    if why is None:
        what = "it" if path == os.path.abspath(stage_dir) else f"its parent {path}"
        why = f"{what} is {'a regular file' if os.path.isfile(path) else 'not a directory'}"
    raise CheckpointIOError(f"stage_dir {stage_dir} cannot be used on {MPI.Get_processor_name()}: {why}, "
                            "not a directory; give a directory (created if missing) for the staged copies")


def _ranks_text(ranks: list[int], shown: int = 8) -> str:
    """``rank 3`` / ``ranks 0, 1, 2 ... (40 ranks)``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    text = ", ".join(map(str, ranks[:shown]))
    return f"ranks {text}" + (f" ... ({len(ranks)} ranks)" if len(ranks) > shown else "")


def _directory_problem(path: str) -> str | None:
    """Why a checkpoint cannot be created at ``path`` (checked on rank 0 before any file is touched)."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"{path}: is a directory; give a file name for the checkpoint"
    if not os.path.exists(directory):
        why = symlink_problem(directory)  # a loop or a dangling link is not "does not exist"
        return f"{path}: {why}" if why else f"{path}: directory {directory} does not exist"
    if not os.path.isdir(directory):
        return f"{path}: {directory} is not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"{path}: directory {directory} is not writable"
    return None


def _naming_rank(exc: CheckpointError, rank: int) -> CheckpointError:
    """``exc`` if its message names ``rank``, else the same error class with "(on rank N)" appended, so that
    a local error read on its own still says where it happened."""
    if f"rank {rank}" in str(exc) or isinstance(exc, CollectiveError):
        return exc
    try:
        return type(exc)(f"{exc} (on rank {rank})")
    except TypeError:  # an error class with another signature: keep it as it is
        return exc


def _rename_durably(tmp: str, path: str) -> None:
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
