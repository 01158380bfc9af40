"""The checkpoint reader: two-phase aggregated restart, for every backend, with N-to-M redistribution.

::

      rank 0                        all ranks                    aggregators only (A of P)
    ---------                      -----------                  ----------------------------
    read metadata  --bcast-->  state hyperslabs  --allgather-->  plan (same on every rank)
                                                                 open file (sub-communicator)
                                                    round k:     read domain part k (one Read_all)
                                                                 verify whole-block checksums
                               <------------- Alltoallv (exact bytes per rank) -------------
                               assemble arrays

Only ``A = min(nprocs, stripe count, 80)`` ranks (overridable) ever open the file, each reading a
contiguous file domain in rounds of at most ``buffer_bytes``; everybody else receives its data over MPI.
All public methods that read are collective over the communicator.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import coord, units
from . import hints as hintsmod
from . import meta as metamod
from .backends import detect_backend, get_backend
from .errors import CheckpointError, ClosedCheckpointError, CorruptCheckpointError, DeclarationError, ReadRequestError
from .layout import Box, normalize_request
from .plan import SEGMENT, Request, choose_aggregators, exchange_for_rank, plan_read

DEFAULT_BUFFER_BYTES = 64 << 20
ENV_BUFFER_BYTES = "CKPTIO_BUFFER_BYTES"
# MPI counts and displacements are C ints: no rank sends or receives this much in one Alltoallv. Internal; a
# test lowers it (inside its MPI program) to exercise the split exchange without gigabytes of data.
MAX_MESSAGE_BYTES = 2**31


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
    messages: int = 0  # Alltoallv calls (one per round unless a round moves MAX_MESSAGE_BYTES or more)
    seconds: dict[str, float] = field(default_factory=lambda: {"plan": 0.0, "io": 0.0, "verify": 0.0,
                                                               "exchange": 0.0})
    opened_file: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"file_bytes": self.file_bytes, "file_calls": self.file_calls, "bytes_sent": self.bytes_sent,
                "bytes_received": self.bytes_received, "rounds": self.rounds, "messages": self.messages,
                "seconds": dict(self.seconds),
                "opened_file": self.opened_file}


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


def _show(values: object) -> str:
    return repr(list(values)) if isinstance(values, np.ndarray) else repr(values)


def _check_same_options(gathered: list[dict[str, Any]]) -> None:
    """Rank 0: the read plan is computed on every rank, so its inputs must be the same on every rank."""
    for key in gathered[0]:
        differ = [r for r, g in enumerate(gathered) if g[key] != gathered[0][key]]
        if differ and key == "path":
            raise DeclarationError(f"ckptio.open: the path differs between ranks (rank 0: {gathered[0][key]!r}, "
                                   f"rank {differ[0]}: {gathered[differ[0]][key]!r}); every rank must open the "
                                   "same checkpoint")
        if differ:
            env = ENV_BUFFER_BYTES if key == "buffer_bytes" else hintsmod.ENV_AGGREGATORS
            raise DeclarationError(f"ckptio.open: {key} differs between ranks (rank 0: {gathered[0][key]!r}, "
                                   f"rank {differ[0]}: {gathered[differ[0]][key]!r}); pass the same {key}= (and "
                                   f"the same {env}) on every rank")


def node_ids(comm) -> list[int]:
    """Collective: for every rank, an id of the node it runs on (lowest rank sharing its memory)."""
    return comm.allgather(coord.node_leader(comm))


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
        """Collective: the options (checked alike on every rank), the metadata (rank 0), the aggregators."""
        from mpi4py import MPI

        chosen: dict[str, Any] = {}

        def options() -> dict[str, Any]:
            chosen["hints"] = hintsmod.resolve_hints(comm.Get_size(), hints)
            if buffer_bytes is not None:
                chosen["buffer_bytes"] = units.parse_size(buffer_bytes, "buffer_bytes")
            elif os.environ.get(ENV_BUFFER_BYTES):
                chosen["buffer_bytes"] = units.parse_size(os.environ[ENV_BUFFER_BYTES], ENV_BUFFER_BYTES)
            else:
                chosen["buffer_bytes"] = DEFAULT_BUFFER_BYTES
            chosen["aggregators"] = (units.parse_count(aggregators, "aggregators") if aggregators is not None
                                     else hintsmod.aggregator_override(hints))
            # the read plan is computed on every rank from these two, and rank 0's metadata serves every rank's
            # reads of the file: all three must be the same everywhere (a different path on one rank made an
            # aggregator read another checkpoint's bytes against rank 0's checksums: "corrupt", falsely)
            return {"path": os.path.abspath(self.path), "buffer_bytes": chosen["buffer_bytes"],
                    "aggregators": chosen["aggregators"]}

        def load(gathered: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
            _check_same_options(gathered)
            backend = detect_backend(self.path)
            return backend.name, backend.read_metadata(self.path)

        backend_name, self.meta = coord.gather_and_plan(comm, f"open {self.path}", options, load)
        self.backend = get_backend(backend_name)
        self._attrs: dict[str, Any] = dict(self.meta["attrs"])
        self._variables: dict[str, VariableInfo] = {
            name: VariableInfo(name, tuple(v["shape"]), np.dtype(v["dtype"]).newbyteorder("="), v["kind"],
                               len(v["blocks"]), metamod.variable_nbytes(v), metamod.variable_dims(name, v),
                               dict(v.get("attrs", {})))
            for name, v in self.meta["variables"].items()
        }
        self._extents = self.backend.extents(self.meta)
        self._itemsizes = {n: np.dtype(v["dtype"]).itemsize for n, v in self.meta["variables"].items()}
        self.hints = chosen["hints"]
        for key, value in self.backend.extra_hints.items():
            self.hints.setdefault(key, value)
        self.buffer_bytes: int = chosen["buffer_bytes"]
        stripe_count = int(self.meta.get("layout", {}).get("stripe_count", 1))
        self.stripe_unit = int(self.meta.get("layout", {}).get("stripe_unit", hintsmod.DEFAULT_STRIPING_UNIT))
        self.aggregators = choose_aggregators(comm.Get_size(), node_ids(comm), stripe_count, chosen["aggregators"])
        is_aggregator = comm.Get_rank() in self.aggregators
        self._agg_comm = comm.Split(0 if is_aggregator else MPI.UNDEFINED, comm.Get_rank())
        self._extent_reader = None
        self._opened = False
        self._chains: dict[str, Any] = {}
        self.stats = ReadStats()
        self._last_failed = False

    # ---------------------------------------------------------------------------------------------- API
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

    def read(self, name: str, offset: Sequence[int] | None = None, shape: Sequence[int] | None = None) -> np.ndarray:
        """Collective: this rank's hyperslab of variable ``name`` (every rank may ask for a different one,
        or an empty one). With no offset/shape: the whole array; for a per-rank segment variable read by
        the same number of ranks that wrote it, this rank's own segment (by another count: the segments of
        writer ranks ``[r*W//P, (r+1)*W//P)``, concatenated)."""
        return self.read_many([(name, offset, shape)])[0]

    def read_many(self, requests: Sequence[tuple[str, Sequence[int] | None, Sequence[int] | None]]) -> list[np.ndarray]:
        """Collective: several hyperslabs in one two-phase exchange (the count may differ between ranks)."""
        with coord.collective_section():
            self._last_failed = True  # until every rank got through: an agreed failure leaves it set everywhere
            outputs = self._read_many(requests)
            self._last_failed = False  # before a held signal is delivered (at the end of the section)
            return outputs

    def _read_many(self, requests) -> list[np.ndarray]:
        comm = self.comm
        rank = comm.Get_rank()
        t = time.perf_counter()
        mine = coord.run(comm, f"read {self.path}: requests", lambda: self._requests(requests))
        all_requests = comm.allgather(mine)
        plan = plan_read(self._extents, self._itemsizes, all_requests, self.aggregators, self.stripe_unit,
                         self.buffer_bytes)
        exchange = exchange_for_rank(plan, all_requests, rank)
        outputs = coord.run(comm, f"read {self.path}: allocate", lambda: [
            np.empty(q.box.shape, dtype=self._variables[q.var].dtype) for q in mine])
        agg_index = plan.aggregator_index(rank)
        self.stats.seconds["plan"] += time.perf_counter() - t
        self._ensure_open(plan.nrounds > 0)
        for k in range(plan.nrounds):
            error: BaseException | None = None
            arrays: dict[int, np.ndarray] = {}
            if agg_index is not None:
                extents = plan.rounds[agg_index][k] if k < len(plan.rounds[agg_index]) else []
                try:
                    t = time.perf_counter()
                    data, calls = self._extent_reader.read(extents)
                    self.stats.seconds["io"] += time.perf_counter() - t
                    self.stats.file_bytes += sum(e.nbytes for e in extents)
                    self.stats.file_calls += calls
                    t = time.perf_counter()
                    for e, arr in zip(extents, data, strict=True):
                        arrays[id(e)] = arr
                        if self.verify:
                            self._verify_extent(e, arr)
                    self.stats.seconds["verify"] += time.perf_counter() - t
                except BaseException as exc:  # any failure is agreed on after the exchange
                    error = exc
            t = time.perf_counter()
            error = self._exchange(exchange[k], arrays, mine, outputs, error)
            self.stats.seconds["exchange"] += time.perf_counter() - t
            self.stats.rounds += 1
            coord.agree(comm, f"read {self.path}: round {k + 1} of {plan.nrounds}", error)
        return outputs

    def close(self) -> None:
        """Collective: close the file on the aggregators and free the sub-communicator."""
        self._close(None)

    def _close(self, error: BaseException | None) -> None:
        """Collective: agree on ``error`` (this rank's exception from the ``with`` block, or None), then release.

        The agreement has the shape of every read's first phase (``coord.agree``), so a rank that leaves the
        ``with`` block with an exception of its own meets the other ranks wherever they are next: in their
        ``close()`` or in their next read, which then raises a CollectiveError naming it. It is skipped when
        this Reader's last read failed: that failure was agreed on every rank, which all skip it alike.
        """
        if self._closed:
            return
        self._closed = True
        with coord.collective_section():
            try:
                if not self._last_failed:
                    coord.agree(self.comm, f"close {self.path}", error)
            finally:
                if self._extent_reader is not None:
                    self._extent_reader.close()
                    self._extent_reader = None
                if self._agg_comm is not None and self._agg_comm != self._null_comm():
                    self._agg_comm.Free()
                self._agg_comm = None

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
                    self._extent_reader = self.backend.open_extent_reader(self.path, self._agg_comm, info, self.meta)
                    self.stats.opened_file = True
                finally:
                    info.Free()
            except BaseException as exc:  # agreed on by every rank just below
                error = exc
        coord.agree(self.comm, f"read {self.path}: open file on aggregators", error)
        self._opened = True

    def _requests(self, requests) -> list[Request]:
        """Local part of a read's first phase: this rank's requests, checked (ReadRequestError otherwise)."""
        if self._closed:
            raise ClosedCheckpointError(f"checkpoint {self.path}: read after Reader.close()")
        if isinstance(requests, str | bytes) or not isinstance(requests, Sequence):
            raise ReadRequestError(f"read_many of {self.path}: expected a list of (name, offset, shape), "
                                   f"got {type(requests).__name__}")
        out = []
        for r in requests:
            if isinstance(r, str | bytes) or not isinstance(r, Sequence) or len(r) != 3:
                raise ReadRequestError(f"read_many of {self.path}: each request must be (name, offset, shape), "
                                       f"got {r!r}")
            out.append(self._request(*r))
        return out

    def _request(self, name: str, offset, shape) -> Request:
        if not isinstance(name, str) or name not in self._variables:
            raise ReadRequestError(f"variable {name!r} is not in checkpoint {self.path} "
                                   f"(it has: {', '.join(sorted(self._variables)) or 'no variables'})")
        var = self._variables[name]
        off = _coordinates(name, "offset", offset, len(var.shape))
        shp = _coordinates(name, "shape", shape, len(var.shape))
        if var.kind == SEGMENT and off is None and shp is None:
            return Request(name, self._own_segment(name))
        return Request(name, normalize_request(name, var.shape, off, shp))

    def _own_segment(self, name: str) -> Box:
        blocks = self.meta["variables"][name]["blocks"]
        writers = self.meta["nprocs"]
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        first, last = rank * writers // size, (rank + 1) * writers // size
        mine = [b for b in blocks if first <= b["rank"] < last]
        if not mine:
            before = [b for b in blocks if b["rank"] < first]
            start = (before[-1]["offset"][0] + before[-1]["shape"][0]) if before else 0
            return Box((start,), (0,))
        start = mine[0]["offset"][0]
        return Box((start,), (mine[-1]["offset"][0] + mine[-1]["shape"][0] - start,))

    def _verify_extent(self, extent, arr: np.ndarray) -> None:
        """Check the checksum of every writer block this extent holds entirely (streaming for chains)."""
        var = self.meta["variables"][extent.var]
        declared = np.dtype(var["dtype"])
        if extent.chain is not None:
            key, part, nparts = extent.chain
            h = self._chains.setdefault(key, metamod.StreamingChecksum())
            h.update(np.ascontiguousarray(arr, dtype=declared).reshape(-1).view(np.uint8))
            if part + 1 < nparts:
                return
            digest = self._chains.pop(key).hexdigest()
            index, box, expected = extent.verify[0]
            self._check(extent.var, index, digest, expected)
            return
        for index, box, expected in extent.verify:
            sub = arr[box.relative_to(extent.box)]
            self._check(extent.var, index, metamod.checksum(np.ascontiguousarray(sub, dtype=declared)), expected)

    def _check(self, name: str, index: int, digest: str, expected: str) -> None:
        if digest != expected:
            b = self.meta["variables"][name]["blocks"][index]
            raise CorruptCheckpointError(
                f"{self.path}: variable {name!r} block {index} (written by rank {b['rank']}, offset {b['offset']}, "
                f"shape {b['shape']}): checksum mismatch, data is corrupt (stored {expected}, computed {digest})")

    def _alltoallv_in_parts(self, peak: int, sendbuf: np.ndarray, send_counts: list[int], send_displs: np.ndarray,
                            recvbuf: np.ndarray, recv_counts: list[int], recv_displs: np.ndarray) -> None:
        """Collective: the Alltoallv of :meth:`_exchange` as ``parts`` Alltoallv calls, each moving less than
        MAX_MESSAGE_BYTES to and from every rank (C-int counts and displacements). Part ``j`` of a
        (source, destination) pair's ``n`` bytes is ``[n*j//parts, n*(j+1)//parts)``, which sender and
        receiver compute alike; per rank and part that totals at most ``total/parts + nprocs`` bytes."""
        from mpi4py import MPI

        size = self.comm.Get_size()
        room = MAX_MESSAGE_BYTES - size - 1
        if room <= 0:
            raise ValueError(f"MAX_MESSAGE_BYTES={MAX_MESSAGE_BYTES} is too small for {size} ranks")
        parts = peak // room + 1

        def pieces(counts: list[int], j: int) -> tuple[list[int], list[int]]:
            starts = [n * j // parts for n in counts]
            return starts, [n * (j + 1) // parts - st for n, st in zip(counts, starts, strict=True)]

        for j in range(parts):
            s_starts, s_counts = pieces(send_counts, j)
            r_starts, r_counts = pieces(recv_counts, j)
            out = np.concatenate([sendbuf[int(send_displs[d]) + s_starts[d]:][:s_counts[d]] for d in range(size)])
            into = np.empty(sum(r_counts), np.uint8)
            self.comm.Alltoallv([out, (s_counts, np.cumsum([0, *s_counts[:-1]]).tolist()), MPI.BYTE],
                                [into, (r_counts, np.cumsum([0, *r_counts[:-1]]).tolist()), MPI.BYTE])
            self.stats.messages += 1
            pos = 0
            for src in range(size):
                start = int(recv_displs[src]) + r_starts[src]
                recvbuf[start:start + r_counts[src]] = into[pos:pos + r_counts[src]]
                pos += r_counts[src]

    def _exchange(self, ex, arrays: dict[int, np.ndarray], mine: Sequence[Request], outputs: list[np.ndarray],
                  error: BaseException | None) -> BaseException | None:
        """Collective: one Alltoallv moving every piece from its aggregator to the rank that asked for it.

        ``error``: this rank's failure so far in the round (its read or checksum). A failure while preparing
        the buffers is added; the ranks then skip the Alltoallv together (one Allreduce tells them) and the
        round's error (or None) is returned for the agreement that follows.

        Each byte is copied once into the send buffer (straight from the aggregator's extent, strided or not),
        moved by MPI, and copied once into the caller's array. Pieces an aggregator holds for itself skip MPI:
        one copy from the extent into the output. Sender and receiver enumerate a (source, destination) pair's
        pieces in the same canonical order (see :func:`ckptio.plan.exchange_for_rank`), so the bytes line up.
        """
        from mpi4py import MPI

        size, me = self.comm.Get_size(), self.comm.Get_rank()

        def nbytes(p) -> int:
            return p.count * self._itemsizes[p.extent.var]

        send_counts = [0] * size
        for dest, pieces in ex.send.items():
            if dest != me:
                send_counts[dest] = sum(nbytes(p) for p in pieces)
        recv_counts = [0] * size
        for src, pieces in ex.recv.items():
            if src != me:
                recv_counts[src] = sum(nbytes(p) for p in pieces)
        send_displs = np.concatenate(([0], np.cumsum(send_counts)[:-1])).astype(np.int64)
        recv_displs = np.concatenate(([0], np.cumsum(recv_counts)[:-1])).astype(np.int64)
        sendbuf = recvbuf = np.empty(0, np.uint8)
        if error is None:
            try:
                sendbuf = np.empty(sum(send_counts), np.uint8)
                for dest in sorted(ex.send):
                    if dest == me:
                        for p in ex.send[dest]:  # my own request: extent -> output directly
                            outputs[p.request_index][p.box.relative_to(mine[p.request_index].box)] = \
                                arrays[id(p.extent)][p.box.relative_to(p.extent.box)]
                        continue
                    pos = int(send_displs[dest])
                    for p in ex.send[dest]:
                        src = arrays[id(p.extent)][p.box.relative_to(p.extent.box)]
                        n = nbytes(p)
                        sendbuf[pos:pos + n].view(src.dtype).reshape(p.box.shape)[...] = src
                        pos += n
                recvbuf = np.empty(sum(recv_counts), np.uint8)
            except BaseException as exc:  # agreed on by the caller, after the Allreduce below
                error = exc
        # Whether any rank failed, and the most any rank moves: one Alltoallv when that is below
        # MAX_MESSAGE_BYTES, else several (the same decision on every rank)
        status = np.array([max(sum(send_counts), sum(recv_counts)), 0 if error is None else 1], np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, status, op=MPI.MAX)
        peak, any_failed = int(status[0]), bool(status[1])
        if any_failed:
            return error
        if peak < MAX_MESSAGE_BYTES:
            self.comm.Alltoallv([sendbuf, (send_counts, send_displs.tolist()), MPI.BYTE],
                                [recvbuf, (recv_counts, recv_displs.tolist()), MPI.BYTE])
            self.stats.messages += 1
        else:
            self._alltoallv_in_parts(peak, sendbuf, send_counts, send_displs, recvbuf, recv_counts, recv_displs)
        self.stats.bytes_sent += sum(send_counts)
        self.stats.bytes_received += sum(recv_counts)
        for src in sorted(ex.recv):
            if src == me:
                continue
            pos = int(recv_displs[src])
            for p in ex.recv[src]:
                req = mine[p.request_index]
                out = outputs[p.request_index]
                n = nbytes(p)
                out[p.box.relative_to(req.box)] = recvbuf[pos:pos + n].view(out.dtype).reshape(p.box.shape)
                pos += n
        return None

    # ------------------------------------------------------------------ analysis views (see ckptio.lazy)
    def __getitem__(self, name: str) -> Any:
        """Local: ``ck["dens"]``, a lazy h5py-like view of one variable (indexing it is a collective read)."""
        from .lazy import LazyVariable

        return LazyVariable(self, name)

    def __repr__(self) -> str:
        from .lazy import describe_reader

        return describe_reader(self)
