"""The write protocol, once for every format (issue 24): from every rank's declared blocks to a committed file.

Collective over the writing communicator; each arrow is one agreed phase (:mod:`ckptio.coord`), and the storage
backend only moves bytes inside them (:mod:`ckptio.backends.base` says which of its methods each phase calls)::

    declare     each rank prepares its blocks (C order, checksum, optional compression) and sends their
                descriptions to the planning rank, which validates them all (shapes, dtypes, overlaps, coverage,
                attrs), names a temporary file next to the target and places the blocks (Backend.place)
 -> shares      each rank receives its own share of the plan (never the whole plan: O(its blocks))
 -> layout      the planning rank creates the empty temporary file with ckptio's stripe layout where the file
                system lets a program set one (ckptio.engine.fslayout)
 -> create      the backend's library creates the file with the MPI hints; then the format's own structures
 -> reserve     the planning rank reserves the data's space (fallocate), so a full file system is one clean
                error here and not inside a collective write
 -> write       the backend's collective steps, each agreed; or, for a format whose bytes ckptio places (the
                native one), ckptio's own collective buffering (engine.write_aggregate: the write aggregators,
                chosen as the restart's, write their file domains; only they open the file); then sync
 -> index       every rank reports what it wrote; the planning rank builds the document (engine.index)
 -> commit      engine.commit: document, completion mark, vote, rename

A failure at any phase removes the temporary file (engine.commit.abort) and leaves an existing checkpoint of the
same name and every other checkpoint untouched.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ckptio import _warn, coord, settings
from ckptio.backends.base import Backend, BlockToWrite, CreateOptions, Step, WriteHandle
from ckptio.backends.writeback import FileWriteback
from ckptio.coord import comms
from ckptio.coord import hints as hintsmod
from ckptio.engine import commit as commitmod
from ckptio.engine import faults as _faults
from ckptio.engine import fslayout, placement_stats, space
from ckptio.engine import write_aggregate as aggregate
from ckptio.engine.gc_pause import gc_paused, without_gc
from ckptio.engine.index import (
    DocumentInputs,
    RankReport,
    WriteStats,
    build_index,
    light_copy,
    written_columns,
)
from ckptio.engine.steps import run_steps
from ckptio.engine.target_path import directory_problem
from ckptio.errors import CheckpointIOError, DeclarationError
from ckptio.model import codec as codecs
from ckptio.model import memsel, varmeta
from ckptio.model import meta as metamod
from ckptio.model.block_table import user_table
from ckptio.model.declared import Declared, RankShare, prepared
from ckptio.model.document import CheckpointDocument
from ckptio.model.plan import pack_declarations, plan_packed
from ckptio.model.rank_plan import own_boxes, own_plan, plan_headers, segment_starts
from ckptio.model.series_record import SeriesRecord
from ckptio.model.variable_plan import VariablePlan

TMP_MARK = ".ckptio-tmp-"  # the temporary name is f".{base}{TMP_MARK}{12 hex digits}"


@dataclass
class PendingBlock:
    """One block a rank declared: its description (:func:`ckptio.model.declared.declaration`) and its data (a
    reference to the caller's array, C order or a strided view of it; after the declare phase also its stored
    form)."""

    decl: dict[str, Any]
    data: np.ndarray
    stored: Any = None  # compressed bytes, or the array itself


@dataclass
class WriteRequest:
    """What the facade (:class:`ckptio.Writer`) hands the engine: one checkpoint, as this rank declared it."""

    path: str
    comm: Any
    backend: Backend
    hints: dict[str, str]
    compression: tuple[str, int] | None
    attrs: dict[str, Any]
    blocks: list[PendingBlock]
    described: Mapping[str, varmeta.Description] = field(default_factory=dict)  # this rank's dims/attrs per variable
    series_record: SeriesRecord | None = None
    before_rename: Callable[[], None] | None = None  # planning rank, right before the rename (a Series' lease)
    error: BaseException | None = None  # a declaration error of this rank, raised in the declare phase (agreed)
    user_hints: Mapping[str, Any] | None = None  # hints= as given (an explicit cb_nodes sets the write aggregators)


@dataclass
class WriteResult:
    """What every rank gets back: the committed document (whole on the planning rank, its light copy elsewhere)
    and the write statistics."""

    meta: CheckpointDocument
    stats: WriteStats


def prepare_blocks(request: WriteRequest) -> Declared:
    """Local part of the declare phase: this rank's deferred declaration error, if any (raised here, so on every
    rank); C order, checksums, compression; returns what the planning rank needs."""
    if request.error is not None:
        raise request.error
    t = time.perf_counter()
    for p in request.blocks:
        data = memsel.gathered(p.data)  # a strided view stays a view (written in place): ckptio.model.memsel
        p.data = data
        checksum = memsel.checksum(data)  # of its C-order bytes, without a copy of the block
        if request.compression is not None:
            codec, level = request.compression
            p.stored = np.frombuffer(codecs.compress(np.ascontiguousarray(data), codec, level), np.uint8)
            p.decl = prepared(p.decl, checksum, int(p.stored.nbytes), f"{codec}:{level}")
        else:
            p.stored = data
            p.decl = prepared(p.decl, checksum)
    from ckptio.coord.mpi import MPI

    return Declared(pack_declarations([p.decl for p in request.blocks]), request.attrs,
                    varmeta.pack(request.described), time.perf_counter() - t,
                    directory_problem(request.path) if request.comm.Get_rank() == commitmod.ROOT else None,
                    MPI.Get_processor_name(), hintsmod.collective_write_hazard())


@dataclass
class GlobalPlan:
    """The planning rank's whole plan of one checkpoint."""

    variables: dict[str, VariablePlan]
    described: dict[str, Any]
    tmp: str
    stripe_unit: int
    prepare_seconds: float
    hosts: list[str] = field(default_factory=list)  # every rank's MPI_Get_processor_name (its node)


