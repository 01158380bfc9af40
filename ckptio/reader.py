"""The checkpoint reader: two-phase aggregated restart, for every backend, with N-to-M redistribution.

::

      rank 0 (at open)                          every rank (per read)           aggregators only (A of P)
    ----------------------------------------   ---------------------------      ---------------------------
    metadata -> extent table -> runs per       route requests to the runs'  -->  match them to own extents
    aggregator; bcast variables + routing,      boxes (Alltoallv)                parts, rounds, pieces
    scatter each aggregator its own rows       <-- piece descriptors (Alltoallv) ---
                                                                     helper thread, one round ahead:
                                                                     read part k+1 (large preads), verify
                               <------ round k: Isend/Irecv, read buffer -> caller's arrays ------

No rank holds every rank's requests or the whole exchange map (:mod:`ckptio.readplan`): what a rank computes
and receives per read is O(its own requests and pieces + aggregators); an aggregator's is O(its rows and the
requests that meet them).
Only ``A = min(nprocs, stripe count, 80)`` ranks (overridable) ever open the file, each reading a
contiguous file domain in rounds of at most ``buffer_bytes``; everybody else receives its data over MPI.
All public methods that read are collective over the communicator.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import coord, fslayout, memtypes, pagealign, placement_stats, plain, readpipe, readplan, settings, units
from . import hints as hintsmod
from . import meta as metamod
from .backends import detect_backend, get_backend
from .block_table import as_table
from .errors import (
    CheckpointError,
    CheckpointIOError,
    ClosedCheckpointError,
    CorruptCheckpointError,
    DeclarationError,
    ReadRequestError,
    UnknownFormatError,
)
from .extent_table import ExtentTable
from .layout import Box, normalize_request
from .plan import SEGMENT, Extent, Request, choose_aggregators, segment_box

DEFAULT_BUFFER_BYTES = 64 << 20
ENV_BUFFER_BYTES = "CKPTIO_BUFFER_BYTES"
# MPI counts and displacements are C ints: no rank sends or receives this much in one Alltoallv. Internal; a
# test lowers it (inside its MPI program) to exercise the split exchange without gigabytes of data.
MAX_MESSAGE_BYTES = 2**31
# How the restart exchange cuts what one rank sends another in a round into messages (ckptio.memtypes.message_starts)
MESSAGE_SMALL = 256 << 10
MESSAGE_GROUP = 64 << 20


@dataclass(frozen=True)
class VariableInfo:
    """What a checkpoint holds under one name."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    kind: str
    nblocks: int
    nbytes: int
    dims: tuple[str, ...] = ()  # the axes' names (declared with write(dims=), else <name>_d0, ...)
    attrs: Mapping[str, Any] = field(default_factory=dict)  # the variable's own attributes


@dataclass
class ReadStats:
    """Accumulated over every read of one Reader (this rank's numbers; seconds are this rank's)."""

    file_bytes: int = 0
    file_calls: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    rounds: int = 0
    messages: int = 0  # point-to-point messages of the exchange this rank sent or received
    direct_bytes: int = 0  # bytes an aggregator read straight from the file into its own outputs (no buffer)
    # plan, io (file reads), verify (checksums), exchange (moving pieces), data (wall time of the rounds: io +
    # verify and exchange overlap when the aggregators read in a helper thread), wait (this rank blocked on that
    # thread). Overlap figure: (io + verify + exchange - data) / exchange, the exchange hidden behind reading.
    # CPU seconds, less sensitive to other load than wall time: cpu_io, cpu_verify (the reading thread's own CPU
    # time, time.thread_time), cpu_exchange (the calling thread's), cpu_plan and cpu_data (the whole process's,
    # time.process_time, the reading thread included).
    seconds: dict[str, float] = field(default_factory=lambda: {
        "plan": 0.0, "io": 0.0, "verify": 0.0, "exchange": 0.0, "data": 0.0, "wait": 0.0,
        "cpu_plan": 0.0, "cpu_io": 0.0, "cpu_verify": 0.0, "cpu_exchange": 0.0, "cpu_data": 0.0})
    opened_file: bool = False
    host: str = ""  # where this rank runs (MPI_Get_processor_name)
    aggregator: bool = False  # whether this rank is a restart aggregator (one of reader.aggregators)
    read_ahead: bool = False  # whether this aggregator read round k+1 in a helper thread during round k's exchange

    def to_json(self) -> dict[str, Any]:
        return {"file_bytes": self.file_bytes, "file_calls": self.file_calls, "bytes_sent": self.bytes_sent,
                "bytes_received": self.bytes_received, "rounds": self.rounds, "messages": self.messages,
                "direct_bytes": self.direct_bytes,
                "seconds": dict(self.seconds), "opened_file": self.opened_file, "host": self.host,
                "aggregator": self.aggregator, "read_ahead": self.read_ahead}


def _coordinates(name: str, what: str, values: object, ndim: int) -> tuple[int, ...] | None:
    """A read's ``offset`` or ``shape`` as ``ndim`` non-negative integers (None stays None), or a
    ReadRequestError naming the variable and the problem (floats are never truncated, booleans are not
    numbers here)."""
    if values is None:
        return None
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise ReadRequestError(f"variable {name!r}: {what} {values!r} must be a sequence of {ndim} integers")
    out = []
    for v in values:
        if isinstance(v, bool | np.bool_) or not isinstance(v, int | np.integer):
            raise ReadRequestError(f"variable {name!r}: {what} {_show(values)} holds {v!r} "
                                   f"({type(v).__name__}), not an integer")
        if v < 0:
            raise ReadRequestError(f"variable {name!r}: {what} {_show(values)} is negative")
        out.append(int(v))
    if len(out) != ndim:
        raise ReadRequestError(f"variable {name!r}: {what} {_show(values)} has {len(out)} value(s), but the "
                               f"variable has {ndim} dimension(s)")
    return tuple(out)


def _region(lo: np.ndarray, shape: np.ndarray, origin: np.ndarray, ndim: int) -> tuple[slice, ...]:
    """The index of the padded box ``lo``/``shape`` in an array whose first element is at ``origin``: slices,
    then ``...`` (so that a 0-d array gives a 0-d view, not a copy as a scalar)."""
    return (*(slice(int(a - o), int(a - o + n)) for a, o, n in zip(lo[:ndim], origin[:ndim], shape[:ndim],
                                                                    strict=True)), Ellipsis)


