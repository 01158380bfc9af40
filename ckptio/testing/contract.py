"""The storage contract suite: what every backend must do for ckptio, checked by driving its methods directly.

ckptio's engine runs one write protocol and one commit protocol for every file format over the storage contract
of :mod:`ckptio.backends.base`. This suite checks a backend against that contract as zarr's ``StoreTests``
check a store: it calls the backend's methods itself, in the documented order, from the ranks the contract
names, with no engine in between (``ckptio.testing.harness`` plays the protocol), and checks what each call
promises: the document read back is the one written, byte for byte; the extents cover exactly the declared data
and read back bit-identically through both readers, every block's checksum verified; the space reserved before
the data covers every byte of it; a file without the completion mark is incomplete; ``abort`` never raises and
leaves nothing readable; every rank makes the same number of steps, also when only one rank has blocks;
``sniff`` knows its own files from others'; ``check_dtype`` and ``check_attr`` refuse exactly what the
capabilities say; what ``place`` gives a rank does not grow with the number of ranks unless its blocks do.

Run it (``CASE <name> PASS`` or ``CASE <name> FAIL <reason>`` per case, then ``SUMMARY``; every case's outcome is
agreed over the ranks, so a failing case never leaves another rank waiting)::

    mpirun -n 4 python -m ckptio.testing.contract --backend NAME --outdir DIR   # each process one rank
    python -m ckptio.testing.contract --backend NAME --outdir DIR --ranks 3      # one process plays 3, no MPI

or in pytest, one test per case, in one process and without MPI (a format that needs MPI to write runs under
mpirun instead)::

    from ckptio.testing.contract import StorageContractTests

    class TestMyFormat(StorageContractTests):
        backend_class = MyFormatBackend

The in-memory reference backend (``ckptio.testing.memory``) passes it in a few milliseconds per case.
"""

from __future__ import annotations

import argparse
import itertools
import os
import pickle
import sys
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from ckptio import coord, settings
from ckptio.backends import registry
from ckptio.backends.base import Backend, ExtentReader
from ckptio.engine.space import coalesce
from ckptio.errors import CapabilityError, CheckpointError, IncompleteCheckpointError
from ckptio.model import memsel
from ckptio.model.declared import declaration
from ckptio.model.plan import Extent, pack_declarations, plan_packed
from ckptio.model.variable_plan import VariablePlan
from ckptio.testing.harness import (
    OS_FILES,
    ROOT,
    STRIPE_UNIT,
    Committed,
    ContractViolation,
    Environment,
    Files,
    OSFiles,
    committed,
    expect,
    expect_refused,
    finish,
    run_protocol,
)
from ckptio.testing.layouts import ATTRS, UNUSUAL_ATTRS, Layout, attrs_only_layout, last_rank_layout, standard_layout

Case = Callable[[Environment], None]
CASES: list[tuple[str, Case]] = []


def case(fn: Case) -> Case:
    """Register a case. Every case is collective: every rank calls it with its environment, and every failure
    inside it is agreed (the environment's phases), so all ranks leave it together."""
    CASES.append((fn.__name__, fn))
    return fn


