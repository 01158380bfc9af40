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

from . import coord
from . import hints as hintsmod
from . import meta as metamod
from .backends import detect_backend, get_backend
from .errors import CorruptCheckpointError, ReadRequestError
from .layout import Box, normalize_request
from .plan import SEGMENT, Request, choose_aggregators, exchange_for_rank, plan_read

DEFAULT_BUFFER_BYTES = 64 << 20


@dataclass(frozen=True)
class VariableInfo:
    """What a checkpoint holds under one name."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    kind: str
    nblocks: int
    nbytes: int


@dataclass
class ReadStats:
    """Accumulated over every read of one Reader (this rank's numbers; seconds are this rank's)."""

    file_bytes: int = 0
    file_calls: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    rounds: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: {"plan": 0.0, "io": 0.0, "verify": 0.0,
                                                               "exchange": 0.0})
    opened_file: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"file_bytes": self.file_bytes, "file_calls": self.file_calls, "bytes_sent": self.bytes_sent,
                "bytes_received": self.bytes_received, "rounds": self.rounds, "seconds": dict(self.seconds),
                "opened_file": self.opened_file}


def node_ids(comm) -> list[int]:
    """Collective: for every rank, an id of the node it runs on (lowest rank sharing its memory)."""
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        leader = local.bcast(comm.Get_rank(), root=0)
    finally:
        local.Free()
    return comm.allgather(leader)


class Reader:
    """An open checkpoint. Create with :func:`ckptio.open` on every rank of ``comm`` (collective)."""

    def __init__(self, path: str | os.PathLike, comm, hints: Mapping[str, Any] | None = None,
                 aggregators: int | None = None, buffer_bytes: int | None = None, verify: bool = True):
        from mpi4py import MPI

        self.path = os.fspath(path)
        self.comm = comm
        self.verify = verify

        def load() -> tuple[str, dict[str, Any]]:
            backend = detect_backend(self.path)
            return backend.name, backend.read_metadata(self.path)

        backend_name, self.meta = coord.bcast_from_root(comm, f"open {self.path}", load)
        self.backend = get_backend(backend_name)
        self.attrs: dict[str, Any] = dict(self.meta["attrs"])
        self.variables: dict[str, VariableInfo] = {
            name: VariableInfo(name, tuple(v["shape"]), np.dtype(v["dtype"]).newbyteorder("="), v["kind"],
                               len(v["blocks"]), metamod.variable_nbytes(v))
            for name, v in self.meta["variables"].items()
        }
        self._extents = self.backend.extents(self.meta)
        self._itemsizes = {n: np.dtype(v["dtype"]).itemsize for n, v in self.meta["variables"].items()}
        self.hints = hintsmod.resolve_hints(comm.Get_size(), hints)
        for key, value in self.backend.extra_hints.items():
            self.hints.setdefault(key, value)
        buffer_env = os.environ.get("CKPTIO_BUFFER_BYTES")
        self.buffer_bytes = int(buffer_bytes or (buffer_env and int(buffer_env)) or DEFAULT_BUFFER_BYTES)
        stripe_count = int(self.meta.get("layout", {}).get("stripe_count", 1))
        self.stripe_unit = int(self.meta.get("layout", {}).get("stripe_unit", hintsmod.DEFAULT_STRIPING_UNIT))
        override = aggregators if aggregators is not None else hintsmod.aggregator_override(hints)
        self.aggregators = choose_aggregators(comm.Get_size(), node_ids(comm), stripe_count, override)
        is_aggregator = comm.Get_rank() in self.aggregators
        self._agg_comm = comm.Split(0 if is_aggregator else MPI.UNDEFINED, comm.Get_rank())
        self._extent_reader = None
        self._opened = False
        self._chains: dict[str, Any] = {}
        self.stats = ReadStats()
        self._closed = False

    # ---------------------------------------------------------------------------------------------- API
    def __enter__(self) -> Reader:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.close()
        return False

    def read(self, name: str, offset: Sequence[int] | None = None, shape: Sequence[int] | None = None) -> np.ndarray:
        """Collective: this rank's hyperslab of variable ``name`` (every rank may ask for a different one,
        or an empty one). With no offset/shape: the whole array; for a per-rank segment variable read by
        the same number of ranks that wrote it, this rank's own segment (by another count: the segments of
        writer ranks ``[r*W//P, (r+1)*W//P)``, concatenated)."""
        return self.read_many([(name, offset, shape)])[0]

    def read_many(self, requests: Sequence[tuple[str, Sequence[int] | None, Sequence[int] | None]]) -> list[np.ndarray]:
        """Collective: several hyperslabs in one two-phase exchange (the count may differ between ranks)."""
        comm = self.comm
        rank = comm.Get_rank()
        t = time.perf_counter()
        mine = coord.run(comm, f"read {self.path}: requests", lambda: [self._request(*r) for r in requests])
        all_requests = comm.allgather(mine)
        plan = plan_read(self._extents, self._itemsizes, all_requests, self.aggregators, self.stripe_unit,
                         self.buffer_bytes)
        exchange = exchange_for_rank(plan, all_requests, rank)
        outputs = [np.empty(q.box.shape, dtype=self.variables[q.var].dtype) for q in mine]
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
                except Exception as exc:
                    error = exc
            t = time.perf_counter()
            self._exchange(exchange[k], arrays, mine, outputs, failed=error is not None)
            self.stats.seconds["exchange"] += time.perf_counter() - t
            self.stats.rounds += 1
            coord.agree(comm, f"read {self.path}: round {k + 1} of {plan.nrounds}", error)
        return outputs

    def close(self) -> None:
        """Collective: close the file on the aggregators and free the sub-communicator."""
        if self._closed:
            return
        self._closed = True
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
            except Exception as exc:
                error = exc
        coord.agree(self.comm, f"read {self.path}: open file on aggregators", error)
        self._opened = True

    def _request(self, name: str, offset, shape) -> Request:
        if name not in self.variables:
            raise ReadRequestError(f"variable {name!r} is not in checkpoint {self.path} "
                                   f"(it has: {', '.join(sorted(self.variables)) or 'no variables'})")
        var = self.variables[name]
        if var.kind == SEGMENT and offset is None and shape is None:
            return Request(name, self._own_segment(name))
        return Request(name, normalize_request(name, var.shape, offset, shape))

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

    def _exchange(self, ex, arrays: dict[int, np.ndarray], mine: Sequence[Request], outputs: list[np.ndarray],
                  failed: bool) -> None:
        """Collective: one Alltoallv moving every piece from its aggregator to the rank that asked for it.

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
        if sum(send_counts) >= 2**31 or sum(recv_counts) >= 2**31:
            raise ReadRequestError("one exchange round would move more than 2 GiB to or from one rank; "
                                   "lower buffer_bytes (CKPTIO_BUFFER_BYTES) or read in several calls")
        sendbuf = np.empty(sum(send_counts), np.uint8)
        if not failed:
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
        self.comm.Alltoallv([sendbuf, (send_counts, send_displs.tolist()), MPI.BYTE],
                            [recvbuf, (recv_counts, recv_displs.tolist()), MPI.BYTE])
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
