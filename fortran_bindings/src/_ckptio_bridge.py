"""_ckptio_bridge: the Python half of ckptio's C/Fortran bindings.

This file is compiled into libckptio_c at build time (CMake turns it into a byte array) and executed as the
module ``_ckptio_bridge`` the first time the C library is used, so the library needs nothing at run time but
an interpreter that can import numpy, mpi4py and ckptio.

The C shim (ckptio_c.c) converts arguments -- communicators through mpi4py's C API, caller memory into numpy
arrays (on write a copy in a staging buffer by default, a view in zero-copy mode; on read a view of the
caller's buffer) -- and calls the functions below, which use only ckptio's public API plus
``ckptio.coord`` for agreement. Every Python exception that escapes is turned into a status code in exactly
one place, ``fail_python()`` in ckptio_c.c.

Collective safety: an argument problem that the C side finds before a collective call (a NULL pointer, a
dtype that does not match the variable) is passed here as ``problem`` and agreed on by every rank before the
collective starts, so a wrong argument on one rank fails every rank instead of leaving the others waiting.
"""

from __future__ import annotations

import sys

if "mpi4py.MPI" not in sys.modules:
    # Embedded in a compiled MPI program: MPI's initialization, finalization and error handlers belong to the
    # host. Without this, importing mpi4py.MPI would switch MPI_COMM_WORLD/MPI_COMM_SELF to MPI_ERRORS_RETURN
    # and the host program's unchecked MPI errors would pass silently. MPI-IO errors still raise (files use
    # MPI_ERRORS_RETURN by default).
    import mpi4py

    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = False
    mpi4py.rc.errors = "default"

    import warnings

    def _one_line(message, category, filename, lineno, line=None) -> str:
        """A warning as C and Fortran users should see it: its class and ckptio's message, not the line of
        this file it was raised through (an outside trial saw ``_ckptio_bridge.py:371: UserWarning`` and the
        bridge's source line on a Fortran program's stderr)."""
        return f"{category.__name__}: {message}\n"

    warnings.formatwarning = _one_line

import os
import re
import traceback
from dataclasses import dataclass, field

import numpy as np

import ckptio
from ckptio import coord
from ckptio.errors import CheckpointError, CollectiveError, DeclarationError, ReadRequestError
from ckptio.model import memsel, varmeta
from ckptio.model.agreement import first_difference
from ckptio.tiers import async_io, catalog


class ArgumentError(CheckpointError, ValueError):
    """A bad argument to the C/Fortran API (NULL pointer, unknown dtype code, dtype mismatch on read, ...)."""


class CollectiveArgumentError(CollectiveError, ArgumentError):
    """ArgumentError on one or more ranks of a collective call, raised on every rank."""