def _box_bytes(rel: np.ndarray, shape: np.ndarray, full: np.ndarray, itemsize: int) -> tuple[int, int] | None:
    """``(byte offset, byte length)`` of the box ``rel``/``shape`` in a C-ordered array of shape ``full``, or
    None where its elements are not one contiguous byte range (every axis after its first longer than 1 must be
    whole). Local."""
    longer = np.flatnonzero(shape > 1)
    if len(longer) and (shape[longer[0] + 1:] != full[longer[0] + 1:]).any():
        return None
    strides = np.ones(len(full), np.int64)
    if len(full) > 1:
        strides[:-1] = np.cumprod(full[:0:-1])[::-1]
    return int((rel * strides).sum()) * itemsize, int(np.prod(shape)) * itemsize


def _describe_out(out: object) -> str:
    return (f"an array of shape {list(out.shape)}" if isinstance(out, np.ndarray) else
            f"{len(out)} item(s)" if isinstance(out, Sequence) and not isinstance(out, str | bytes) else
            type(out).__name__)


def _check_out(path: str, name: str, var: VariableInfo, shape: tuple[int, ...], out: np.ndarray) -> None:
    """Local: ``out`` can receive the request (its shape, the variable's dtype in native byte order, writable),
    or a ReadRequestError naming what is wrong."""
    where = f"variable {name!r} of {path}: out="
    if tuple(out.shape) != tuple(shape):
        raise ReadRequestError(f"{where} has shape {list(out.shape)}, but the request's shape is {list(shape)}")
    if out.dtype != var.dtype or not out.dtype.isnative:
        raise ReadRequestError(f"{where} has dtype {out.dtype.str}, but the variable's dtype is {var.dtype.str} "
                               "(no conversion on read: pass an array of the variable's dtype)")
    if not out.flags.writeable:
        raise ReadRequestError(f"{where} is read-only")
    if _overlaps_itself(out):
        raise ReadRequestError(f"{where} is a view whose elements overlap in memory (strides "
                               f"{list(out.strides)} for shape {list(out.shape)}: a stride-0 view from "
                               "np.broadcast_to or as_strided?); every element must have its own memory: pass "
                               "a fresh array (ckptio.empty) or a view of distinct elements")


def _overlaps_itself(a: np.ndarray) -> bool:
    """Local: True unless ``a``'s elements provably occupy distinct memory (issue 23: a stride-0 ``out`` was
    accepted and filled with whichever value landed last). Axes of length 1 do not count; the others, sorted by
    absolute stride, must each step past everything the smaller ones span. Views that interleave without
    sharing (exotic ``as_strided`` layouts) are refused too: ckptio cannot cheaply prove them disjoint."""
    if a.size <= 1:
        return False
    span = a.itemsize
    for stride, n in sorted((abs(st), n) for st, n in zip(a.strides, a.shape, strict=True) if n > 1):
        if stride < span:
            return True
        span = stride * (n - 1) + span
    return False


def checked_requests(path: str, requests: object, out: object, variables: Mapping[str, VariableInfo],
                     own_segment: Callable[[str], Box], skipped: Mapping[str, str] | None = None
                     ) -> tuple[list[Request], list[np.ndarray | None]]:
    """Local, any reader (file or stage): a ``read_many`` call's requests and ``out`` arrays checked against the
    variables (ReadRequestError naming the problem otherwise): each request is ``(name, offset, shape)``; no
    offset/shape on a per-rank segment variable is ``own_segment(name)``; ``skipped``: variables of a plain file
    ckptio cannot read, with why."""
    if isinstance(requests, str | bytes) or not isinstance(requests, Sequence):
        raise ReadRequestError(f"read_many of {path}: expected a list of (name, offset, shape), "
                               f"got {type(requests).__name__}")
    if out is None:
        given: list[Any] = [None] * len(requests)
    elif isinstance(out, np.ndarray) or not isinstance(out, Sequence) or len(out) != len(requests):
        raise ReadRequestError(f"read_many of {path}: out= must be a list of one array (or None) per "
                               f"request ({len(requests)}), got {_describe_out(out)}")
    else:
        given = list(out)
    found = []
    for r, o in zip(requests, given, strict=True):
        if isinstance(r, str | bytes) or not isinstance(r, Sequence) or len(r) != 3:
            raise ReadRequestError(f"read_many of {path}: each request must be (name, offset, shape), got {r!r}")
        found.append(_checked_request(path, *r, o, variables, own_segment, skipped or {}))
    _check_disjoint(path, requests, given)
    return found, given


def _check_disjoint(path: str, requests: Sequence[Any], given: Sequence[np.ndarray | None]) -> None:
    """ReadRequestError when two ``out`` arrays of one call share memory: the read fills them concurrently (an
    aggregator's checksums are streamed across its outputs), so the result would be undefined. Candidates by
    byte bounds (sorted: O(n log n)), then numpy's exact test (interleaved strided views that share no element
    are fine; a pair too hard to decide counts as overlapping). Local."""
    spans = sorted((*np.lib.array_utils.byte_bounds(o), i) for i, o in enumerate(given) if o is not None and o.size)
    active: list[tuple[int, int]] = []  # (end, index) of earlier arrays whose bounds reach past this start
    for lo, hi, i in spans:
        active = [(end, j) for end, j in active if end > lo]
        for _, j in active:
            try:
                shared = np.shares_memory(given[j], given[i], max_work=10**6)
            except np.exceptions.TooHardError:
                shared = True
            if shared:
                raise ReadRequestError(f"read_many of {path}: out= arrays {j} ({requests[j][0]!r}) and {i} "
                                       f"({requests[i][0]!r}) share memory; give each request its own array")
        active.append((hi, i))


def _checked_request(path: str, name: object, offset: object, shape: object, out: object,
                     variables: Mapping[str, VariableInfo], own_segment: Callable[[str], Box],
                     skipped: Mapping[str, str]) -> Request:
    if not isinstance(name, str) or name not in variables:
        why = skipped.get(name) if isinstance(name, str) else None
        if why is not None:  # a plain HDF5/netCDF file's variable ckptio cannot read as raw bytes
            raise ReadRequestError(f"variable {name!r} of {path} cannot be read by ckptio: it is {why}")
        raise ReadRequestError(f"variable {name!r} is not in checkpoint {path} (it has: {some_names(variables)})")
    var = variables[name]
    if out is not None and not isinstance(out, np.ndarray):
        raise ReadRequestError(f"variable {name!r} of {path}: out= must be a numpy array, got {type(out).__name__}")
    off = _coordinates(name, "offset", offset, len(var.shape))
    shp = _coordinates(name, "shape", shape, len(var.shape))
    if var.kind == SEGMENT and off is None and shp is None:
        request = Request(name, own_segment(name))
    else:
        if shp is None and out is not None:
            shp = _coordinates(name, "out.shape", out.shape, len(var.shape))
        request = Request(name, normalize_request(name, var.shape, off, shp))
    if out is not None:
        _check_out(path, name, var, request.box.shape, out)
    return request