def plan_globally(request: WriteRequest, gathered: Sequence[Declared | Mapping[str, Any]]) -> GlobalPlan:
    """Planning rank: validate everything (the variables' dims and attrs too: the same on every rank, one length
    per dimension name), choose the temporary name and the alignment. Raises DeclarationError naming ranks.
    ``gathered``: every rank's :class:`~ckptio.model.declared.Declared` (or the staged close's dict of it)."""
    gathered = [Declared.of(g) for g in gathered]
    if gathered[0].dir_problem:
        raise CheckpointIOError(gathered[0].dir_problem)
    a0 = gathered[0].attrs
    for r, g in enumerate(gathered):
        if not metamod.attrs_identical(g.attrs, a0):
            ar = g.attrs
            key = next(k for k in sorted(set(a0) | set(ar))
                       if not metamod.attrs_identical(a0.get(k, "<unset>"), ar.get(k, "<unset>")))
            raise DeclarationError(f"attribute {key!r} differs between rank 0 ({a0.get(key, '<unset>')!r}) and "
                                   f"rank {r} ({ar.get(key, '<unset>')!r}); attrs must be identical on every rank")
    variables = plan_packed([g.decls for g in gathered])
    hosts = [g.host for g in gathered]  # (the staged check of the declarations has none)
    described = varmeta.agree([g.described for g in gathered])
    varmeta.check_dimensions({name: var.shape for name, var in variables.items()}, described)
    if not variables and not a0:
        _warn.warn(f"checkpoint {request.path} holds no variables and no attributes")
    directory, base = os.path.split(os.path.abspath(request.path))
    tmp = os.path.join(directory, f".{base}{TMP_MARK}{uuid.uuid4().hex[:12]}")
    return GlobalPlan(variables, {name: d for name, d in described.items() if d}, tmp,
                      fslayout.write_alignment(request.path, request.hints),  # whole storage objects where known
                      max(g.prepare_seconds for g in gathered), hosts)


