"""What the storage contract suite (:mod:`ckptio.testing.contract`) drives a backend with: the environment it runs
in, the checkpoints it writes, and the write protocol of :mod:`ckptio.backends.base` played step by step without
the engine (as zarr's ``StoreTests`` drive a store).

*Environment.* With a communicator, every process is one rank; every call the contract names collective is made
by every rank, and every step runs inside an agreed phase (:mod:`ckptio.coord`), so a failure on one rank is the
same error on every rank and no rank waits in a collective another one left. Without one (``comm`` None), one
process plays every rank of a job of ``simulated_ranks`` ranks, one write handle per rank, their steps in
lockstep, and makes no MPI call at all (for backends that need no MPI: the in-memory reference backend, a
format written with ``pwrite``).

*Checkpoints.* A :class:`Layout` is every rank's declarations, a function of the rank count and of the backend's
capabilities (so every rank knows every rank's blocks and the values a read must return): N-d blocks on several
ranks (several per rank, one a strided view), a 3-D variable cut along its last axis, per-rank segments (an
empty one too), a 0-d variable, zero-size blocks, a variable with no elements, the optional dtypes the backend
supports, a big-endian one, compressed blocks where the backend compresses, and, with more than one rank, a rank
with no block at all. Values are random bit patterns (NaN payloads, negative zeros): a round trip must be
bit-identical.

*Protocol.* :func:`run_protocol` makes the calls of the write side in the documented order (declare -> place ->
create -> define -> reserved_ranges -> write steps -> written -> sync -> storage_info / effective_hints ->
document_slot -> write_document steps -> sync -> mark_complete steps -> sync -> close), building the document
with the engine's own pure builder (:func:`ckptio.engine.index.build_document`), so a backend that validates
documents gets what the engine gives it. It checks each answer as it goes and can stop after any stage.
"""

from __future__ import annotations

import math
import os
import socket
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ckptio import codec as codecs
from ckptio import coord, memsel, placement_stats, varmeta
from ckptio import hints as hintsmod
from ckptio import meta as metamod
from ckptio.backends.base import Backend, BlockToWrite, CreateOptions, DocumentSlot, Placement, Step, WriteHandle
from ckptio.block_table import user_table
from ckptio.engine.index import DocumentInputs, build_document, written_columns
from ckptio.engine.steps import run_steps
from ckptio.plan import (
    VariablePlan,
    declaration,
    own_plan,
    pack_declarations,
    plan_headers,
    plan_packed,
    segment_starts,
)

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
            steps = coord.run(self.comm, f"{phase}: the backend's steps", lambda: make(self.comm.Get_rank()))
            return run_steps(self.comm, phase, steps)
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

    def open_info(self) -> Any:
        """The MPI info of the hints (None without MPI); :meth:`free_info` after use."""
        return None if self.comm is None else hintsmod.to_info(self.hints)

    def free_info(self, info: Any) -> None:
        if info is not None:
            info.Free()


# ------------------------------------------------------------------------------------------ checkpoints
def values(name: str, shape: tuple[int, ...], dtype: str, smooth: bool = False) -> np.ndarray:
    """The global values of a variable: random bit patterns (``smooth``: a compressible ramp), the same on every
    rank and in every run."""
    dt = np.dtype(dtype)
    n = math.prod(shape)
    if smooth:
        return (np.arange(n) % 17).astype(dt).reshape(shape)
    raw = np.random.default_rng(zlib.crc32(name.encode())).integers(0, 256, n * dt.itemsize, dtype=np.uint8)
    return (raw % 2 if dt.kind == "b" else raw).view(dt).reshape(shape)