# ------------------------------------------------------------------------------------------ checks
def check_extents(backend: Backend, document: Any, plan: dict[str, VariablePlan]) -> list[Extent]:
    """Pure: ``extents`` and ``extent_table`` describe exactly the declared data: sorted by file offset and
    disjoint in the file; per variable, boxes inside its shape that tile it exactly (none for a variable without
    elements, one for a 0-d variable), each of its stored size; every non-empty block verified by exactly one
    extent, with its box and checksum."""
    extents = backend.extents(document)
    expect(isinstance(extents, list), f"extents() returned {type(extents).__name__}, not a list")
    for a, b in itertools.pairwise(extents):
        expect(a.file_offset + a.nbytes <= b.file_offset,
               f"extents must be sorted by file offset and disjoint: {a.var!r} at {a.file_offset}+{a.nbytes}, then "
               f"{b.var!r} at {b.file_offset}")
    for name, var in plan.items():
        mine = [e for e in extents if e.var == name]
        itemsize = np.dtype(var.dtype).itemsize
        for e in mine:
            expect(e.box.within(var.shape) and e.box.size > 0, f"{name!r}: extent box {e.box} outside {var.shape}")
            expect(e.codec is not None or e.nbytes == e.box.size * itemsize,
                   f"{name!r}: extent {e.box} stores {e.nbytes} bytes for {e.box.size} elements of {itemsize} bytes")
            for other in mine:
                expect(other is e or e.box.intersect(other.box) is None, f"{name!r}: extents {e.box} and "
                       f"{other.box} overlap")
        expect(sum(e.box.size for e in mine) == var.nbytes // itemsize,
               f"{name!r}: the extents hold {sum(e.box.size for e in mine)} elements of the {var.nbytes // itemsize}")
        declared = {i: b for i, b in enumerate(var.blocks) if b.box.size > 0}
        verified = sorted(v[0] for e in mine for v in e.verify)
        expect(verified == sorted(declared), f"{name!r}: blocks {verified} verified by the extents, not each of "
                                             f"{sorted(declared)} once")
        for e in mine:
            for index, box, checksum in e.verify:
                want = declared[index]
                expect(box == want.box and checksum == want.checksum and box.intersect(e.box) == box,
                       f"{name!r}: extent {e.box} verifies block {index} as {box} {checksum}; it is {want.box} "
                       f"{want.checksum}")
    expect({e.var for e in extents} <= set(plan), f"extents of undeclared variables: {[e.var for e in extents]}")
    table = backend.extent_table(document)
    expect(len(table) == len(extents), f"extent_table() has {len(table)} rows, extents() {len(extents)}")
    for i, e in enumerate(extents):
        t = table.extent(i)
        expect((t.var, t.box, t.file_offset, t.nbytes, t.codec, set(t.verify))
               == (e.var, e.box, e.file_offset, e.nbytes, e.codec, set(e.verify)),
               f"extent_table() row {i} is {t}, extents()[{i}] is {e}")
    return extents


def check_read(reader: ExtentReader, extents: list[Extent], layout: Layout, plan: dict[str, VariablePlan]) -> None:
    """Local (collective when the reader is): ``reader.read`` returns each extent's values bit-identically,
    shaped like its box, in the declared dtype in native byte order; every block each extent verifies has its
    declared checksum. A collective reader reads once (every rank the same number of calls); an independent one
    reads half the extents into slot 0 and half into slot 1, and the first half must still hold after the
    second read."""
    halves = [extents[::2], extents[1::2]] if reader.independent else [extents]
    results = [reader.read(part, slot) for slot, part in enumerate(halves)]
    for part, (arrays, calls) in zip(halves, results, strict=True):
        expect(len(arrays) == len(part) and isinstance(calls, int),
               f"read() returned {len(arrays)} arrays for {len(part)} extents ({calls} calls)")
        for e, got in zip(part, arrays, strict=True):
            declared = np.dtype(plan[e.var].dtype)
            want = layout.expected[e.var][tuple(slice(o, o + n) for o, n in zip(e.box.offset, e.box.shape,
                                                                                 strict=True))]
            where = f"{e.var!r} extent {e.box} at {e.file_offset}"
            expect(got.shape == e.box.shape and got.dtype == declared.newbyteorder("="),
                   f"{where}: read {got.dtype}{got.shape}, not {declared.newbyteorder('=')}{e.box.shape}")
            expect(np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want, dtype=got.dtype).tobytes(),
                   f"{where}: the values read back differ from those written")
            for index, box, checksum in e.verify:
                part_of_block = np.ascontiguousarray(got[box.relative_to(e.box)], dtype=declared)
                expect(memsel.checksum(part_of_block) == checksum,
                       f"{where}: block {index} does not match its checksum")


