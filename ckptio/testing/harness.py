"""What the storage contract suite (:mod:`ckptio.testing.contract`) drives a backend with: the environment it runs
in, and the write protocol of :mod:`ckptio.backends.base` played call by call without the engine (as zarr's
``StoreTests`` drive a store).

*Environment.* With a communicator, every process is one rank; every call the contract names collective is made
by every rank, and every step runs inside an agreed phase (:mod:`ckptio.coord`), so a failure on one rank is the
same error on every rank and no rank waits in a collective another one left. Without one (``comm`` None), one
process plays every rank of a job of ``simulated_ranks`` ranks, one write handle per rank, their steps in
lockstep, and makes no MPI call at all (for backends that need no MPI: the in-memory reference backend, a
format written with ``pwrite``).

*Protocol.* :func:`run_protocol` makes the calls of the write side in the documented order (declare -> place ->
create -> define -> reserved_ranges -> write steps -> written -> sync -> storage_info / effective_hints ->
document_slot -> write_document steps -> sync -> mark_complete steps -> sync -> close) for a checkpoint of
:mod:`ckptio.testing.layouts`, building the document with the engine's own pure builder
(:func:`ckptio.engine.index.build_index`), so a backend that validates documents gets what the engine gives
it. It checks each answer as it goes and can stop after any stage; :func:`committed` also reads the document
back.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ckptio import coord
from ckptio.backends.base import (
    Backend,
    BlockToWrite,
    CreateOptions,
    DocumentSlot,
    Placement,
    Step,
    WriteHandle,
    stored_document_of,
)
from ckptio.coord import hints as hintsmod
from ckptio.engine import placement_stats
from ckptio.engine.index import DocumentInputs, RankReport, build_index, written_columns
from ckptio.engine.steps import run_steps
from ckptio.errors import CheckpointError
from ckptio.model import meta as metamod
from ckptio.model.block_table import user_table
from ckptio.model.plan import pack_declarations, plan_packed
from ckptio.model.rank_plan import own_plan, plan_headers, segment_starts
from ckptio.model.variable_plan import VariablePlan
from ckptio.testing.layouts import Layout, Prepared, prepare, standard_layout, whole_plan

ROOT = 0  # the planning rank (as the engine's)
STRIPE_UNIT = 4096  # small, so that the suite's few KiB per rank cross stripe boundaries
SIMULATED_IO_COMPONENT = "none (ranks simulated in one process by ckptio.testing.contract, no MPI)"


class ContractViolation(AssertionError):
    """A backend did not do what the storage contract says."""


def expect(condition: object, message: str) -> None:
    """Raise :class:`ContractViolation` with ``message`` unless ``condition`` holds (not ``assert``: the suite
    must check under ``python -O`` too)."""
    if not condition:
        raise ContractViolation(message)


class Files(Protocol):
    """Raw access to the files a backend writes (zarr's ``StoreTests.get``/``set``): the suite reads a file's
    leading bytes, and writes damaged copies, through it."""

    def read(self, path: str) -> bytes: ...

    def write(self, path: str, data: bytes) -> None: ...


class OSFiles:
    """Files on the file system."""

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def write(self, path: str, data: bytes) -> None:
        with open(path, "wb") as f:
            f.write(data)


OS_FILES = OSFiles()


@dataclass
class Environment:
    """Where the suite runs: the backend (a factory, called once), the communicator (None: one process playing
    ``simulated_ranks`` ranks, no MPI), a directory every rank sees, and raw access to the files."""

    make_backend: Callable[[], Backend]
    comm: Any
    directory: str
    simulated_ranks: int = 3
    files: Files = OS_FILES
    backend: Backend = field(init=False)
    hints: dict[str, str] = field(init=False)  # as the Writer resolves them (ROMIO's only where MPI says so)
    cache: dict[str, Any] = field(init=False, default_factory=dict)  # what several cases share (a checkpoint)

    def __post_init__(self) -> None:
        self.backend = self.make_backend()
        self.hints = hintsmod.resolve_hints(self.nprocs, {}, romio=False if self.comm is None else None)
        for key, value in self.backend.extra_hints.items():
            self.hints.setdefault(key, value)

    @property
    def nprocs(self) -> int:
        return self.comm.Get_size() if self.comm is not None else self.simulated_ranks

    @property
    def ranks(self) -> list[int]:
        """The ranks this process plays."""
        return [self.comm.Get_rank()] if self.comm is not None else list(range(self.simulated_ranks))

    @property
    def prints(self) -> bool:
        return self.comm is None or self.comm.Get_rank() == ROOT

    def path(self, name: str) -> str:
        return os.path.join(self.directory, f"{name}_{self.backend.name}_{self.nprocs}")

    # Each of the following is one agreed phase with a communicator (collective: every rank calls it).
    def each(self, phase: str, fn: Callable[[int], Any]) -> dict[int, Any]:
        """``fn(rank)`` for every rank this process plays: {rank: result}."""
        if self.comm is None:
            return {r: fn(r) for r in self.ranks}
        rank = self.comm.Get_rank()
        return {rank: coord.run(self.comm, phase, lambda: fn(rank))}

    def once(self, phase: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` once in this process (local work every rank does, such as a pure check), agreed."""
        return fn() if self.comm is None else coord.run(self.comm, phase, fn)

    def on_root(self, phase: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the planning rank; its result (or its error) on every rank."""
        return fn() if self.comm is None else coord.bcast_from_root(self.comm, phase, fn, root=ROOT)

    def gather_and_plan(self, phase: str, local: Callable[[int], Any], plan: Callable[[list[Any]], Any]) -> Any:
        """Every rank's ``local(rank)``, joined by ``plan`` on the planning rank; its result on every rank."""
        if self.comm is None:
            return plan([local(r) for r in self.ranks])
        rank = self.comm.Get_rank()
        return coord.gather_and_plan(self.comm, phase, lambda: local(rank), plan, root=ROOT)

    def scatter_from_root(self, phase: str, payloads: Callable[[], list[Any]]) -> dict[int, Any]:
        """One payload per rank, made on the planning rank; each rank receives only its own: {rank: payload}."""
        if self.comm is None:
            made = payloads()
            return {r: made[r] for r in self.ranks}
        return {self.comm.Get_rank(): coord.scatter_from_root(self.comm, phase, payloads, root=ROOT)}

    def steps(self, phase: str, make: Callable[[int], Iterable[Step]]) -> int:
        """Run the backend's steps ``make(rank)`` of every rank, one at a time (with a communicator: the engine's
        :func:`~ckptio.engine.steps.run_steps`, each step agreed); the number of steps. Every rank must make the
        same number: otherwise a ContractViolation (a CheckpointError from the engine) on every rank."""
        if self.comm is not None:
            return run_steps(self.comm, phase, lambda: make(self.comm.Get_rank()))
        running = {r: iter(make(r)) for r in self.ranks}
        done = 0
        while True:
            current = {r: next(it, None) for r, it in running.items()}
            finished = sorted(r for r, step in current.items() if step is None)
            if len(finished) == len(current):
                return done
            expect(not finished, f"{phase}: rank(s) {finished} made {done} step(s), rank(s) "
                                 f"{sorted(set(current) - set(finished))} more: every rank must make the same steps")
            for step in current.values():
                step[1]()
            done += 1

    def open_info(self, read: bool = False) -> Any:
        """The MPI info of the hints (None without MPI); ``read``: those of the restart aggregators' collective open
        (``coord.hints.read_hints``). :meth:`free_info` after use."""
        if self.comm is None:
            return None
        return hintsmod.to_info(hintsmod.read_hints(self.hints) if read else self.hints)

    def free_info(self, info: Any) -> None:
        if info is not None:
            info.Free()


# ------------------------------------------------------------------------------------------ the protocol
STAGES = ("created", "written", "documented", "committed")


@dataclass
class Run:
    """A checkpoint the suite wrote: its path and layout, the open handles (until closed or aborted) and, on the
    planning rank, the encoded document and the byte ranges reserved after ``define``."""

    path: str
    layout: Layout
    handles: dict[int, WriteHandle] = field(default_factory=dict)
    document: bytes | None = None
    reserved: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class _Planning:
    """The planning rank's whole plan and placement."""

    variables: dict[str, VariablePlan] = field(default_factory=dict)
    placement: Placement | None = None


@dataclass(frozen=True)
class _Share:
    """What one rank receives of the plan: its segments' first rows and its share of the placement."""

    segments: dict[int, int]
    placement: Mapping[str, Any]


def checked_ranges(ranges: Any, what: str) -> list[tuple[int, int]]:
    """``reserved_ranges()``'s answer, checked: a list of ``(start, end)`` integers with ``0 <= start <= end``."""
    expect(isinstance(ranges, list), f"{what}: reserved_ranges() returned {type(ranges).__name__}, not a list")
    out = []
    for r in ranges:
        ok = isinstance(r, tuple | list) and len(r) == 2 and all(isinstance(x, int | np.integer) for x in r)
        expect(ok and 0 <= r[0] <= r[1], f"{what}: reserved range {r!r} is not (start, end) with 0 <= start <= end")
        out.append((int(r[0]), int(r[1])))
    return out


def _check_written(written: Any, blocks: list[BlockToWrite]) -> list[Any]:
    expect(isinstance(written, list) and len(written) == len(blocks),
           f"written() must describe each of the {len(blocks)} block(s) given to write(), in order: got {written!r}")
    for w, b in zip(written, blocks, strict=True):
        where = f"written() for block {b.local_index} of {b.var!r}"
        expect(int(w.stored_nbytes) == int(b.data.nbytes),
               f"{where}: stored_nbytes {w.stored_nbytes}, but {b.data.nbytes} bytes were handed to write()")
        expect(w.codec == b.codec, f"{where}: codec {w.codec!r}, the block's is {b.codec!r}")
        expect(w.file_offset is None or int(w.file_offset) >= 0, f"{where}: file offset {w.file_offset!r}")
    return written


def _blocks(variables: Mapping[str, VariablePlan], prepared: Prepared, rank: int) -> list[BlockToWrite]:
    """This rank's blocks in declaration order, with their variable and box from the plan (the engine's
    ``_Job._blocks``)."""
    by_index = {b.local_index: (name, b) for name, v in variables.items() for b in v.blocks_of(rank)}
    return [BlockToWrite(by_index[i][0], i, by_index[i][1].box, data, by_index[i][1].codec)
            for i, data in enumerate(prepared.stored)]


def run_protocol(env: Environment, name: str, layout: Layout, stop: str = "committed") -> Run:
    """Collective: write ``layout`` as the checkpoint ``env.path(name)`` through the backend's methods in the
    documented order, checking each answer; stop after stage ``stop`` (:data:`STAGES`: the handles are then left
    open for the caller to close or abort). On any failure every rank aborts its handle and the same error is
    raised on every rank."""
    run = Run(env.path(name), layout)
    info = env.open_info()
    try:
        _play(env, run, stop, info)
    except BaseException:
        for handle in run.handles.values():
            try:
                handle.abort()
            except BaseException:  # best effort; the first failure is the one reported
                pass
        run.handles.clear()
        raise
    finally:
        env.free_info(info)
    return run


def _play(env: Environment, run: Run, stop: str, info: Any) -> None:
    backend, layout, nprocs = env.backend, run.layout, env.nprocs
    prepared = env.each("declare: prepare the blocks", lambda r: prepare(layout, r))
    planning = _Planning()

    def plan(messages: list[Any]) -> Any:
        packs = [pack for pack, _ in messages]
        planning.variables = plan_packed(packs)
        planning.placement = backend.place(planning.variables, STRIPE_UNIT, nprocs)
        expect(isinstance(planning.placement, Placement) and len(planning.placement.shares) == nprocs,
               f"place() must return a Placement with one share per rank ({nprocs}): got {planning.placement!r}")
        # as the engine: independent transfers for all when any rank's MPI-IO would corrupt collective ones
        return plan_headers(planning.variables), next((h for _, h in messages if h), None)

    headers, hazard = env.gather_and_plan("declare: plan and place", lambda r: (
        pack_declarations(prepared[r].decls), None if env.comm is None else hintsmod.collective_write_hazard()), plan)
    shares = env.scatter_from_root("declare: each rank's share", lambda: [
        _Share(s, planning.placement.shares[r]) for r, s in enumerate(segment_starts(planning.variables, nprocs))])
    variables = env.each("declare: each rank's plan", lambda r: planning.variables if r == ROOT else
                         own_plan(headers, prepared[r].decls, r, shares[r].segments))
    options = CreateOptions(env.hints, STRIPE_UNIT, layout.attrs, layout.described, independent_because=hazard)
    env.each("create", lambda r: run.handles.update({r: backend.create(
        run.path, env.comm, info, variables[r], planning.placement.whole if r == ROOT else shares[r].placement,
        options)}))
    env.each("define", lambda r: run.handles[r].define())
    env.each("notes", lambda r: expect(all(isinstance(n, str) for n in run.handles[r].notes()),
                                       "notes() must be a list of strings"))
    run.reserved = env.on_root("reserved ranges after define", lambda: checked_ranges(
        run.handles[ROOT].reserved_ranges(), "after define()"))
    if stop == "created":
        return
    blocks = env.each("the blocks to write", lambda r: _blocks(variables[r], prepared[r], r))
    tables = env.each("the block tables", lambda r: user_table(planning.variables)[1:] if r == ROOT else None)
    marks = env.each("I/O mark", lambda r: None if env.comm is None else placement_stats.io_mark())
    env.steps("write the data", lambda r: run.handles[r].write(blocks[r], tables[r]))
    written = env.each("written", lambda r: _check_written(run.handles[r].written(), blocks[r]))
    env.each("sync the data", lambda r: run.handles[r].sync())
    if stop == "written":
        return

    def report(r: int) -> RankReport:
        record = ({"host": socket.gethostname(), "file_bytes": None} if env.comm is None
                  else placement_stats.local_record(marks[r]))
        return RankReport(written_columns(written[r]), sum(int(w.stored_nbytes) for w in written[r]), {}, record)

    def build(reports: list[Any]) -> DocumentSlot:
        handle = run.handles[ROOT]
        effective, storage = handle.effective_hints(), handle.storage_info()
        expect(isinstance(effective, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in effective.items()),
               f"effective_hints() must map hint names to strings: {effective!r}")
        expect(isinstance(storage, dict) and set(storage) <= set(planning.variables)
               and all(isinstance(v, dict) for v in storage.values()),
               f"storage_info() must map some of the variables to dicts: {storage!r}")
        inputs = DocumentInputs(backend.name, backend.format_version, env.hints, layout.attrs, layout.described,
                                io_component=SIMULATED_IO_COMPONENT if env.comm is None else None)
        run.document = metamod.dumps(build_index(planning.variables, reports, inputs, effective, storage).typed())
        return DocumentSlot(len(run.document), metamod.checksum(run.document))

    slot = env.gather_and_plan("index: build the document", report, build)
    env.each("document_slot", lambda r: run.handles[r].document_slot(slot))
    env.on_root("reserved ranges after document_slot", lambda: expect(
        sum(b - a for a, b in checked_ranges(run.handles[ROOT].reserved_ranges(), "after document_slot()"))
        >= slot.nbytes, f"reserved_ranges() after document_slot() must cover the document's {slot.nbytes} bytes"))
    env.steps("write the document", lambda r: run.handles[r].write_document(run.document if r == ROOT else None))
    env.each("sync the document", lambda r: run.handles[r].sync())
    if stop == "documented":
        return
    env.steps("write the completion mark", lambda r: run.handles[r].mark_complete(r == ROOT))
    env.each("sync the completion mark", lambda r: run.handles[r].sync())
    env.each("close", lambda r: run.handles[r].close())
    run.handles.clear()


# ----------------------------------------------------------------------------- committing, closing
@dataclass
class Committed:
    """A checkpoint the suite committed: the run, the document as read back (every rank) and the whole plan."""

    run: Run
    document: Any
    plan: dict[str, VariablePlan]


def _first_difference(a: bytes, b: bytes) -> str:
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"{len(a)} bytes written, {len(b)} read back, first difference at byte {at}: {a[at:at + 60]!r} vs " \
           f"{b[at:at + 60]!r}"


def committed(env: Environment, name: str = "checkpoint", make_layout=standard_layout) -> Committed:
    """Collective: the checkpoint ``name`` of ``make_layout`` written through the whole protocol and its document
    read back on the planning rank (byte-identical to the one written); once per environment."""
    if name not in env.cache:
        layout: Layout = make_layout(env.nprocs, env.backend)
        run = run_protocol(env, name, layout)

        def read_back() -> Any:
            document = env.backend.read_document(run.path)
            again = metamod.dumps(document)
            if again != run.document:
                raise ContractViolation("read_document() did not return the document written: "
                                        + _first_difference(run.document, again))
            stored = stored_document_of(env.backend, run.path)
            if stored is not None and stored != run.document:
                raise ContractViolation("stored_document() did not return the bytes written: "
                                        + _first_difference(run.document, bytes(stored)))
            return document

        document = env.on_root("read_document", read_back)
        env.cache[name] = Committed(run, document, env.once("the whole plan", lambda: whole_plan(layout)))
    return env.cache[name]


def expect_refused(backend: Backend, path: str, error: type[CheckpointError], why: str) -> None:
    """``read_document(path)`` must raise ``error`` (a CheckpointError), since ``why``; so must
    ``stored_document(path)`` where the backend has one (the commit's last check relies on it)."""
    for method in ("read_document", "stored_document"):
        try:
            got = backend.read_document(path) if method == "read_document" else stored_document_of(backend, path)
        except error:
            continue
        except CheckpointError as exc:
            raise ContractViolation(f"{method}() of {why} raised {type(exc).__name__} ({exc}), not "
                                    f"{error.__name__}") from exc
        if method == "read_document" or got is not None:
            raise ContractViolation(f"{method}() accepted {why}")


def finish(env: Environment, run: Run, how: str) -> None:
    """Collective: ``close`` (or ``abort``, twice: it must never raise) every open handle of ``run``."""
    calls = (lambda h: h.close()) if how == "close" else (lambda h: (h.abort(), h.abort()))
    try:
        env.each(how, lambda r: calls(run.handles[r]))
    except BaseException:
        for handle in run.handles.values():
            try:
                handle.abort()
            except BaseException:
                pass
        raise
    finally:
        run.handles.clear()