# dtype codes of ckptio.h (enum ckptio_dtype), in order
DTYPE_CODES = {np.dtype(t): code for code, t in enumerate(
    ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f4", "f8", "?", "c8", "c16"), start=1)}


def _argument_errors_specialized(fn, *args, **kwargs):
    """Call fn; a plain CollectiveError caused by an ArgumentError on some rank becomes CollectiveArgumentError
    (ckptio.errors.collective_error_class only knows ckptio's own classes)."""
    try:
        return fn(*args, **kwargs)
    except CollectiveError as exc:
        if type(exc) is CollectiveError and any(cls == "ArgumentError" for cls, *_ in exc.failures.values()):
            raise CollectiveArgumentError(exc.phase, exc.failures, exc.planner) from None
        raise


def _agree(comm, phase: str, problem: str | None) -> None:
    """Collective: raise CollectiveArgumentError on every rank if any rank has a problem."""
    _argument_errors_specialized(coord.agree, comm, phase, ArgumentError(problem) if problem else None)


def _poison(writer, exc: BaseException) -> None:
    """Remember a local failure of a writer so that its collective close() fails on every rank.

    ``Writer.write``/``set_attr`` already do this for CheckpointErrors (``Writer._error``); this covers errors
    found by the C side before Python was called.
    """
    if getattr(writer, "_error", None) is None:
        writer._error = exc


# ------------------------------------------------------------------------------------------------ writing
@dataclass
class Watched:
    """A block written in zero-copy mode: the caller's memory, and its checksum when ckptio_write returned."""
    where: str
    array: np.ndarray
    checksum: str


@dataclass
class WriteHandle:
    """What a C/Fortran handle being written holds: the ckptio.Writer, its zero-copy blocks, and the per-variable
    dims/attrs set for the variables' next writes (``ckptio_set_dims``, ``ckptio_set_var_attr_*``)."""
    writer: ckptio.Writer
    watched: list[Watched] = field(default_factory=list)
    described: dict[str, dict] = field(default_factory=dict)
    written: set[str] = field(default_factory=set)

    def changed_blocks(self) -> list[str]:
        """Local: the zero-copy blocks whose memory no longer holds what was written (checksum differs)."""
        return [w.where for w in self.watched if memsel.checksum(w.array) != w.checksum]


# every handle this process holds open (a writer until its ckptio_close, a reader until its ckptio_close), in the
# order they were made: ckptio_finalize closes what the program left open (close_left_open)
_open_handles: dict[int, object] = {}


def _held(handle):
    """Local: remember ``handle`` as open (see :func:`close_left_open`); returns it."""
    _open_handles[id(handle)] = handle
    return handle


def close_left_open(where: str) -> None:
    """Collective over each handle's communicator, in the order the handles were made (ckptio_finalize, before it
    waits for background checkpoints): every writer and reader this process still holds open is closed with an
    error naming this rank, so that the other ranks, waiting in their ckptio_close of it, fail instead of waiting
    for this rank for ever (an outside trial: a rank that skipped ckptio_close and called ckptio_finalize hung
    the others); nothing of such a writer is committed. Raises the first failure (this rank's own)."""
    first: BaseException | None = None
    for handle in list(_open_handles.values()):
        _open_handles.pop(id(handle), None)
        user = handle.writer if isinstance(handle, WriteHandle) else handle
        what = f"{'checkpoint' if isinstance(handle, WriteHandle) else 'the reader of'} {user.path}"
        error = ArgumentError(f"{where} was called on rank {user.comm.Get_rank()} with {what} still open: call "
                              "ckptio_close on every rank first (nothing of a checkpoint left open is committed)")
        try:
            if isinstance(handle, WriteHandle):
                _poison(handle.writer, error)
                close(handle)
            else:
                handle.__exit__(ArgumentError, error, None)  # (the agreement of a reader's close, failing)
                raise error
        except BaseException as exc:
            first = first or exc
    if first is not None:
        raise first


def create(path: str, comm, backend: str, mode: str | None = None, stage_dir: str | None = None,
           compression: str | None = None) -> WriteHandle:
    """Local: ckptio.create (None: its default for mode, stage_dir, compression); the writer is wrapped for the
    zero-copy bookkeeping. A mode or compression that is wrong in itself, or differs between ranks, is raised by
    the close on every rank (as in Python)."""
    return _held(WriteHandle(ckptio.create(path, comm, backend=backend, mode=mode or "sync", stage_dir=stage_dir,
                                           compression=compression)))


# multi-level series (ckptio_series_create_ml): how many checkpoints this process created per (directory,
# prefix), so that drain_every=k drains every k-th one as a Python Series object does (each C call makes a new
# Series). The same on every rank: the count only grows when the collective Series construction succeeded.
_series_counts: dict[tuple[str, str], int] = {}


def series_create(directory: str, comm, prefix: str, keep: int, step: int, backend: str,
                  problem: str | None, mode: str | None = None, stage_dir: str | None = None,
                  compression: str | None = None, redundancy: str | None = None, drain_every: int = 1,
                  failure_group: str | None = None) -> WriteHandle:
    """Collective: ``ckptio.Series(directory, comm, prefix=prefix, keep=keep, backend=backend, stage_dir=stage_dir,
    mode=mode, compression=compression, redundancy=redundancy, drain_every=drain_every,
    failure_group=failure_group).create(step)`` (None: the defaults); its close applies the retention (for a
    background checkpoint: in the I/O thread after the commit). The Series makes the directory (rank 0, errors
    reaching every rank) after checking its arguments: a bad one leaves nothing behind. With ``drain_every=k``
    the k-th, 2k-th, ... checkpoint this process creates in the series is drained to ``directory`` (the others
    stay at the node-local level, protected by ``redundancy``)."""
    _agree(comm, f"series {directory}", problem)  # (the Series makes its directory once its arguments passed)
    options = {k: v for k, v in (("mode", mode), ("compression", compression), ("redundancy", redundancy),
                                 ("failure_group", failure_group)) if v is not None}
    series = ckptio.Series(directory, comm, prefix=prefix, keep=keep, backend=backend, stage_dir=stage_dir,
                           drain_every=drain_every, **options)
    if redundancy is None and drain_every == 1:
        return _held(WriteHandle(series.create(step)))
    key = (os.path.abspath(directory), prefix)
    _series_counts[key] = _series_counts.get(key, 0) + 1
    return _held(WriteHandle(series.create(step, drain=_series_counts[key] % drain_every == 0)))


def _selected(array, select):
    """The box ``select = (start, count)`` (C order) of ``array`` as a numpy view (a memory selection)."""
    start, count = select
    return array[tuple(slice(s, s + c) for s, c in zip(start, count, strict=True))]


def write(handle: WriteHandle, name: str, array, offset, global_shape, problem: str | None, where: str,
          zero_copy: int, select=None) -> None:
    """Local: declare a block (offset/global_shape tuples) or a segment (both None).

    ``array`` is a staging copy (default) or, with ``zero_copy``, a view of the caller's memory: then its
    checksum is taken now and verified by :func:`close` before anything is written. With ``select`` (a memory
    selection, ckptio_write_sub: ``(start, count)`` in C order) ``array`` views the caller's whole array and the
    block is that box of it: copied here (only the box) unless ``zero_copy``, else declared as the strided view,
    which the backends write in place (ckptio.model.memsel).
    """
    writer = handle.writer
    try:
        if problem:
            raise ArgumentError(problem)
        if select is not None:
            array = _selected(array, select)
            if not zero_copy:
                array = np.array(array, order="C")  # the caller's memory is valid until this call returns
        d = handle.described.get(name, {})
        writer.write(name, array, offset, global_shape, dims=d.get("dims"), attrs=d.get("attrs"))
        handle.written.add(name)
        if zero_copy:
            handle.watched.append(Watched(where, array, memsel.checksum(array)))
    except BaseException as exc:
        _poison(writer, exc)
        raise


def _describe(handle: WriteHandle, name: str, where: str, problem: str | None, what: str, value) -> None:
    """Local: remember dims (``what`` "dims") or one attribute (``what`` its key) of variable ``name`` for its
    following writes; refused (ArgumentError, the writer poisoned) after the variable's first write on this rank,
    where Python's write() would already have declared its description."""
    try:
        if problem:
            raise ArgumentError(problem)
        if not name:
            raise ArgumentError("variable name is NULL or empty")
        if name in handle.written:
            raise ArgumentError(f"variable {name!r} was already written on this rank: declare its dims and "
                                f"attributes before its first write (they go with every block of it)")
        rank = handle.writer.comm.Get_rank()
        entry = handle.described.setdefault(name, {})
        if what == "dims":  # checked now (names), again with the array's rank by the write
            dims = list(value)
            varmeta.declare(name, len(dims), dims, None, rank)
            entry["dims"] = dims
        else:
            attrs = {**entry.get("attrs", {}), what: value}
            varmeta.declare(name, 0, None, attrs, rank)  # checks the names and values
            if handle.writer.backend is not None:  # (None: ckptio_create's arguments were wrong, which the
                handle.writer.backend.check_attr(what, value)  # close reports on every rank)
            entry["attrs"] = attrs
    except BaseException as exc:
        _poison(handle.writer, exc)
        raise


def set_dims(handle: WriteHandle, name: str, dims, problem: str | None, where: str) -> None:
    """Local: ``dims=`` (C order) of variable ``name``'s following writes."""
    _describe(handle, name, where, problem, "dims", dims)


def set_var_attr(handle: WriteHandle, name: str, key: str, value, where: str) -> None:
    """Local: one of variable ``name``'s ``attrs=`` for its following writes."""
    _describe(handle, name, where, None if key else "attribute key is NULL or empty", key, value)


def set_attr(handle: WriteHandle, key: str, value) -> None:
    try:
        handle.writer.set_attr(key, value)
    except BaseException as exc:
        _poison(handle.writer, exc)
        raise


def close(obj) -> None:
    """Collective. A writer poisoned by a local ArgumentError fails here on every rank with ARGUMENT status --
    also one whose zero-copy memory changed between ckptio_write and ckptio_close (nothing is committed)."""
    _open_handles.pop(id(obj), None)
    if isinstance(obj, WriteHandle):
        changed = obj.changed_blocks()
        if changed:  # (the collective error names this rank)
            _poison(obj.writer, ArgumentError(
                f"the memory of {', '.join(changed)} changed between the write and ckptio_close "
                "(zero-copy mode: it must stay allocated and unchanged until ckptio_close returns; the default "
                "mode copies at write); nothing was committed"))
        obj.watched.clear()
        obj = obj.writer
        _Last.writer = obj  # ckptio_should_exit: how long the last checkpoint took
    _argument_errors_specialized(obj.close)


def wait(handle: WriteHandle) -> None:
    """Local: block until the background (async or staged) checkpoint closed by :func:`close` is committed; raise
    its error, which is the same on every rank (agreed by the I/O threads). Nothing to wait for after a failed
    close or a synchronous fallback (no MPI_THREAD_MULTIPLE)."""
    handle.writer.wait()


def done(handle: WriteHandle) -> bool:
    """Local: whether nothing of that checkpoint is still written in the background (ckptio_done)."""
    return handle.writer.done()


def wait_all(where: str = "ckptio_wait_all") -> None:
    """Local: wait for every background checkpoint of this process (ckptio.wait_all), then raise the first failure
    that no wait reported yet, the others named in its notes (ckptio_wait_all, and ckptio_finalize before it
    finalizes the interpreter: ckptio's exit handler would otherwise report it during Py_FinalizeEx)."""
    ckptio.wait_all()
    async_io.raise_failures(async_io.unreported_failures(), where)


# ------------------------------------------------------------------------------------------------ reading
def open_reader(path: str, comm, problem: str | None, stage_dir: str | None = None):
    """Collective: ckptio.open (with ``stage_dir``: from the node-local stages when they are usable)."""
    _agree(comm, f"open {path}", problem)
    return _held(ckptio.open(path, comm, stage_dir=stage_dir))


def _buffer_problem(reader, name: str, out) -> str | None:
    """Local: why the caller's buffer ``out`` cannot receive variable ``name`` (None if it can, or if the name is
    unknown: reader.read()/read_many() report that on every rank)."""
    rank = reader.comm.Get_rank()
    info = reader.variables.get(name)
    if info is None:
        return None
    if info.dtype != out.dtype:
        return f"variable {name!r} of {reader.path} has dtype {info.dtype}, but rank {rank} passed a {out.dtype} buffer"
    if len(info.shape) != out.ndim:
        return (f"variable {name!r} of {reader.path} has {len(info.shape)} dimension(s) {list(info.shape)}, but "
                f"rank {rank} asked for {out.ndim}")
    return None


def read(reader, name: str, out, offset, problem: str | None, select=None) -> None:
    """Collective: read the hyperslab at ``offset`` with ``out.shape`` into ``out`` (a view of caller memory).
    With ``select`` (ckptio_read_sub: ``(start, count)`` in C order), ``out`` views the caller's whole array and
    the hyperslab goes into that box of it; nothing outside the box is written."""
    if out is not None and select is not None:
        out = _selected(out, select)
    if not problem:
        problem = _buffer_problem(reader, name, out)
    _read_into(reader, [] if problem else [(name, offset, out.shape)], [] if problem else [out], problem)


def read_many(reader, names: list[str], outs: list, offsets: list, problem: str | None, selects=None) -> None:
    """Collective: all requests of this rank in one two-phase exchange (ckptio.Reader.read_many); the number of
    requests may differ between ranks. Any problem on any rank fails every rank before anything is read.
    ``selects[i]`` (ckptio_read_many_sub): None, or ``(start, count)``: ``outs[i]`` views the caller's whole array
    and request i goes into that box of it."""
    if selects is not None:
        outs = [out if sel is None else _selected(out, sel) for out, sel in zip(outs, selects, strict=True)]
    for name, out in zip(names, outs, strict=True):
        problem = problem or _buffer_problem(reader, name, out)
    _read_into(reader, [] if problem else [(n, off, out.shape) for n, off, out in zip(names, offsets, outs,
                                                                                      strict=True)],
               [] if problem else outs, problem)


def _read_into(reader, requests: list, outs: list, problem: str | None) -> None:
    """Collective: the requests, received straight into the caller's (possibly strided) arrays with the
    reader's ``out=`` (a file's Reader and a staged checkpoint's StagedReader alike): no copy. ``problem`` (this
    rank's bad argument) fails the read's own first agreed phase on every rank: an agreement of the bridge's own
    before it would meet a rank that closed the reader early, and the reader, which never saw that failure,
    would then wait in its close for the rank that had left (an outside trial hung C ranks that way)."""
    _argument_errors_specialized(reader.read_many, requests, outs,
                                 error=ArgumentError(problem) if problem else None)


def _lookup_attr(reader, key: str):
    if key not in reader.attrs:
        raise ReadRequestError(f"attribute {key!r} is not in checkpoint {reader.path} "
                               f"(it has: {', '.join(sorted(reader.attrs)) or 'no attributes'})")
    value = reader.attrs[key]
    return value.item() if isinstance(value, np.generic) else value


def get_attr_int(reader, key: str) -> int:
    value = _lookup_attr(reader, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"attribute {key!r} of {reader.path} is {type(value).__name__} {value!r}, "
                            "not an integer")
    if not -2**63 <= value < 2**63:
        raise ArgumentError(f"attribute {key!r} of {reader.path} = {value} does not fit in int64")
    return value


def get_attr_float(reader, key: str) -> float:
    value = _lookup_attr(reader, key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ArgumentError(f"attribute {key!r} of {reader.path} is {type(value).__name__} {value!r}, "
                            "not a number")
    return float(value)


def get_attr_str(reader, key: str) -> bytes:
    value = _lookup_attr(reader, key)
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise ArgumentError(f"attribute {key!r} of {reader.path} is {type(value).__name__} {value!r}, "
                            "not a string")
    return value.encode()


def inquire(reader, name: str) -> tuple[int, tuple[int, ...]]:
    info = reader.variables.get(name)
    if info is None:
        raise ReadRequestError(f"variable {name!r} is not in checkpoint {reader.path} "
                               f"(it has: {', '.join(sorted(reader.variables)) or 'no variables'})")
    return DTYPE_CODES.get(np.dtype(info.dtype), 0), tuple(int(n) for n in info.shape)


def var_names(reader) -> list[str]:
    return sorted(reader.variables)


def latest(directory: str, prefix: str, comm, verify: int = 0, stage_dir: str = "") -> tuple[str, int]:
    """The newest valid checkpoint ('' if none) and how many newer ones were skipped as unreadable or damaged
    (which are marked and kept, see ckptio.engine.damage_marks). ``verify``: read every block and check its
    checksum, falling back past corrupt newer checkpoints. Without ``comm``: this process looks by itself.

    With ``comm``: collective. The arguments are agreed first (outside trial 15: a different directory or prefix
    on one rank got rank 0's answer for another directory, a different ``stage_dir`` hung the others), then rank
    0 looks and every rank gets its answer or its error. ``stage_dir`` (non-empty): ``ckptio.Series(directory,
    comm, prefix=prefix, stage_dir=stage_dir, must_exist=True)``'s restart point -- a staged checkpoint that
    never reached ``directory`` is rebuilt from the other nodes' redundancy if a node lost it, verified and
    drained first."""
    def look() -> tuple[str, int]:
        skipped: list[str] = []
        found = catalog.find_latest(directory, catalog.pattern_of(prefix), bool(verify), skipped)
        return found or "", len(skipped)

    if comm is None:
        return look()
    where = f"latest checkpoint in {directory}"
    coord.gather_and_plan(comm, f"{where}: arguments", lambda: _latest_arguments(directory, prefix, verify, stage_dir),
                          lambda gathered: _same_arguments(where, gathered))
    if stage_dir:
        series = ckptio.Series(directory, comm, prefix=prefix, stage_dir=stage_dir, must_exist=True)
        return series.latest_and_skipped() or "", len(series.skipped)
    return coord.bcast_from_root(comm, where, look)


def _latest_arguments(directory: str, prefix: str, verify: int, stage_dir: str) -> dict[str, object]:
    """Local: what :func:`latest` needs every rank to pass alike (a bad prefix is an error here)."""
    catalog.pattern_of(prefix)
    return {"dir": os.path.abspath(directory), "prefix": prefix, "verify": bool(verify),
            "stage_dir": os.path.abspath(stage_dir) if stage_dir else None}


def _same_arguments(where: str, gathered: list[dict[str, object]]) -> None:
    """Rank 0: a DeclarationError naming the first argument that differs between ranks."""
    found = first_difference(gathered)
    if found is not None:
        key, rank = found
        raise DeclarationError(f"{where}: {key} differs between ranks (rank 0: {gathered[0][key]!r}, rank {rank}: "
                               f"{gathered[rank][key]!r}); every rank must pass the same dir, prefix and stage_dir")


def prune(directory: str, prefix: str, keep: int, comm, problem: str | None) -> int:
    """Collective: retention as in ckptio.Series -- delete all but the newest ``keep`` complete checkpoints
    named ``{prefix}...`` (rank 0 deletes). Returns how many were removed."""
    _agree(comm, f"prune {directory}", problem)
    return len(ckptio.Series(directory, comm, prefix=prefix, keep=keep).prune())


# ------------------------------------------------------------------------------------------------ batch jobs
class _Last:
    writer = None  # the Writer of the last ckptio_close of a checkpoint on this process


def should_exit(comm, problem: str | None) -> int:
    """Collective: ckptio.tiers.batch.should_exit (1 on every rank when the job should write its final checkpoint and
    leave), with the duration of this process' last checkpoint closed through the bindings."""
    from ckptio.tiers import batch

    _agree(comm, "ckptio_should_exit", problem)
    return int(batch.should_exit(comm, last_checkpoint=_Last.writer))


# ------------------------------------------------------------------------------------------------- errors
# A list of integers after a word that names a shape or an index: "offset [0, 8]", "global shape [9, 4]",
# "declared [9, 4]", "element [1, 2]", "{'offset': [0, 0], 'shape': [3, 4]}", "dimension(s) [2, 3]".
_SHAPE_LIST = re.compile(r"\b(offset|shape|declared|element|dimension\(s\))('?:?\s)\[(\d+(?:,\s*\d+)+)\]")


# a declaration listed with the ranks that made it: "(every declaration: [7, 5, 6] on ranks 0, 2; [7, 6, 6] on
# rank 1)"; and the axis of a hole's neighbouring block: "(offset [0, 0, 2], shape [6, 5, 1]) along axis 0"
_RANKS_LIST = re.compile(r"\[(\d+(?:,\s*\d+)+)\](?= on ranks? \d)")
_ALONG_AXIS = re.compile(r"(shape \[(\d+(?:,\s*\d+)*)\]\)) along axis (\d+)")


def fortran_order(text: str) -> str:
    """Shapes, offsets, indices and axes of a message in Fortran order (reversed; an axis as the Fortran
    dimension, 1-based), for callers of module ckptio."""
    def flip(m: re.Match) -> str:
        items = [s.strip() for s in m.group(3).split(",")]
        return f"{m.group(1)}{m.group(2)}[{', '.join(reversed(items))}]"

    def flip_listed(m: re.Match) -> str:
        return f"[{', '.join(reversed([s.strip() for s in m.group(1).split(',')]))}]"

    def dimension(m: re.Match) -> str:
        return f"{m.group(1)} along dimension {len(m.group(2).split(',')) - int(m.group(3))}"

    flipped = _SHAPE_LIST.sub(flip, _RANKS_LIST.sub(flip_listed, _ALONG_AXIS.sub(dimension, text)))
    return flipped if flipped == text else flipped + " (shapes and offsets in Fortran order, offsets 0-based)"


def describe(exc: BaseException, with_traceback: bool, fortran: bool = False) -> str:
    """The message stored for ckptio_last_error(): class and text, plus the traceback for unexpected errors.
    ``fortran``: the call came from module ckptio, so shapes are shown in Fortran order."""
    text = f"{type(exc).__name__}: {exc}"
    if fortran:
        text = fortran_order(text)
    if with_traceback:
        text += "\n" + "".join(traceback.format_exception(exc)).rstrip()
    return text