def _show(values: object) -> str:
    return repr(list(values)) if isinstance(values, np.ndarray) else repr(values)


def file_identity(path: str) -> tuple[int, int, int]:
    """Local: (inode, size, modification time in ns) of ``path``: which file, in which state. Not the device
    number: each node's mount of a parallel file system has its own (and rank 0 may be on another node)."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def _check_same_options(gathered: list[dict[str, Any]]) -> None:
    """Rank 0: rank 0 partitions the checkpoint for every rank with these options (and every aggregator plans
    its rounds with the buffer size), so they must be the same on every rank, and so must the collective
    CKPTIO_* settings (ckptio.settings)."""
    settings.check_same([g.pop("settings") for g in gathered], "ckptio.open")
    for key in gathered[0]:
        differ = [r for r, g in enumerate(gathered) if g[key] != gathered[0][key]]
        if differ and key == "path":
            raise DeclarationError(f"ckptio.open: the path differs between ranks (rank 0: {gathered[0][key]!r}, "
                                   f"rank {differ[0]}: {gathered[differ[0]][key]!r}); every rank must open the "
                                   "same checkpoint")
        if differ:
            sources = (f"buffer_bytes= and {ENV_BUFFER_BYTES}" if key == "buffer_bytes" else
                       f"aggregators=, {hintsmod.ENV_AGGREGATORS}, and cb_nodes in hints= or {hintsmod.ENV_HINTS}")
            raise DeclarationError(f"ckptio.open: {key} differs between ranks (rank 0: {gathered[0][key]!r}, "
                                   f"rank {differ[0]}: {gathered[differ[0]][key]!r}); it comes from {sources}: "
                                   "give the same on every rank")


def some_names(names, shown: int = 20) -> str:
    """``a, b, c`` for a message: the first ``shown`` names in order, then how many more (10,000 variables must
    not make a 100 KB error message on every rank)."""
    ordered = sorted(names)
    if not ordered:
        return "no variables"
    more = f", ... ({len(ordered) - shown} more)" if len(ordered) > shown else ""
    return ", ".join(ordered[:shown]) + more


def _stripe_unit(meta: Mapping[str, Any]) -> int:
    """The checkpoint's stripe unit as recorded at write (the default where it is not)."""
    return int(meta.get("layout", {}).get("stripe_unit", hintsmod.DEFAULT_STRIPING_UNIT))


def own_segments(meta: Mapping[str, Any], nreaders: int) -> list[dict[str, tuple[int, int]]]:
    """Rank 0: for every reading rank, ``{segment variable: (start, length)}`` (in rows) of the segments it
    reads by default: those of writer ranks ``[r*W//P, (r+1)*W//P)``, concatenated (empty at the end of the ones
    before when it has none)."""
    out: list[dict[str, tuple[int, int]]] = [{} for _ in range(nreaders)]
    writers = int(meta["nprocs"])
    readers = np.arange(nreaders, dtype=np.int64)
    first, last = readers * writers // nreaders, (readers + 1) * writers // nreaders
    for name, var in meta["variables"].items():
        if var["kind"] != SEGMENT:
            continue
        blocks = as_table(var["blocks"], len(var["shape"]))  # validated: in rank order, end to end from 0
        brank = blocks.rank
        ends_before = np.zeros(len(blocks) + 1, np.int64)  # the end of blocks[:i] is where block i starts
        np.cumsum(blocks.shape[:, 0], out=ends_before[1:])
        start = ends_before[np.searchsorted(brank, first)]
        stop = ends_before[np.searchsorted(brank, last)]
        for r in range(nreaders):
            out[r][name] = (int(start[r]), int(stop[r] - start[r]))
    return out