def read_everything(env: Environment, c: Committed, collective: bool) -> None:
    """Collective: every extent read back and checked (:func:`check_read`): by ``open_extents`` (``collective``),
    or by ``serial_extents`` on the planning rank. As the engine does: with ``CKPTIO_READ_IO=mpiio`` every rank
    opens together (the communicator, the hints of ``coord.hints.read_hints``), each reading its share; otherwise
    (``comm`` None) only the even ranks open, each on its own, so a reader that makes an MPI call on any
    communicator when given none hangs here instead of passing (in a restart only the aggregators open)."""
    backend, path = env.backend, c.run.path
    if not collective:
        def serial() -> None:
            reader = backend.serial_extents(path, c.document)
            try:
                check_read(reader, backend.extents(c.document), c.run.layout, c.plan)
            finally:
                reader.close()

        env.on_root("serial_extents", serial)
        return
    readers: dict[int, ExtentReader] = {}
    together = settings.get("CKPTIO_READ_IO") == "mpiio"  # as the engine chooses: each on its own, or together
    info = env.open_info(read=together)
    openers = list(range(env.nprocs)) if together else list(range(0, env.nprocs, 2))
    extents = backend.extents(c.document)
    try:
        env.each("open_extents", lambda r: r in openers and readers.update({r: backend.open_extents(
            path, env.comm if together else None, info, c.document)}))
        env.each("read the extents", lambda r: r in openers and check_read(
            readers[r], extents[openers.index(r)::len(openers)], c.run.layout, c.plan))
        env.each("close the readers", lambda r: r in readers and readers[r].close())
        readers.clear()
    finally:
        for reader in readers.values():  # after a failure every rank agreed on
            try:
                reader.close()
            except Exception:
                pass
        env.free_info(info)


# ------------------------------------------------------------------------------------------ cases
@case
def write_protocol_commits_the_document_it_was_given(env: Environment) -> None:
    """Every call of the write side in order; read_document returns the same document (dumps byte-identical)."""
    committed(env)


@case
def extents_cover_exactly_the_declared_data(env: Environment) -> None:
    c = committed(env)
    env.once("check extents and extent_table", lambda: check_extents(env.backend, c.document, c.plan))


@case
def serial_extents_read_every_block_back_bit_identically(env: Environment) -> None:
    c = committed(env)
    env.once("check extents", lambda: check_extents(env.backend, c.document, c.plan))
    read_everything(env, c, collective=False)


@case
def open_extents_read_every_block_back_bit_identically(env: Environment) -> None:
    c = committed(env)
    env.once("check extents", lambda: check_extents(env.backend, c.document, c.plan))
    read_everything(env, c, collective=True)


@case
def reserved_ranges_cover_every_byte_of_the_data(env: Environment) -> None:
    """What ``reserved_ranges`` says after ``define`` is reserved before any data is written: it must hold every
    byte the data occupies (or the engine's space reservation would miss a full file system)."""
    c = committed(env)

    def check() -> None:
        reserved = coalesce(c.run.reserved, merge_gap=1, max_ranges=1 << 62)
        for e in env.backend.extents(c.document):
            expect(any(a <= e.file_offset and e.file_offset + e.nbytes <= b for a, b in reserved),
                   f"{e.var!r} extent at {e.file_offset}+{e.nbytes} lies outside the reserved ranges {reserved}")

    env.once("check the reserved ranges", check)


@case
def a_file_without_the_completion_mark_is_incomplete(env: Environment) -> None:
    run = run_protocol(env, "unmarked", standard_layout(env.nprocs, env.backend), stop="documented")
    finish(env, run, "close")
    env.on_root("read_document", lambda: expect_refused(env.backend, run.path, IncompleteCheckpointError,
                                                        "a file closed without its completion mark"))