def split(n: int, parts: int, index: int) -> tuple[int, int]:
    """[start, end) of piece ``index`` of ``n`` in ``parts`` uneven pieces."""
    weights = [i % 3 + 1 for i in range(parts)]
    bounds = [sum(weights[:i]) * n // sum(weights) for i in range(parts + 1)]
    return bounds[index], bounds[index + 1]


@dataclass(frozen=True)
class Declared:
    """One block one rank declares, as ``Writer.write`` would: the array and where it goes (``offset`` and
    ``global_shape`` None: a per-rank segment)."""

    var: str
    data: np.ndarray
    offset: tuple[int, ...] | None = None
    global_shape: tuple[int, ...] | None = None


@dataclass
class Layout:
    """One checkpoint of the suite: every rank's declarations, the global values, attributes, descriptions."""

    nprocs: int
    expected: dict[str, np.ndarray] = field(default_factory=dict)  # every variable's global values
    blocks: list[list[Declared]] = field(default_factory=list)  # per rank
    attrs: dict[str, Any] = field(default_factory=dict)
    described: dict[str, dict[str, Any]] = field(default_factory=dict)
    compression: dict[str, tuple[str, int]] = field(default_factory=dict)  # variable -> (codec, level)

    def __post_init__(self) -> None:
        self.blocks = [[] for _ in range(self.nprocs)]

    def variable(self, name: str, shape: tuple[int, ...], dtype: str, smooth: bool = False) -> np.ndarray:
        self.expected[name] = values(name, shape, dtype, smooth)
        return self.expected[name]

    def block(self, rank: int, name: str, data: np.ndarray, offset: tuple[int, ...]) -> None:
        self.blocks[rank].append(Declared(name, data, offset, self.expected[name].shape))

    def segment(self, rank: int, name: str, rows: np.ndarray) -> None:
        self.blocks[rank].append(Declared(name, rows))


# The checkpoint's attributes: each kind of JSON value; the backend's check_attr decides about the unusual ones
ATTRS = {"step": 7, "time": 0.25, "name": "contract", "flags": [1, 2, 3], "on": True, "mixed": ["a", 1.5],
         "nothing": None}
UNUSUAL_ATTRS = {"nested": [[1, 2], ["a", None]], "nul": "a\x00b", "surrogate": "\udc80", "long": list(range(8200)),
                 "empty_list": [], "big": 2**62, "nan": float("nan")}


def storable_attrs(backend: Backend) -> dict[str, Any]:
    """:data:`ATTRS` and those of :data:`UNUSUAL_ATTRS` that ``check_attr`` accepts (a refusal must be a
    CapabilityError, checked by the contract's capability case), normalized as the Writer does."""
    from ckptio.errors import CapabilityError

    out = dict(ATTRS)
    for key, value in UNUSUAL_ATTRS.items():
        try:
            backend.check_attr(key, value)
        except CapabilityError:
            continue
        out[key] = value
    return metamod.normalize_attrs(out)


def standard_layout(nprocs: int, backend: Backend) -> Layout:
    """The suite's main checkpoint (see the module docstring); with more than one rank, the last has no block."""
    caps = backend.capabilities
    writers = max(1, nprocs - 1)
    lay = Layout(nprocs, attrs=storable_attrs(backend))
    plane = lay.variable("plane", (64, 40), "<f8")
    lay.described["plane"] = varmeta.declare("plane", 2, ["y", "x"], {"units": "m"}, 0)
    cube = lay.variable("cube", (3, 4, 5 * writers + 1), "<i4")
    for w in range(writers):
        lo, hi = split(64, writers, w)
        mid = (lo + hi) // 2
        halo = np.zeros((mid - lo + 2, 42), plane.dtype)
        halo[1:-1, 1:-1] = plane[lo:mid]
        lay.block(w, "plane", halo[1:-1, 1:-1], (lo, 0))  # a strided view, written in place
        lay.block(w, "plane", plane[mid:hi].copy(), (mid, 0))
        lay.block(w, "plane", plane[lo:lo].copy(), (lo, 0))  # a zero-size block
        a, b = split(cube.shape[2], writers, w)
        lay.block(w, "cube", cube[:, :, a:b].copy(), (0, 0, a))
    lay.block(0, "scalar", lay.variable("scalar", (), "<f8").copy(), ())
    lay.block(0, "empty", lay.variable("empty", (0, 3), "<f4").copy(), (0, 0))
    optional = {"flags": ("|b1", caps.bool_dtype), "wave": ("<c8", caps.complex_dtypes), "half": ("<f2", caps.float16),
                "counts": ("<u2", caps.unsigned_dtypes), "big": (">i4", True)}
    for name, (dtype, supported) in optional.items():
        if supported:
            g = lay.variable(name, (3 * writers,), dtype)
            for w in range(writers):
                lay.block(w, name, g[3 * w:3 * w + 3].copy(), (3 * w,))
    if caps.segments:
        lengths = [(2, 0, 3, 1)[w % 4] for w in range(writers)]
        rows = lay.variable("particles", (sum(lengths), 2), "<f4")
        for w in range(writers):
            start = sum(lengths[:w])
            lay.segment(w, "particles", rows[start:start + lengths[w]].copy())
    if caps.compression:
        packed = lay.variable("packed", (50 * writers,), "<f8", smooth=True)
        lay.compression["packed"] = ("zstd", 1)
        for w in range(writers):
            lay.block(w, "packed", packed[50 * w:50 * w + 50].copy(), (50 * w,))
    return lay


def last_rank_layout(nprocs: int, backend: Backend) -> Layout:
    """Only the last rank has blocks (the planning rank none): every rank must still make the same steps."""
    lay = Layout(nprocs, attrs={"step": 1})
    lay.block(nprocs - 1, "line", lay.variable("line", (10,), "<i8").copy(), (0,))
    lay.block(nprocs - 1, "scalar", lay.variable("scalar", (), "<f8").copy(), ())
    return lay


def attrs_only_layout(nprocs: int, backend: Backend) -> Layout:
    """No variable at all, only attributes."""
    return Layout(nprocs, attrs={"step": 2, "note": "no variables"})


@dataclass
class Prepared:
    """One rank's blocks as the engine's declare phase leaves them: each declaration (with its checksum, and its
    stored size and codec when compressed) and what is handed to ``write`` (the elements, a strided view kept as
    a view, or the compressed bytes)."""

    decls: list[dict[str, Any]]
    stored: list[np.ndarray]


def prepare(layout: Layout, rank: int) -> Prepared:
    """Local: rank ``rank``'s declarations of ``layout``, prepared as :func:`ckptio.engine.write.prepare_blocks`."""
    out = Prepared([], [])
    for b in layout.blocks[rank]:
        data = memsel.gathered(b.data)
        decl = {**declaration(b.var, data, b.offset, b.global_shape, rank), "checksum": memsel.checksum(data)}
        if b.var in layout.compression:
            codec, level = layout.compression[b.var]
            data = np.frombuffer(codecs.compress(np.ascontiguousarray(data), codec, level), np.uint8)
            decl = {**decl, "stored_nbytes": int(data.nbytes), "codec": f"{codec}:{level}"}
        out.decls.append(decl)
        out.stored.append(data)
    return out


def whole_plan(layout: Layout) -> dict[str, VariablePlan]:
    """Pure, any rank: the write plan of every rank's blocks (what the planning rank plans)."""
    return plan_packed([pack_declarations(prepare(layout, r).decls) for r in range(layout.nprocs)])


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

    def plan(packs: list[Any]) -> Any:
        planning.variables = plan_packed(packs)
        planning.placement = backend.place(planning.variables, STRIPE_UNIT, nprocs)
        expect(isinstance(planning.placement, Placement) and len(planning.placement.shares) == nprocs,
               f"place() must return a Placement with one share per rank ({nprocs}): got {planning.placement!r}")
        return plan_headers(planning.variables)

    headers = env.gather_and_plan("declare: plan and place", lambda r: pack_declarations(prepared[r].decls), plan)
    shares = env.scatter_from_root("declare: each rank's share", lambda: [
        _Share(s, planning.placement.shares[r]) for r, s in enumerate(segment_starts(planning.variables, nprocs))])
    variables = env.each("declare: each rank's plan", lambda r: planning.variables if r == ROOT else
                         own_plan(headers, prepared[r].decls, r, shares[r].segments))
    options = CreateOptions(env.hints, STRIPE_UNIT, layout.attrs, layout.described)
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

    def report(r: int) -> dict[str, Any]:
        record = ({"host": socket.gethostname(), "file_bytes": None} if env.comm is None
                  else placement_stats.local_record(marks[r]))
        return {"written": written_columns(written[r]), "bytes": sum(int(w.stored_nbytes) for w in written[r]),
                "timings": {}, "placement": record}

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
        run.document = metamod.dumps(build_document(planning.variables, reports, inputs, effective, storage))
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