class Reader:
    """An open checkpoint. Create with :func:`ckptio.open` on every rank of ``comm`` (collective)."""

    def __init__(self, path: str | os.PathLike, comm, hints: Mapping[str, Any] | None = None,
                 aggregators: int | None = None, buffer_bytes: int | str | None = None, verify: bool = True):
        self.path = os.fspath(path)
        self.comm = comm
        self.verify = verify
        self._closed = True  # until opened: a failed open leaves nothing to close
        with coord.collective_section():
            self._open(comm, hints, aggregators, buffer_bytes)
        self._closed = False

    def _open(self, comm, hints: Mapping[str, Any] | None, aggregators: object, buffer_bytes: object) -> None:
        """Collective: the options (checked alike on every rank), the node of every rank (gathered on rank 0),
        the metadata and the extent table (rank 0 reads and partitions them), then a broadcast of the
        variables and the routing index and a scatter of each aggregator's rows."""
        from mpi4py import MPI

        chosen: dict[str, Any] = {}
        node = coord.node_leader(comm)
        size = comm.Get_size()

        def options() -> tuple[dict[str, Any], int]:
            chosen["hints"] = hintsmod.resolve_hints(size, hints)
            if buffer_bytes is not None:
                chosen["buffer_bytes"] = units.parse_size(buffer_bytes, "buffer_bytes")
            elif settings.raw(ENV_BUFFER_BYTES):
                chosen["buffer_bytes"] = units.parse_size(settings.raw(ENV_BUFFER_BYTES), ENV_BUFFER_BYTES)
            else:
                chosen["buffer_bytes"] = DEFAULT_BUFFER_BYTES
            chosen["aggregators"] = (units.parse_count(aggregators, "aggregators") if aggregators is not None
                                     else hintsmod.aggregator_override(hints))
            # the read plan is computed from these two, and rank 0's metadata serves every rank's reads of the
            # file: all three must be the same everywhere (a different path on one rank made an aggregator
            # read another checkpoint's bytes against rank 0's checksums: "corrupt", falsely)
            return {"path": os.path.abspath(self.path), "buffer_bytes": chosen["buffer_bytes"],
                    "aggregators": chosen["aggregators"], "settings": settings.collective_snapshot()}, node

        per_rank: list[Any] = []

        def load(gathered: list[tuple[dict[str, Any], int]]) -> dict[str, Any]:
            _check_same_options([g[0] for g in gathered])
            backend = detect_backend(self.path, thorough=True)  # one file, opened on purpose: diagnose damage
            before = file_identity(self.path)  # (after detect_backend, which names a missing or unfollowable path)
            try:
                meta = backend.read_metadata(self.path)
            except UnknownFormatError:  # an HDF5 or netCDF file some other program wrote: read it unchecked
                meta = plain.plain_document(self.path, backend.name)
            if file_identity(self.path) != before:
                raise CheckpointIOError(f"checkpoint {self.path} was replaced or changed while its metadata was "
                                        "read (another job writing the same name?); open it again")
            table = backend.extent_table(meta)
            # the real layout where the file system reported one (domains of whole objects), else the hints'
            stripe_count, alignment = fslayout.restart_layout(meta)
            chosen_aggregators = choose_aggregators(size, [g[1] for g in gathered], stripe_count,
                                                    chosen["aggregators"])
            owner, routing = readplan.partition(table, chosen_aggregators, alignment)
            rows = readplan.rows_of_aggregators(owner, len(chosen_aggregators))
            segments = own_segments(meta, size)
            per_rank.extend({"segments": seg, "table": None} for seg in segments)
            for a, rank in enumerate(chosen_aggregators):
                per_rank[rank]["table"] = table.take(rows[a]).to_arrays()
            return {"backend": backend.name, "meta": metamod.without_blocks(meta), "routing": routing,
                    "identity": before}

        common = coord.gather_and_plan(comm, f"open {self.path}", options, load)
        own = coord.scatter_from_root(comm, f"open {self.path}: restart plan", lambda: per_rank)
        self.meta = common["meta"]
        self._identity: tuple[int, int, int] = common["identity"]
        if self.meta["checksum"] == plain.NO_CHECKSUM:  # a plain HDF5/netCDF file: nothing to verify against
            self.verify = False
        self.backend = get_backend(common["backend"])
        self._routing: readplan.Routing = common["routing"]
        self._runs_by_var = self._routing.by_var()
        names = list(self.meta["variables"])  # the extent table's variable order (ckptio.extent_table)
        self._var_index = {n: i for i, n in enumerate(names)}
        self._table: ExtentTable | None = ExtentTable.from_arrays(own["table"]) if own["table"] is not None else None
        self._segments: dict[str, tuple[int, int]] = own["segments"]
        self._attrs: dict[str, Any] = dict(self.meta["attrs"])
        self._variables: dict[str, VariableInfo] = {
            name: VariableInfo(name, tuple(v["shape"]), np.dtype(v["dtype"]).newbyteorder("="), v["kind"],
                               v["nblocks"], metamod.variable_nbytes(v), metamod.variable_dims(name, v),
                               dict(v.get("attrs", {})))
            for name, v in self.meta["variables"].items()
        }
        self._itemsizes = np.array([np.dtype(self.meta["variables"][n]["dtype"]).itemsize for n in names] or [1],
                                   np.int64)
        self.hints = chosen["hints"]
        for key, value in self.backend.extra_hints.items():
            self.hints.setdefault(key, value)
        self.buffer_bytes: int = chosen["buffer_bytes"]
        self.stripe_unit = _stripe_unit(self.meta)
        self.aggregators = [int(a) for a in self._routing.aggregators]
        is_aggregator = comm.Get_rank() in self.aggregators
        self._agg_comm = comm.Split(0 if is_aggregator else MPI.UNDEFINED, comm.Get_rank())
        self._extent_reader = None
        self._p2p_comm = None  # the exchange's communicator (a duplicate), made by the first exchange
        self._opened = False
        self._chains: dict[int, Any] = {}
        self._direct_pieces: set[int] = set()  # this read's pieces read straight into the outputs (_direct_parts)
        self.stats = ReadStats(**placement_stats.rank_placement(self.aggregators, comm.Get_rank()))
        self._last_failed = False

    # ---------------------------------------------------------------------------------------------- API
    @property
    def checksummed(self) -> bool:
        """Local: whether the file carries checksums that reads verify (False for a plain HDF5 or netCDF file
        ckptio did not write, see :mod:`ckptio.plain`)."""
        return self.meta["checksum"] != plain.NO_CHECKSUM

    @property
    def attrs(self) -> dict[str, Any]:
        """Local: the checkpoint's attributes."""
        self._check_open("attrs")
        return self._attrs

    @property
    def variables(self) -> dict[str, VariableInfo]:
        """Local: what the checkpoint holds, by variable name."""
        self._check_open("variables")
        return self._variables

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise ClosedCheckpointError(f"checkpoint {self.path}: {what} used after Reader.close()")

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        # An exception here (also sys.exit() or Ctrl-C) may be this rank's alone: close() tells the others
        # (see _close), then the original exception goes on.
        try:
            self._close(exc)
        except BaseException as close_exc:
            if exc is None or (close_exc is not exc and not isinstance(close_exc, CheckpointError)):
                raise
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
                  out: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        """Collective: several hyperslabs in one two-phase exchange (the count may differ between ranks).
        ``out``: one array (or None: allocate) per request, as for :meth:`read`'s ``out``."""
        if self._closed:  # local: after close() this rank's collectives with the others are over
            raise ClosedCheckpointError(f"checkpoint {self.path}: read after Reader.close()")
        with coord.collective_section():
            self._last_failed = True  # until every rank got through: an agreed failure leaves it set everywhere
            outputs = self._read_many(requests, out)
            self._last_failed = False  # before a held signal is delivered (at the end of the section)
            return outputs

    def _read_many(self, requests, out=None) -> list[np.ndarray]:
        """Collective: route the requests, let the aggregators plan, then read and exchange round by round,
        reading round k+1 while round k is exchanged where the extent reader allows (:mod:`ckptio.readpipe`)."""
        comm = self.comm
        t, c = time.perf_counter(), time.process_time()
        mine, given = coord.run(comm, f"read {self.path}: requests", lambda: self._requests(requests, out))
        nd = self._routing.ndim
        records = readplan.request_records([self._padded(q) for q in mine], nd)
        routed = readplan.route_requests(records, self._routing, self._runs_by_var)
        to_rank: dict[int, np.ndarray] = {self.aggregators[a]: r for a, r in enumerate(routed) if len(r)}
        received = self._exchange_records(to_rank, records.shape[1])
        plan = coord.run(comm, f"read {self.path}: plan", lambda: self._plan(received))
        descriptors = self._exchange_records(plan.descriptors_by_dest() if plan is not None else {}, 2 + 2 * nd)
        nrounds = comm.allreduce(plan.nrounds if plan is not None else 0, op=self._max_op())
        incoming = readplan.parse_descriptors(descriptors, nd, nrounds)
        outputs = coord.run(comm, f"read {self.path}: allocate", lambda: [
            g if g is not None else pagealign.restart_empty(q.box.shape, self._variables[q.var].dtype)
            for q, g in zip(mine, given, strict=True)])
        self.stats.seconds["plan"] += time.perf_counter() - t
        self.stats.seconds["cpu_plan"] += time.process_time() - c
        self._ensure_open(nrounds > 0)
        t_data, c_data = time.perf_counter(), time.process_time()
        loader, direct = None, {}
        self._direct_pieces = set()
        if plan is not None and nrounds > 0:
            direct, self._direct_pieces = self._direct_parts(plan, records, outputs)
            loader = readpipe.RoundLoader(lambda k, slot: self._load_round(plan, k, slot, direct), nrounds,
                                          self._extent_reader.independent, self.stats.seconds)
            self.stats.read_ahead = self.stats.read_ahead or loader.threaded
        try:
            for k in range(nrounds):
                arrays, error = loader.get(k) if loader is not None else ({}, None)
                if error is None and arrays:
                    error = self._verify_round(plan, arrays, direct)
                t, c = time.perf_counter(), time.thread_time()
                error = self._exchange(k, plan, incoming[k], arrays, records, outputs, error)
                self.stats.seconds["exchange"] += time.perf_counter() - t
                self.stats.seconds["cpu_exchange"] += time.thread_time() - c
                self.stats.rounds += 1
                coord.agree(comm, f"read {self.path}: round {k + 1} of {nrounds}", error)
        finally:
            if loader is not None:
                loader.close()
            self.stats.seconds["data"] += time.perf_counter() - t_data
            self.stats.seconds["cpu_data"] += time.process_time() - c_data
        return outputs

    def _direct_parts(self, plan: readplan.AggregatorPlan, records: np.ndarray, outputs: list[np.ndarray]
                      ) -> tuple[dict[int, list[tuple[int, np.ndarray]]], set[int]]:
        """Local, an aggregator with an independent extent reader: what it reads straight into its own outputs.

        Returns, per part index, the stretches ``(byte offset in the part, the output's bytes there)`` in part
        order, and the indices (into the plan's piece columns) of the pieces so read, which the exchange then
        leaves alone. A piece of this rank's own request qualifies when its part is stored uncompressed in the
        declared dtype, native byte order, and the piece is one contiguous byte range of the part landing in a
        contiguous stretch of the output; in a part that also holds pieces for other ranks (a *split* part, read
        with one scattering ``preadv`` into the read buffer and the outputs) every block the part's checksum
        covers must be a contiguous byte range too: its checksum is then streamed across the buffer and the
        outputs, in file order (:meth:`_verify_split`), so every block is still verified. Those bytes cross
        memory once (the file read itself); everything else goes through the read buffer."""
        if not self._extent_reader.independent or not len(plan.piece_part):
            return {}, set()
        me = self.comm.Get_rank()
        nd = self._routing.ndim
        t = self._table
        counts = np.bincount(plan.piece_part, minlength=len(plan.parts))
        direct: dict[int, list[tuple[int, np.ndarray]]] = {}
        pieces: set[int] = set()
        splittable: dict[int, bool] = {}
        by_part = np.argsort(plan.piece_part, kind="stable")
        part_start = np.searchsorted(plan.piece_part[by_part], np.arange(len(plan.parts) + 1))

        def shared(i: int, p: int, span: tuple[int, int], ndim: int, item: int) -> bool:
            """Whether another piece of part ``p`` has bytes in ``span`` (piece ``i``'s): pieces' first and
            last bytes in the part bound them (rank's requests may overlap, a strided piece is not one range)."""
            others = by_part[part_start[p]:part_start[p + 1]]
            others = others[others != i]
            full = plan.parts[p].shape[:ndim]
            strides = np.ones(ndim, np.int64)
            if ndim > 1:
                strides[:-1] = np.cumprod(full[:0:-1])[::-1]
            rel = plan.piece_lo[others, :ndim] - plan.parts[p].lo[:ndim]
            first = (rel * strides).sum(axis=1) * item
            stop = ((rel + plan.piece_shape[others, :ndim] - 1) * strides).sum(axis=1) * item + item
            return bool(((first < span[0] + span[1]) & (stop > span[0])).any())
        for i in np.flatnonzero(plan.piece_dest == me).tolist():
            p = int(plan.piece_part[i])
            part = plan.parts[p]
            if t.codec[part.row] >= 0:
                continue
            name = t.names[t.var[part.row]]
            var = self.meta["variables"][name]
            declared = np.dtype(var["dtype"])
            if not declared.isnative or np.dtype(var.get("storage", {}).get("file_dtype", declared)) != declared:
                continue
            ndim = int(t.var_ndim[t.var[part.row]])
            span = _box_bytes(plan.piece_lo[i, :ndim] - part.lo[:ndim], plan.piece_shape[i, :ndim],
                              part.shape[:ndim], declared.itemsize)
            if span is None or not span[1]:
                continue
            if counts[p] > 1 and shared(i, p, span, ndim, declared.itemsize):
                continue  # another piece (another rank's, or another request's) needs these bytes of the buffer
            if counts[p] > 1 or span != (0, part.nbytes):  # a split part: checksums stream across its pieces
                if p not in splittable:
                    splittable[p] = not self.verify or self._block_spans(part) is not None
                if not splittable[p]:
                    continue
            qi = int(plan.piece_qi[i])
            view = outputs[qi][_region(plan.piece_lo[i], plan.piece_shape[i], records[qi, 2:2 + nd], ndim)]
            if view.flags.c_contiguous and view.nbytes == span[1] and not pagealign.slow_copy(
                    memtypes.address(view), part.file_offset + span[0]):  # else: via the buffer, at fast shifts
                direct.setdefault(p, []).append((span[0], view.reshape(-1).view(np.uint8)))
                pieces.add(i)
        for stretches in direct.values():
            stretches.sort(key=lambda s: s[0])
        return direct, pieces

    def _block_spans(self, part: readplan.Part) -> list[tuple[int, int, int]] | None:
        """Local: what the part's checksum covers, as byte ranges of the part: ``(block row j, start, stop)`` of
        each block (``(-1, 0, nbytes)``: the whole part, a piece of a block streamed across parts); None when
        some block is not one contiguous byte range of the part (its checksum then needs the part in one
        piece of memory). Empty for a part whose blocks are not checked (a split band)."""
        if part.chain is not None:
            return [(-1, 0, part.nbytes)]
        if not part.verified:
            return []
        t = self._table
        row = part.row
        nd = int(t.var_ndim[t.var[row]])
        item = np.dtype(self.meta["variables"][t.names[t.var[row]]]["dtype"]).itemsize
        out = []
        for j in range(int(t.vptr[row]), int(t.vptr[row + 1])):
            span = _box_bytes(t.vlo[j, :nd] - part.lo[:nd], t.vshape[j, :nd], part.shape[:nd], item)
            if span is None:
                return None
            out.append((j, span[0], span[0] + span[1]))
        return out

    def _verify_split(self, part: readplan.Part, staged: np.ndarray, stretches: list[tuple[int, np.ndarray]]) -> None:
        """Check the part's checksums when some of its bytes went straight into outputs (``stretches``, see
        :meth:`_direct_parts`) and the rest into ``staged`` (the part's place in the read buffer, uint8): every
        block's bytes are fed to the checksum in file order from wherever they landed."""
        memory, at = [], 0  # (start, memory) covering the part, in order
        for off, dst in stretches:
            if off > at:
                memory.append((at, staged[at:off]))
            memory.append((off, dst))
            at = off + dst.nbytes
        if at < part.nbytes:
            memory.append((at, staged[at:]))

        def feed(h, start: int, stop: int) -> None:
            for s, m in memory:
                lo, hi = max(start, s), min(stop, s + m.nbytes)
                if lo < hi:
                    h.update(m[lo - s:hi - s])

        spans = self._block_spans(part)
        if spans is None:  # excluded by _direct_parts
            raise AssertionError("a split part whose blocks are not contiguous byte ranges")
        for j, start, stop in spans:
            if j < 0:  # a piece of a block that spans parts: streamed across them
                index, nparts = part.chain
                h = self._chains.setdefault(part.row, metamod.StreamingChecksum())
                feed(h, start, stop)
                if index + 1 == nparts:
                    self._check(part.row, int(self._table.vptr[part.row]), self._chains.pop(part.row).intdigest())
                continue
            h = metamod.StreamingChecksum()
            feed(h, start, stop)
            self._check(part.row, j, h.intdigest())

    def _load_round(self, plan: readplan.AggregatorPlan, k: int, slot: int,
                    direct: Mapping[int, list[tuple[int, np.ndarray]]]) -> dict[int, np.ndarray]:
        """An aggregator (in the reading thread where there is one): read round ``k``'s parts into buffer
        ``slot`` (and the stretches in ``direct`` straight into the outputs, see :meth:`_direct_parts`); the
        parts' arrays by part index (the bytes read straight into an output are missing from a split part's
        array: the exchange does not copy those pieces). The calling thread verifies them
        (:meth:`_verify_round`) while this thread reads the next round. A collective extent reader is called in
        every round, also with nothing to read (the other aggregators' reads are collective)."""
        parts = plan.rounds[k] if k < plan.nrounds else []
        if not parts and self._extent_reader.independent:
            return {}
        t, c = time.perf_counter(), time.thread_time()
        extents = [self._part_extent(plan.parts[p]) for p in parts]
        if direct:
            data, calls = self._extent_reader.read(extents, slot=slot, into=[direct.get(p) for p in parts])
        else:
            data, calls = self._extent_reader.read(extents, slot=slot)
        self.stats.seconds["io"] += time.perf_counter() - t
        self.stats.seconds["cpu_io"] += time.thread_time() - c
        self.stats.file_bytes += sum(e.nbytes for e in extents)
        self.stats.direct_bytes += sum(d.nbytes for p in parts for _, d in direct.get(p, ()))
        self.stats.file_calls += calls
        return dict(zip(parts, data, strict=True))

    def _verify_round(self, plan: readplan.AggregatorPlan, arrays: Mapping[int, np.ndarray],
                      direct: Mapping[int, list[tuple[int, np.ndarray]]]) -> BaseException | None:
        """An aggregator, in the calling thread: check the checksums of a round's parts as read (``arrays``, by
        part index, in the plan's order: a block streamed across rounds is hashed in round order), before any
        of their bytes is sent; this rank's failure (agreed on after the round's exchange) or None. Local."""
        if not self.verify:
            return None
        t, c = time.perf_counter(), time.thread_time()
        try:
            for p, arr in arrays.items():
                stretches = direct.get(p)
                if stretches and memtypes.address(arr) != memtypes.address(stretches[0][1]):  # split: arr has holes
                    self._verify_split(plan.parts[p], arr.reshape(-1).view(np.uint8), stretches)
                else:
                    self._verify_part(plan.parts[p], arr)
        except BaseException as exc:  # agreed on by the caller after the exchange
            return exc
        finally:
            self.stats.seconds["verify"] += time.perf_counter() - t
            self.stats.seconds["cpu_verify"] += time.thread_time() - c
        return None

    @staticmethod
    def _max_op():
        from mpi4py import MPI

        return MPI.MAX

    def _padded(self, q: Request) -> tuple[int, np.ndarray, np.ndarray]:
        """A request as (variable index, lo, shape) padded to the table's dimensions (offset 0, extent 1)."""
        nd = self._routing.ndim
        lo, shape = np.zeros(nd, np.int64), np.ones(nd, np.int64)
        lo[:q.box.ndim], shape[:q.box.ndim] = q.box.offset, q.box.shape
        return self._var_index[q.var], lo, shape

    def _plan(self, received: list[np.ndarray]) -> readplan.AggregatorPlan | None:
        """Local: an aggregator's plan for the requests it received (None elsewhere)."""
        if self._table is None:
            if any(len(r) for r in received):
                raise AssertionError("a rank that is not a restart aggregator received read requests")
            return None
        return readplan.match_requests(self._table, received, self._itemsizes, self.buffer_bytes)

    def _exchange_records(self, send: Mapping[int, np.ndarray], width: int) -> list[np.ndarray]:
        """Collective: int64 records (rows of ``width``) to the ranks in ``send``; returns what every rank sent
        this one, by source rank. An Alltoall of counts, then one Alltoallv (the per-rank arrays of counts are
        what MPI needs; the payload is this rank's own)."""
        from mpi4py import MPI

        size = self.comm.Get_size()
        counts = np.zeros(size, np.int64)
        for dest, rows in send.items():
            counts[dest] = rows.size
        rcounts = np.zeros(size, np.int64)
        self.comm.Alltoall(counts, rcounts)
        sendbuf = (np.concatenate([send[d].reshape(-1) for d in sorted(send)]).astype(np.int64)
                   if send else np.zeros(0, np.int64))
        recvbuf = np.empty(int(rcounts.sum()), np.int64)
        sdispl = np.concatenate(([0], np.cumsum(counts)[:-1]))
        rdispl = np.concatenate(([0], np.cumsum(rcounts)[:-1]))
        self.comm.Alltoallv([sendbuf, (counts, sdispl), MPI.INT64_T], [recvbuf, (rcounts, rdispl), MPI.INT64_T])
        return [recvbuf[int(rdispl[r]):int(rdispl[r] + rcounts[r])].reshape(-1, width) for r in range(size)]

    def _part_extent(self, part: readplan.Part) -> Extent:
        """A part of one of this aggregator's extents, as the Extent its ExtentReader reads."""
        t = self._table
        nd = int(t.var_ndim[t.var[part.row]])
        box = Box(tuple(int(x) for x in part.lo[:nd]), tuple(int(x) for x in part.shape[:nd]))
        c = int(t.codec[part.row])
        label = None
        if c >= 0:  # a compressed block is read whole: name it as a checksum mismatch would be named
            j = int(t.vptr[part.row])
            label = (f"{self.path}: variable {t.names[t.var[part.row]]!r} block {int(t.vblock[j])} (written by rank "
                     f"{int(t.vrank[j])}, offset {t.vlo[j, :nd].tolist()}, shape {t.vshape[j, :nd].tolist()}) at file "
                     f"offset {part.file_offset}")
        return Extent(t.names[t.var[part.row]], box, part.file_offset, part.nbytes, (), None,
                      t.codecs[c] if c >= 0 else None, label)

    def close(self) -> None:
        """Collective: close the file on the aggregators and free the sub-communicator."""
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
                if self._extent_reader is not None:
                    self._extent_reader.close()
                    self._extent_reader = None
                if self._agg_comm is not None and self._agg_comm != self._null_comm():
                    self._agg_comm.Free()
                self._agg_comm = None
                if self._p2p_comm is not None:
                    self._p2p_comm.Free()  # collective: every rank made it in the same (first) exchange
                    self._p2p_comm = None

    # ------------------------------------------------------------------------------------------ helpers
    @staticmethod
    def _null_comm():
        from mpi4py import MPI

        return MPI.COMM_NULL

    def _ensure_open(self, needed: bool) -> None:
        """Collective: the aggregators open the file the first time data must be read."""
        if not needed or self._opened:  # the same answer on every rank, so all skip or all agree
            return
        error = None
        if self._agg_comm != self._null_comm():
            try:
                info = hintsmod.to_info(self.hints)
                try:
                    self._check_identity()
                    self._extent_reader = self.backend.open_extent_reader(self.path, self._agg_comm, info, self.meta)
                    self.stats.opened_file = True
                    self._check_identity()  # what was opened is what rank 0 described (the file is held from now on)
                finally:
                    info.Free()
            except BaseException as exc:  # agreed on by every rank just below
                error = exc
        coord.agree(self.comm, f"read {self.path}: open file on aggregators", error)
        self._opened = True

    def _check_identity(self) -> None:
        """Local, on an aggregator: the file at the path is still the one whose metadata rank 0 read at open
        (same inode, size and modification time). A checkpoint replaced by a rename in between (a rerun
        rewriting the same step, a simulation rewriting while analysis reads) would be read with the old metadata:
        its bytes called corrupt, or with ``verify=False`` returned as the old checkpoint's values."""
        try:
            now = file_identity(self.path)
        except OSError as exc:
            raise CheckpointIOError(f"checkpoint {self.path} is gone since it was opened: {exc.strerror}") from None
        if now != self._identity:
            raise CheckpointIOError(f"checkpoint {self.path} was replaced since it was opened (another file now has "
                                    "its name): its data no longer matches the metadata read at open; open it again")

    def _requests(self, requests, out=None) -> tuple[list[Request], list[np.ndarray | None]]:
        """Local part of a read's first phase: this rank's requests and the arrays to fill (None: allocate),
        checked (ReadRequestError otherwise)."""
        if self._closed:
            raise ClosedCheckpointError(f"checkpoint {self.path}: read after Reader.close()")
        return checked_requests(self.path, requests, out, self._variables, self._own_segment,
                                self.meta.get("plain_skipped", {}))

    def _own_segment(self, name: str) -> Box:
        start, length = self._segments[name]
        return segment_box(start, length, self._variables[name].shape[1:])

    def _verify_part(self, part: readplan.Part, arr: np.ndarray) -> None:
        """Check the checksum of every writer block the part's extent holds (streaming across the parts of a
        split extent with one block; the parts of a split band are not checked)."""
        t = self._table
        row = part.row
        name = t.names[t.var[row]]
        declared = np.dtype(self.meta["variables"][name]["dtype"])
        first, stop = int(t.vptr[row]), int(t.vptr[row + 1])
        if part.chain is not None:
            index, nparts = part.chain
            h = self._chains.setdefault(row, metamod.StreamingChecksum())
            h.update(np.ascontiguousarray(arr, dtype=declared).reshape(-1).view(np.uint8))
            if index + 1 == nparts:
                self._check(row, first, self._chains.pop(row).intdigest())
            return
        if not part.verified:
            return
        nd = int(t.var_ndim[t.var[row]])
        for j in range(first, stop):
            sub = arr[tuple(slice(int(a - b), int(a - b + n)) for a, b, n in
                            zip(t.vlo[j, :nd], part.lo[:nd], t.vshape[j, :nd], strict=True))]
            self._check(row, j, metamod.checksum_int(np.ascontiguousarray(sub, dtype=declared)))

    def _check(self, row: int, j: int, digest: int) -> None:
        t = self._table
        if digest != int(t.vsum[j]):
            name = t.names[t.var[row]]
            nd = int(t.var_ndim[t.var[row]])
            raise CorruptCheckpointError(
                f"{self.path}: variable {name!r} block {int(t.vblock[j])} (written by rank {int(t.vrank[j])}, offset "
                f"{t.vlo[j, :nd].tolist()}, shape {t.vshape[j, :nd].tolist()}): checksum mismatch, data is corrupt "
                f"(stored {int(t.vsum[j]):016x}, computed {digest:016x})")

    def _exchange(self, k: int, plan: readplan.AggregatorPlan | None, incoming: Mapping[int, np.ndarray],
                  arrays: Mapping[int, np.ndarray], records: np.ndarray, outputs: list[np.ndarray],
                  error: BaseException | None) -> BaseException | None:
        """Collective: round ``k``'s exchange, moving every piece from its aggregator to the rank that asked.

        ``plan``: this rank's aggregator plan (None elsewhere); ``incoming``: per source, the descriptors
        ``[qi, lo, shape]`` of what it sends this rank in this round, in the order it sends them; ``arrays``:
        the round's parts as read, by part index; ``records``: this rank's padded requests. ``error``: this
        rank's failure so far in the round (its read or checksum). A failure while preparing is added; the ranks
        then skip the data movement together (one Allreduce tells them) and the round's error (or None) is
        returned for the agreement that follows.

        Zero-copy: both sides describe what they move to or from a peer as one byte stream, the pieces in the
        aggregator's canonical order (part, then request), each piece's elements in C order, as runs of memory
        (:mod:`ckptio.memtypes`), and cut it alike into messages (:func:`ckptio.memtypes.message_starts`:
        usually one per request and peer). A message that is one run on a side is a plain contiguous buffer
        there (MPI moves large ones with a single copy, e.g. Open MPI's CMA), otherwise an hindexed datatype at
        ``MPI_BOTTOM``: pieces go from the read buffer straight into the callers' arrays, strided ones included,
        and ckptio packs nothing. The messages are matched nonblocking point-to-point calls on a duplicate of
        the communicator (a user's pending receives can never match them). Pieces an aggregator holds for
        itself skip MPI: read straight into the output (:meth:`_direct_parts`), else one copy from the part into
        the output. No message reaches ``MAX_MESSAGE_BYTES``.
        """
        from mpi4py import MPI

        send: dict[int, memtypes.Stream] = {}
        recv: dict[int, memtypes.Stream] = {}
        if error is None:
            try:
                if plan is not None and len(plan.piece_round):
                    send = self._send_streams(k, plan, arrays, records, outputs)
                recv = self._recv_streams(incoming, records, outputs)
            except BaseException as exc:  # agreed on by the caller, after the Allreduce below
                error = exc
        status = np.array([0 if error is None else 1], np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, status, op=MPI.MAX)
        if status[0]:
            return error
        comm = self._message_comm()
        tag = k % 32768
        limit = MAX_MESSAGE_BYTES - 1
        requests: list[Any] = []
        types: list[Any] = []
        try:
            for peers, post in ((recv, comm.Irecv), (send, comm.Isend)):
                for peer, stream in peers.items():
                    for addrs, lens in stream.messages(MESSAGE_SMALL, MESSAGE_GROUP, limit):
                        if len(addrs) == 1:
                            requests.append(post([memtypes.buffer_at(int(addrs[0]), int(lens[0])), int(lens[0]),
                                                  MPI.BYTE], peer, tag))
                        elif len(addrs):
                            types.append(memtypes.datatype(addrs, lens))
                            requests.append(post([MPI.BOTTOM, 1, types[-1]], peer, tag))
            MPI.Request.Waitall(requests)
        finally:
            for dtype in types:
                dtype.Free()
        self.stats.messages += len(requests)
        self.stats.bytes_sent += sum(st.nbytes for st in send.values())
        self.stats.bytes_received += sum(st.nbytes for st in recv.values())
        return None

    def _message_comm(self):
        """Collective on first use (every rank reaches its first exchange): the duplicate of the communicator
        the exchange's point-to-point messages use, freed at close."""
        if self._p2p_comm is None:
            self._p2p_comm = self.comm.Dup()
        return self._p2p_comm

    def _send_streams(self, k: int, plan: readplan.AggregatorPlan, arrays: Mapping[int, np.ndarray],
                      records: np.ndarray, outputs: list[np.ndarray]) -> dict[int, memtypes.Stream]:
        """Local, an aggregator: round ``k``'s pieces for other ranks as streams of the read parts' memory, by
        destination; its own pieces not read straight into its outputs are copied there here."""
        me = self.comm.Get_rank()
        nd = self._routing.ndim
        lo_end = np.searchsorted(plan.piece_round, [k, k + 1]).tolist()
        sel = slice(*lo_end)
        dests, pidx, qis = plan.piece_dest[sel], plan.piece_part[sel], plan.piece_qi[sel]
        plo, pshape = plan.piece_lo[sel], plan.piece_shape[sel]
        t = self._table
        for i in np.flatnonzero(dests == me).tolist():  # my own requests: part -> output directly
            if lo_end[0] + i in self._direct_pieces:  # read straight into the output already
                continue
            part = plan.parts[int(pidx[i])]
            ndim = int(t.var_ndim[t.var[part.row]])
            qi = int(qis[i])
            src = arrays[int(pidx[i])][_region(plo[i], pshape[i], part.lo, ndim)]
            dst = outputs[qi][_region(plo[i], pshape[i], records[qi, 2:2 + nd], ndim)]
            if memtypes.address(src) != memtypes.address(dst):  # else read straight into the output
                dst[...] = src
        others = dests != me
        if not others.any():
            return {}
        keys = sorted(arrays)
        index = {p: a for a, p in enumerate(keys)}
        table = memtypes.ArrayTable([arrays[p] for p in keys], nd)
        which = np.array([index[p] for p in pidx[others].tolist()], np.int64)
        part_lo = np.array([plan.parts[p].lo for p in keys], np.int64).reshape(-1, nd)
        rel = plo[others] - part_lo[which]
        return table.streams(dests[others], which, rel, pshape[others], qis[others])

    def _recv_streams(self, incoming: Mapping[int, np.ndarray], records: np.ndarray,
                      outputs: list[np.ndarray]) -> dict[int, memtypes.Stream]:
        """Local: by source rank, the streams of this rank's outputs where its pieces of the round land."""
        me = self.comm.Get_rank()
        nd = self._routing.ndim
        srcs = [s for s in sorted(incoming) if s != me and len(incoming[s])]
        if not srcs:
            return {}
        rows = np.concatenate([incoming[s] for s in srcs])
        peer = np.repeat(np.array(srcs, np.int64), [len(incoming[s]) for s in srcs])
        qi = rows[:, 0]
        rel = rows[:, 1:1 + nd] - records[qi, 2:2 + nd]
        return memtypes.ArrayTable(outputs, nd).streams(peer, qi, rel, rows[:, 1 + nd:], qi)

    # ------------------------------------------------------------------ analysis views (see ckptio.lazy)
    def __getitem__(self, name: str) -> Any:
        """Local: ``ck["dens"]``, a lazy h5py-like view of one variable (indexing it is a collective read)."""
        from .lazy import LazyVariable

        return LazyVariable(self, name)

    def __repr__(self) -> str:
        from .lazy import describe_reader

        return describe_reader(self)