@case
def a_truncated_file_is_refused(env: Environment) -> None:
    c = committed(env)

    def check() -> None:
        data = env.files.read(c.run.path)
        for keep in sorted({0, 16, len(data) // 2, len(data) - 1}):
            cut = f"{c.run.path}.first{keep}"
            env.files.write(cut, data[:keep])
            expect_refused(env.backend, cut, CheckpointError, f"its first {keep} of {len(data)} bytes")

    env.on_root("read truncated copies", check)


@case
def abort_never_raises_and_leaves_nothing_readable(env: Environment) -> None:
    for stage in ("created", "written", "documented"):
        run = run_protocol(env, f"aborted_{stage}", standard_layout(env.nprocs, env.backend), stop=stage)
        finish(env, run, "abort")
        env.on_root("read_document", lambda run=run, stage=stage: expect_refused(
            env.backend, run.path, CheckpointError, f"a file aborted once {stage}"))


@case
def every_rank_makes_the_same_steps_when_only_the_last_rank_has_blocks(env: Environment) -> None:
    c = committed(env, "last_rank", last_rank_layout)
    read_everything(env, c, collective=True)


@case
def a_checkpoint_without_variables_commits(env: Environment) -> None:
    c = committed(env, "no_variables", attrs_only_layout)
    env.once("no extents", lambda: expect(env.backend.extents(c.document) == [], "extents of no variables"))


@case
def sniff_accepts_its_own_files_and_refuses_others(env: Environment) -> None:
    c = committed(env)
    backend = env.backend

    def check() -> None:
        head = env.files.read(c.run.path)[:512]
        expect(backend.sniff(head), f"sniff() refuses the leading bytes of its own file: {head[:16]!r}")
        noise = np.random.default_rng(5).integers(0, 256, 512, dtype=np.uint8).tobytes()
        others = [cls.signature for cls in registry.classes() if cls.name != backend.name and cls.signature]
        for other in [*others, b"", bytes(512), b'{"schema": 2, "backend": "' + backend.name.encode() + b'"}', noise,
                      b"\x89PNG\r\n\x1a\n", head[:1]]:
            expect(not backend.sniff(other.ljust(512, b"\0") if other else other),
                   f"sniff() accepts leading bytes {other[:16]!r} that are not its format's")
        if isinstance(env.files, OSFiles) and backend.name in registry.known_backends():
            from ckptio.backends import detect_backend

            found = detect_backend(c.run.path)
            expect(found.name == backend.name, f"detect_backend() takes its file for {found.name!r}")

    env.on_root("sniff", check)


@case
def check_dtype_and_check_attr_follow_the_capabilities(env: Environment) -> None:
    backend = env.backend
    caps = backend.capabilities

    def check() -> None:
        optional = {"|b1": caps.bool_dtype, "<c8": caps.complex_dtypes, "<c16": caps.complex_dtypes,
                    "<f2": caps.float16, "|u1": caps.unsigned_dtypes, "<u2": caps.unsigned_dtypes,
                    "<u4": caps.unsigned_dtypes, "<u8": caps.unsigned_dtypes}
        for dtype, supported in [(d, True) for d in ("<f8", "<f4", "<i8", "<i4", "<i2", "|i1", ">f8")] + [
                *optional.items()]:
            try:
                backend.check_dtype("v", np.dtype(dtype))
                refused = None
            except CapabilityError as exc:
                refused = exc
            expect((refused is None) == supported, f"check_dtype({dtype}) "
                   + (f"refuses a dtype the capabilities support: {refused}" if supported else
                      "accepts a dtype the capabilities do not support"))
        for key, value in ATTRS.items():
            try:
                backend.check_attr(key, value)
            except CapabilityError as exc:
                raise ContractViolation(f"check_attr refuses an ordinary JSON value {value!r}: {exc}") from exc
        for key, value in UNUSUAL_ATTRS.items():
            try:
                backend.check_attr(key, value)
            except CapabilityError:
                pass  # refused cleanly; the attributes it accepts are committed by the standard checkpoint

    env.once("check_dtype and check_attr", check)


def _share_sizes(backend: Backend, nprocs: int) -> tuple[int, int]:
    """Pure: the pickled size (what a rank receives) of the shares of rank 1 (the same blocks at every job size)
    and of the last rank (no block) when ``backend`` places a job of ``nprocs`` ranks."""
    caps = backend.capabilities
    packs = []
    for r in range(nprocs):
        arrays = [] if r == nprocs - 1 else [("u", np.zeros(4), (8 * r,), (8 * (nprocs - 1),)),
                                             ("u", np.zeros(4), (8 * r + 4,), (8 * (nprocs - 1),)),
                                             ("v", np.zeros((2, 3), np.int32), (2 * r, 0), (2 * (nprocs - 1), 3))]
        if caps.segments and r < nprocs - 1:
            arrays.append(("s", np.zeros(3, np.float32), None, None))
        packs.append(pack_declarations([{**declaration(name, a, offset, shape, r), "checksum": memsel.checksum(a)}
                                        for name, a, offset, shape in arrays]))
    placement = backend.place(plan_packed(packs), STRIPE_UNIT, nprocs)
    expect(len(placement.shares) == nprocs, f"place() for {nprocs} ranks made {len(placement.shares)} shares")
    return len(pickle.dumps(placement.shares[1])), len(pickle.dumps(placement.shares[-1]))


@case
def place_gives_each_rank_a_share_that_does_not_grow_with_the_job(env: Environment) -> None:
    """Simulated job sizes, pure: rank 1 has the same blocks at 4 and at 256 ranks, the last rank none; what
    each receives of the placement may grow by a few bytes (larger offsets), not with the number of ranks."""
    def check() -> None:
        small, large = _share_sizes(env.backend, 4), _share_sizes(env.backend, 256)
        for who, s, big in (("rank 1", small[0], large[0]), ("a rank without blocks", small[1], large[1])):
            expect(big <= 2 * s + 64, f"the placement share of {who} grows with the job: {s} bytes at 4 ranks, "
                                      f"{big} at 256")

    env.on_root("place at simulated job sizes", check)


# ------------------------------------------------------------------------------------------ running
def run_case(env: Environment, name: str, fn: Case) -> str | None:
    """Collective: run one case; None if it passed, else why (the same verdict on every rank)."""
    try:
        if env.comm is None:
            fn(env)
        else:
            coord.run(env.comm, f"case {name}", lambda: fn(env))
    except Exception as exc:
        if os.environ.get("CKPTIO_TEST_TRACEBACK"):
            traceback.print_exc()
        return f"{type(exc).__name__}: {exc}".replace("\n", " | ")
    return None


def run_cases(env: Environment, cases: list[tuple[str, Case]]) -> int:
    """Collective: every case in order, one ``CASE`` line each (printed by the planning rank); 1 if any failed."""
    failed = 0
    for name, fn in cases:
        why = run_case(env, name, fn)
        failed += why is not None
        if env.prints:
            print(f"CASE {name} PASS" if why is None else f"CASE {name} FAIL {why}", flush=True)
    if env.prints:
        print(f"SUMMARY {len(cases) - failed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ckptio.testing.contract", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", required=True, help="a registered backend's name")
    parser.add_argument("--outdir", required=True, help="a directory every rank sees")
    parser.add_argument("--case", action="append", help="run only these cases")
    parser.add_argument("--ranks", type=int, help="no MPI: this process plays this many ranks")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.case or ()) - {name for name, _ in CASES})
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}")
    os.makedirs(args.outdir, exist_ok=True)
    if args.ranks:
        comm = None
    else:
        from ckptio.coord.mpi import MPI

        comm = MPI.COMM_WORLD
    try:
        env = Environment(lambda: registry.get_backend(args.backend), comm, args.outdir, args.ranks or 1)
    except CheckpointError as exc:  # an unknown or unusable backend: the same on every rank
        if comm is None or comm.Get_rank() == ROOT:
            print(f"ckptio.testing.contract: {exc}", file=sys.stderr)
        return 2
    return run_cases(env, [(n, f) for n, f in CASES if not args.case or n in args.case])