class _Job:
    """One checkpoint being written (the phases of the module docstring, in order)."""

    def __init__(self, request: WriteRequest):
        self.request = request
        self.comm = request.comm
        self.rank = self.comm.Get_rank()
        self.where = f"checkpoint {request.path}"
        self.timings: dict[str, float] = {}
        self.plan: GlobalPlan | None = None  # the planning rank's
        self.placement: Any = None
        self.handle: WriteHandle | None = None
        self.fs_layout: Any = None
        # ckptio's own collective buffering (engine.write_aggregate), when the backend's bytes are placed by ckptio
        self.write_io: str | None = None  # "posix"/"mpiio" (agreed: the planning rank's choice), None: the backend's
        self.independent_because: str | None = None  # any rank's collective_write_hazard (CreateOptions)
        self.writeback_bytes = 0  # CKPTIO_WRITEBACK_BYTES, read in the agreed create phase (0: none started early)
        self.contiguous: Any = None  # the planning rank's contiguous domains and every rank's RankDomain
        self.domains: Any = None  # the write domains every rank follows (after the layout phase)
        self.own_domain: Any = None  # this rank's RankDomain (contiguous domains)
        self.p2p = None  # the exchange's communicator (a duplicate of comm)
        self.agg_comm = None  # the aggregators' communicator (CKPTIO_WRITE_IO=mpiio)
        self.aggregation: aggregate.AggregatedWrite | None = None
        self.placement_share: Mapping[str, Any] = {}  # this rank's placement share (the whole one on rank 0)
        self.document: dict[str, Any] | None = None  # the planning rank's document, as the commit stores it
        self.typed: CheckpointDocument | None = None  # ... and typed
        self.segment_offsets: Mapping[int, int] = {}  # this rank's segments' first rows, by local index

    @contextlib.contextmanager
    def phase(self, name: str, since: float | None = None) -> Iterator[None]:
        """Local: record the seconds of phase ``name`` in :attr:`timings` when it completes (from ``since``, else
        from entering)."""
        t = time.perf_counter() if since is None else since
        yield
        self.timings[name] = time.perf_counter() - t

    # -------------------------------------------------------------------------------------------- declare
    def declare(self) -> tuple[dict[str, VariablePlan], Mapping[str, Any], str, dict[str, Any]]:
        """Collective: the declare phase and each rank's share: (this rank's plan, its placement, the temporary
        name, the variables' dims/attrs)."""
        request = self.request

        def plan_common(gathered: list[dict[str, Any]]):
            self.plan = plan_globally(request, gathered)
            self.placement = request.backend.place(self.plan.variables, self.plan.stripe_unit, len(gathered))
            io = aggregate.aggregated_io(request.backend)
            if io is not None:
                self.contiguous = aggregate.planned_contiguous(self.placement.rank_spans, self.plan.hosts,
                                                               request.hints, self.plan.stripe_unit,
                                                               request.user_hints)
            # independent transfers for every rank when any rank's MPI-IO would corrupt collective ones (one
            # answer for all: a rank transferring collectively beside one transferring independently hangs)
            hazard = next((h for h in (Declared.of(g).transfer_hazard for g in gathered) if h), None)
            return (plan_headers(self.plan.variables), self.plan.tmp, self.plan.described, self.plan.stripe_unit,
                    io, hazard)

        def shares() -> list[RankShare]:
            nprocs = self.comm.Get_size()
            segments = segment_starts(self.plan.variables, nprocs)
            own = self.contiguous[1] if self.contiguous is not None else [None] * nprocs
            same = self.placement.same_for_all  # (then broadcast once, below)
            return [RankShare(segments[r], None if same else self.placement.shares[r], own[r]) for r in range(nprocs)]

        _faults.point("declare", self.comm)
        with gc_paused():  # the planning rank unpickles and plans every rank's declarations
            headers, tmp, described, self.stripe_unit, self.write_io, self.independent_because = coord.gather_and_plan(
                self.comm, f"{self.where}: declare", lambda: prepare_blocks(request), plan_common)
        share = coord.scatter_from_root(self.comm, f"{self.where}: declare (each rank's share)", shares)
        common = coord.bcast_from_root(self.comm, f"{self.where}: declare (the share every rank has)", lambda: (
            self.placement.shares[0] if self.placement.same_for_all else None))
        self.own_domain = share.write_domain
        self.segment_offsets = share.segments
        if self.plan is not None:  # the planning rank: the whole plan
            self.placement_share = self.placement.whole
            return self.plan.variables, self.placement.whole, tmp, described
        variables = own_plan(headers, [p.decl for p in request.blocks], self.rank, share.segments)
        self.placement_share = share.placement if share.placement is not None else common
        return variables, self.placement_share, tmp, described

    # ----------------------------------------------------------------------------------- create, reserve
    def create(self, tmp: str, variables: Mapping[str, VariablePlan], placement: Mapping[str, Any],
               described: Mapping[str, Any], info) -> None:
        """Collective: the layout, the file, the format's structures, the data's space. With ckptio's own
        collective buffering, the write domains are planned once the file has its layout (the planning rank reads
        it back) and only the write aggregators create the file's handle."""
        request = self.request
        layout, self.domains = coord.bcast_from_root(self.comm, f"{self.where}: set layout",
                                                     lambda: self._layout(tmp))
        self.fs_layout = (tmp, layout)
        _faults.point("create file", self.comm)
        comm = self.comm
        holder = True
        if self.write_io is not None:  # (after an agreed phase, on every rank alike)
            self.p2p = comms.duplicate(self.comm)
            holder = self.rank in self.domains.aggregators
            self.agg_comm = comms.subset(self.comm, holder) if self.write_io == "mpiio" else None
            comm = self.agg_comm
        created: list[WriteHandle] = []

        def create() -> None:
            """Local, in the agreed phase (a setting read here fails every rank alike)."""
            self.writeback_bytes = settings.get("CKPTIO_WRITEBACK_BYTES")
            options = CreateOptions(request.hints, self.stripe_unit, request.attrs, described, self.write_io,
                                    self.independent_because, self.writeback_bytes,
                                    hintsmod.library_rounds(request.hints, self.comm.Get_size()))
            created.append(request.backend.create(tmp, comm, info, variables, placement, options))

        try:
            coord.run(self.comm, f"{self.where}: create file", lambda: create() if holder else None)
        finally:
            self.handle = created[0] if created else None  # also when another rank failed: aborted by the caller
        coord.run(self.comm, f"{self.where}: define the file's structures", lambda: commitmod.held(self.handle,
                                                                                                    "define"))
        if self.rank == commitmod.ROOT:
            for note in self.handle.notes():
                _warn.warn(note, RuntimeWarning)
        # before any collective write: a full file system is one clean error (MPI-IO may hang or lose data)
        coord.bcast_from_root(self.comm, f"{self.where}: reserve space",
                              lambda: space.reserve_space(tmp, self.handle.reserved_ranges(), "its data"))

    def _layout(self, tmp: str) -> tuple[Any, Any]:
        """The planning rank: the empty file with ckptio's stripe layout
        (:func:`ckptio.engine.fslayout.prepare`) and, with
        ckptio's own collective buffering, the write domains over the layout the file system reports for it."""
        record = fslayout.prepare(tmp, self.request.hints)
        if self.write_io is None:
            return record, None
        return record, aggregate.domains_for_file(tmp, record, self.plan.hosts, self.contiguous[0],
                                                  self.request.user_hints)

    def release(self) -> None:
        """Collective, at the end (after the commit or the abort, every rank): free the derived communicators."""
        comms.free(self.agg_comm)
        self.agg_comm = None
        comms.free(self.p2p)
        self.p2p = None

    # ------------------------------------------------------------------------------------------ write
    def write(self, variables: Mapping[str, VariablePlan]) -> RankReport:
        """Collective: the backend's write steps, or ckptio's own collective buffering; then sync; returns this
        rank's report for the index."""
        blocks = self._blocks()
        _faults.point("write data", self.comm)
        io_mark = placement_stats.io_mark()  # what this rank really moves to the file (stats.write.placement)
        if self.write_io is None:  # the backend's own steps; the planning rank's copy of the block tables for users
            started = FileWriteback(self.fs_layout[0], self.writeback_bytes > 0)

            def steps() -> Iterator[Step]:
                """The backend's steps, each followed by the start of the write-back of what the library wrote
                (ckptio.backends.writeback: the storage works while the next variable is copied)."""
                for what, step in self.handle.write(blocks, user_table(variables)[1:] if self.plan is not None
                                                    else None):
                    yield what, lambda step=step: (step(), started.start())

            try:
                run_steps(self.comm, f"{self.where}: write data", steps)
            finally:
                started.close()
        else:
            written_here: list[Any] = []
            share = self.placement_share

            def describe() -> list[tuple[int, np.ndarray]]:
                pieces, written = self.request.backend.placed_pieces(blocks, share)
                written_here.extend(written)
                return pieces

            self.aggregation = aggregate.AggregatedWrite(
                self.comm, self.p2p, self.domains, self.own_domain,
                self.handle.ranges() if self.handle is not None else None, f"{self.where}")
            self.aggregation.run(describe)
        coord.run(self.comm, f"{self.where}: sync data", self._sync_data)
        placement = placement_stats.local_record(io_mark)
        if self.write_io is None:
            written = self.handle.written()
        else:
            written = written_here
            self.timings.update(self.aggregation.seconds)
            extra = self.aggregation.storage_bytes  # the helper thread's writes (not this thread's counter)
            placement["file_bytes"] = (None if extra is None or placement["file_bytes"] is None
                                       else placement["file_bytes"] + extra)
        aggregation = None if self.aggregation is None else {
            **self.aggregation.statistics(), "io": self.write_io,
            "domains": aggregate.describe(self.domains) if self.rank == 0 else None}
        return RankReport(written_columns(written), sum(w.stored_nbytes for w in written), self.timings, placement,
                          aggregation)

    def _sync_data(self) -> None:
        """Local, in the agreed "sync data" phase: the data durable, by the handle's own sync, which never waits for
        other ranks: a format library's file is synced with an ``fsync`` of this rank's own descriptor, not the
        library's collective ``MPI_File_sync`` (:class:`ckptio.backends.writeback.OwnDescriptor`: a write that
        failed on one rank only, EIO or a file size limit on one client, left the others waiting in it); what did not
        land is then found by the planning rank's check (:func:`ckptio.engine.space.missing_data`), on every rank
        alike. The write aggregators' byte-range writers sync as they write."""
        if self.handle is not None:
            self.handle.sync()

    def _blocks(self) -> list[BlockToWrite]:
        """This rank's blocks in declaration order: its declarations, each where it lies in its variable
        (:func:`ckptio.model.rank_plan.own_boxes`, the segments' first rows from this rank's share of the plan), with
        its stored form and codec from the declare phase. The same on the planning rank as on every other: no
        look-up in the plan of every variable."""
        decls = [p.decl for p in self.request.blocks]
        return [BlockToWrite(d["name"], i, box, p.stored, d.get("codec")) for i, (p, d, box) in
                enumerate(zip(self.request.blocks, decls, own_boxes(decls, self.segment_offsets), strict=True))]

    # ------------------------------------------------------------------------------------------ index
    def index(self, variables: Mapping[str, VariablePlan], report: RankReport
              ) -> dict[str, Any] | CheckpointDocument:
        """Collective: the planning rank builds the document from every rank's report (the effective hints are
        asked for inside the phase: an MPI error there is agreed on too) and keeps it (the dict the commit stores,
        and its typed form in :attr:`typed`); every other rank gets its light copy."""
        request = self.request

        def build(reports: list[RankReport]) -> CheckpointDocument:
            inputs = DocumentInputs(request.backend.name, request.backend.format_version, request.hints,
                                    request.attrs, self.plan.described, self.fs_layout, self.plan.prepare_seconds,
                                    request.series_record)
            built = build_index(variables, reports, inputs, self.handle.effective_hints(), self.handle.storage_info())
            self.document = built.document
            self.typed = built.typed()
            return light_copy(self.typed)

        _faults.point("checksum gather", self.comm)
        with gc_paused():
            light = coord.gather_and_plan(self.comm, f"{self.where}: build index", lambda: report, build)
        return self.document if self.plan is not None else light


@without_gc
def write_checkpoint(request: WriteRequest) -> WriteResult:
    """Collective over ``request.comm``: write and commit one checkpoint (the phases of the module docstring).
    Raises the same error on every rank on failure, after removing the temporary file."""
    job = _Job(request)
    t0 = time.perf_counter()
    tmp = None
    info = None
    try:
        with job.phase("declare", since=t0):
            variables, placement, tmp, described = job.declare()
        with job.phase("open"):
            info = hintsmod.to_info(request.hints)
            job.create(tmp, variables, placement, described, info)
        with job.phase("write"):  # (before the index phase: this rank's report carries job.timings)
            report = job.write(variables)
        t = time.perf_counter()
        meta = job.index(variables, report)
        nprocs = job.comm.Get_size()  # the library's collective writes, through min(cb_nodes, nprocs) aggregators
        lost = hintsmod.library_rounds(request.hints, nprocs)[0] if (
            job.write_io is None and hintsmod.collective_write_errors_lost(nprocs)) else 0
        commitmod.commit(job.comm, request.backend, job.handle, tmp, request.path,
                         meta if job.plan is not None else None, request.before_rename, job.typed, errors_lost=lost)
        job.handle = None  # committed and closed: nothing to abort any more
        commit_seconds = time.perf_counter() - t
    except BaseException:
        if tmp is not None:
            commitmod.abort(job.comm, job.handle, tmp)
        raise
    finally:
        job.release()
        if info is not None:
            info.Free()
        request.blocks.clear()
    if job.plan is not None:  # the planning rank: the typed form of the dict the commit stored
        meta = job.typed
    written = meta.stats.write
    stats = WriteStats({**written.seconds, "commit": commit_seconds, "total": time.perf_counter() - t0},
                       written.bytes["total"], written.bytes["min"], written.bytes["max"])
    return WriteResult(meta, stats)


__all__ = ["PendingBlock", "WriteRequest", "WriteResult", "WriteStats", "plan_globally", "prepare_blocks",
           "write_checkpoint"]