# ------------------------------------------------------------------------------------------ pytest
class StorageContractTests:
    """zarr's ``StoreTests`` for ckptio backends: a test module subclasses it with the backend under test, and
    pytest runs one test per case (``test_<case name>``) in one process without MPI (``comm`` None), the process
    playing ``simulated_ranks`` ranks::

        class TestMyFormat(StorageContractTests):
            backend_class = MyFormatBackend      # or override make_backend()
            simulated_ranks = 3                  # optional
            files = OS_FILES                     # how the suite reads files (MemoryFiles for the memory backend)
    """

    backend_class: type[Backend] | None = None
    simulated_ranks = 3
    files: Files = OS_FILES

    def make_backend(self) -> Backend:
        if self.backend_class is None:
            raise NotImplementedError(f"{type(self).__name__}: set backend_class or override make_backend()")
        return self.backend_class()

    def contract_environment(self, directory: str | os.PathLike) -> Environment:
        return Environment(self.make_backend, None, os.fspath(directory), self.simulated_ranks, self.files)


def _pytest_case(name: str, fn: Case) -> Callable[[StorageContractTests, Any], None]:
    def test(self: StorageContractTests, tmp_path: Any) -> None:
        fn(self.contract_environment(tmp_path))

    test.__name__ = test.__qualname__ = f"test_{name}"
    test.__doc__ = fn.__doc__
    return test


for _name, _fn in CASES:
    setattr(StorageContractTests, f"test_{_name}", _pytest_case(_name, _fn))

__all__ = ["CASES", "ContractViolation", "Environment", "StorageContractTests", "main", "run_cases"]

if __name__ == "__main__":
    sys.exit(main())
