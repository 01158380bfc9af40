"""The two-phase restart, for every backend, with N-to-M redistribution (the engine behind :class:`ckptio.Reader`).

::

      rank 0 (at open)                          every rank (per read)           aggregators only (A of P)
    ----------------------------------------   ---------------------------      ---------------------------
    metadata -> extent table -> runs per       route requests to the runs'  -->  match them to own extents
    aggregator; bcast variables + routing,      boxes (Alltoallv)                parts, rounds, pieces
    scatter each aggregator its own rows       <-- piece descriptors (Alltoallv) ---
                                                                     helper thread, one round ahead:
                                                                     read part k+1 (large preads), verify
                               <------ round k: Isend/Irecv, read buffer -> caller's arrays ------

No rank holds every rank's requests or the whole exchange map (:mod:`ckptio.model.readplan`): what a rank computes
and receives per read is O(its own requests and pieces + aggregators); an aggregator's is O(its rows and the
requests that meet them). Only ``A = min(nprocs, stripe count, 80)`` ranks (overridable) ever open the file,
each reading a contiguous file domain in rounds of at most ``buffer_bytes``; everybody else receives its data
over MPI. Every collective goes through :mod:`ckptio.coord` (agreement, the aggregators' communicator, the
exchange); the local work lives in :mod:`ckptio.engine.restart_plan` (rank 0 at open) and
:mod:`ckptio.engine.restart_parts` (an aggregator's parts: checksums, direct reads, streams).
"""

from __future__ import annotations

import math
import resource
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ckptio import coord
from ckptio.backends import get_backend
from ckptio.coord import comms, exchange
from ckptio.coord import datatypes as memtypes
from ckptio.coord import hints as hintsmod
from ckptio.engine import placement_stats, readpipe, restart_memory
from ckptio.engine import restart_parts as parts
from ckptio.engine.gc_pause import without_gc
from ckptio.engine.restart_plan import ReadOptions, checked_verify, file_identity, plan_open, stripe_unit
from ckptio.errors import CheckpointIOError
from ckptio.model import readplan
from ckptio.model.document import CheckpointDocument
from ckptio.model.extent_table import ExtentTable
from ckptio.model.plan import Request
from ckptio.model.requests import VariableInfo


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
    # page faults of this process during the reads (getrusage: every thread, the reading thread included): minor
    # ones are mostly the first touch of fresh memory (outputs a read allocates, buffers), major ones file pages
    page_faults: int = 0
    major_faults: int = 0
    # outputs of at least restart_memory.MIN_BYTES this process allocated during the reads (like page_faults, the
    # whole process's: a read in another thread meanwhile counts too): in fresh memory (its first touch costs
    # faults) or in memory kept from dropped outputs (none, unless the kernel took pages of it back meanwhile:
    # then page_faults shows them)
    fresh_outputs: int = 0
    recycled_outputs: int = 0
    opened_file: bool = False
    host: str = ""  # where this rank runs (MPI_Get_processor_name)
    aggregator: bool = False  # whether this rank is a restart aggregator (one of reader.aggregators)
    read_ahead: bool = False  # whether this aggregator read round k+1 in a helper thread during round k's exchange

    def to_json(self) -> dict[str, Any]:
        return {"file_bytes": self.file_bytes, "file_calls": self.file_calls, "bytes_sent": self.bytes_sent,
                "bytes_received": self.bytes_received, "rounds": self.rounds, "messages": self.messages,
                "direct_bytes": self.direct_bytes, "page_faults": self.page_faults, "major_faults": self.major_faults,
                "fresh_outputs": self.fresh_outputs, "recycled_outputs": self.recycled_outputs,
                "seconds": dict(self.seconds), "opened_file": self.opened_file, "host": self.host,
                "aggregator": self.aggregator, "read_ahead": self.read_ahead}


def variable_infos(meta: CheckpointDocument) -> VariableInfos:
    """Local: what the checkpoint holds, by name, from its metadata (without block lists)."""
    return VariableInfos(meta.variables)


class VariableInfos(Mapping):
    """The checkpoint's variables by name as :class:`VariableInfo` (``Reader.variables``), each made from the
    document's record when first looked up: a rank that reads a few of 10,000 variables builds a few. A read-only
    mapping in the document's order. Local."""

    def __init__(self, records: Mapping[str, Any]):
        self._records = records
        self._made: dict[str, VariableInfo] = {}

    def __getitem__(self, name: str) -> VariableInfo:
        info = self._made.get(name)
        if info is None:
            v = self._records[name]  # KeyError for a name the checkpoint does not hold
            dtype = _native(v.dtype)
            info = self._made[name] = VariableInfo.made(name, v.shape, dtype, v.kind, v.nblocks,
                                                        math.prod(v.shape) * dtype.itemsize, v.dim_names(name),
                                                        dict(v.attrs or {}))
        return info

    def __contains__(self, name: object) -> bool:
        return name in self._records

    def __iter__(self):
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __repr__(self) -> str:
        return f"VariableInfos({len(self)} variables)"


_NATIVE: dict[str, np.dtype] = {}


def _native(dtype: str) -> np.dtype:
    """The dtype of a document's ``dtype`` string in this machine's byte order (cached: one per distinct dtype)."""
    found = _NATIVE.get(dtype)
    if found is None:
        found = _NATIVE[dtype] = np.dtype(dtype).newbyteorder("=")
    return found


class Restart:
    """The two-phase restart of one checkpoint opened on every rank of ``comm``.

    Which ranks call what: the constructor, :meth:`read` and :meth:`close` are collective over ``comm`` (every
    rank, in the same order, inside the caller's ``coord.collective_section``); the aggregators (``aggregators``,
    ranks of ``comm``) also run collectives over their own sub-communicator (opening and reading the file)."""

    @without_gc
    def __init__(self, path: str, comm, options: Callable[[], ReadOptions], verify: bool):
        """Collective over ``comm``: ``options()`` (every rank's resolved options, checked alike on rank 0), the
        node of every rank (gathered on rank 0), the metadata and the extent table (rank 0 reads and partitions
        them), then a broadcast of the variables and the routing index and a scatter of each aggregator's rows."""
        self.path, self.comm = path, comm
        node = coord.node_leader(comm)
        chosen: list[ReadOptions] = []
        per_rank: list[Any] = []

        def local() -> tuple[dict[str, Any], int]:
            chosen.append(options())
            return {**chosen[0].agreed_part(path), "verify": checked_verify(verify)}, node

        common = coord.gather_and_plan(comm, f"open {path}", local, lambda gathered: plan_open(
            path, comm.Get_size(), gathered, gathered[0][0]["aggregators"], per_rank))
        own = coord.scatter_from_root(comm, f"open {path}: restart plan", lambda: per_rank)
        self.verify = bool(verify)  # a bool, the same on every rank: checked and agreed in the phase above
        self.meta: CheckpointDocument = common.meta
        self._identity: tuple[int, int, int] = common.identity
        if not self.meta.checksummed:  # a plain HDF5/netCDF file: nothing to verify against
            self.verify = False
        self.backend = get_backend(common.backend)
        self.routing: readplan.Routing = common.routing
        self._runs_by_var = self.routing.by_var()
        names = list(self.meta.variables)  # the extent table's variable order (ckptio.model.extent_table)
        self._var_index = {n: i for i, n in enumerate(names)}
        self.table: ExtentTable | None = ExtentTable.from_arrays(own["table"]) if own["table"] is not None else None
        self.segments: dict[str, tuple[int, int]] = own["segments"]
        self.variables = variable_infos(self.meta)
        self._itemsizes = np.array([self.meta.variables[n].itemsize for n in names] or [1], np.int64)
        self.hints = chosen[0].hints
        for key, value in self.backend.extra_hints.items():
            self.hints.setdefault(key, value)
        self.buffer_bytes: int = chosen[0].buffer_bytes
        self.read_io: str = chosen[0].read_io  # how the aggregators open the file (agreed at open)
        self.stripe_unit = stripe_unit(self.meta)
        self.aggregators = [int(a) for a in self.routing.aggregators]
        self._agg_comm = comms.subset(comm, comm.Get_rank() in self.aggregators)
        self._extent_reader = None
        self._p2p_comm = None  # the exchange's communicator (a duplicate), made by the first exchange
        self._opened = False
        self._checker = (parts.PartChecker(path, self.table, self.meta.variables) if self.table is not None
                         else None)
        self._direct_pieces: set[int] = set()  # this read's pieces read straight into the outputs
        self.stats = ReadStats(**placement_stats.rank_placement(self.aggregators, comm.Get_rank()))

    @without_gc
    def read(self, check: Callable[[], tuple[list[Request], list[np.ndarray | None]]]) -> list[np.ndarray]:
        """Collective over ``comm``: ``check()`` (this rank's requests and the arrays to fill, checked: agreed as
        the read's first phase), route the requests, let the aggregators plan, then read and exchange round by
        round, reading round k+1 while round k is exchanged where the extent reader allows
        (:mod:`ckptio.engine.readpipe`)."""
        faults = resource.getrusage(resource.RUSAGE_SELF)
        fresh, recycled = restart_memory.RECYCLED.fresh, restart_memory.RECYCLED.reused
        try:
            return self._read(check)
        finally:
            now = resource.getrusage(resource.RUSAGE_SELF)
            self.stats.page_faults += now.ru_minflt - faults.ru_minflt
            self.stats.major_faults += now.ru_majflt - faults.ru_majflt
            self.stats.fresh_outputs += restart_memory.RECYCLED.fresh - fresh
            self.stats.recycled_outputs += restart_memory.RECYCLED.reused - recycled

    def _read(self, check: Callable[[], tuple[list[Request], list[np.ndarray | None]]]) -> list[np.ndarray]:
        """Collective over ``comm``: :meth:`read` (page faults not counted)."""
        comm = self.comm
        t, c = time.perf_counter(), time.process_time()
        mine, given = coord.run(comm, f"read {self.path}: requests", check)
        nd = self.routing.ndim
        records = readplan.records_of(mine, self._var_index, nd)
        routed = readplan.route_requests(records, self.routing, self._runs_by_var)
        to_rank: dict[int, np.ndarray] = {self.aggregators[a]: r for a, r in enumerate(routed) if len(r)}
        received = exchange.exchange_records(comm, to_rank, records.shape[1])
        plan = coord.run(comm, f"read {self.path}: plan", lambda: self._plan(received))
        descriptors = exchange.exchange_records(comm, plan.descriptors_by_dest() if plan is not None else {},
                                                2 + 2 * nd)
        nrounds = exchange.max_over_ranks(comm, plan.nrounds if plan is not None else 0)
        incoming = readplan.parse_descriptors(descriptors, nd, nrounds)
        outputs = coord.run(comm, f"read {self.path}: allocate", lambda: [
            g if g is not None else restart_memory.empty(q.box.shape, self.variables[q.var].dtype)
            for q, g in zip(mine, given, strict=True)])
        self.stats.seconds["plan"] += time.perf_counter() - t
        self.stats.seconds["cpu_plan"] += time.process_time() - c
        self._ensure_open(nrounds > 0)
        t_data, c_data = time.perf_counter(), time.process_time()
        loader, direct = None, {}
        self._direct_pieces = set()
        if plan is not None and nrounds > 0:
            if self._extent_reader.independent:
                direct, self._direct_pieces = parts.direct_parts(self._checker, plan, records, outputs,
                                                                 comm.Get_rank(), nd, self.verify)
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

    def close(self) -> None:
        """Collective over ``comm``: close the file on the aggregators (collective over their sub-communicator)
        and free the derived communicators. The caller agreed first (``Reader.close``)."""
        if self._extent_reader is not None:
            self._extent_reader.close()
            self._extent_reader = None
        comms.free(self._agg_comm)
        self._agg_comm = None
        comms.free(self._p2p_comm)  # every rank made it in the same (first) exchange
        self._p2p_comm = None

    # ------------------------------------------------------------------------------------------ helpers
    def _ensure_open(self, needed: bool) -> None:
        """Collective over ``comm``: the aggregators open the file the first time data must be read."""
        if not needed or self._opened:  # the same answer on every rank, so all skip or all agree
            return
        error = None
        # CKPTIO_READ_IO (agreed at open): "posix", each aggregator opens on its own (no communicator); "mpiio",
        # the aggregators open the file together through MPI-IO
        together = self.read_io == "mpiio"
        if self._agg_comm is not None:
            try:
                self.check_identity()
            except BaseException as exc:  # agreed on below
                error = exc
        if together:  # a collective open follows: no aggregator may enter it while another stopped before it
            coord.agree(self.comm, f"read {self.path}: the file is the one described at open", error)
        if self._agg_comm is not None and error is None:
            try:
                info = hintsmod.to_info(hintsmod.read_hints(self.hints) if together else self.hints)
                try:
                    self._extent_reader = self.backend.open_extents(
                        self.path, self._agg_comm if together else None, info, self.meta)
                    self.stats.opened_file = True
                    self.check_identity()  # what was opened is what rank 0 described (the file is held from now on)
                finally:
                    info.Free()
            except BaseException as exc:  # agreed on by every rank just below
                error = exc
        coord.agree(self.comm, f"read {self.path}: open file on aggregators", error)
        self._opened = True

    def check_identity(self) -> None:
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

    def _load_round(self, plan: readplan.AggregatorPlan, k: int, slot: int,
                    direct: Mapping[int, list[tuple[int, np.ndarray]]]) -> dict[int, np.ndarray]:
        """Local, an aggregator (in the reading thread where there is one): read round ``k``'s parts into buffer
        ``slot`` (and the stretches in ``direct`` straight into the outputs, see
        :func:`~ckptio.engine.restart_parts.direct_parts`); the parts' arrays by part index (the bytes read
        straight into an output are missing from a split part's array: the exchange does not copy those pieces).
        The calling thread verifies them (:meth:`_verify_round`) while this thread reads the next round. A
        collective extent reader is called in every round, also with nothing to read (the other aggregators'
        reads are collective over their communicator)."""
        round_parts = plan.rounds[k] if k < plan.nrounds else []
        if not round_parts and self._extent_reader.independent:
            return {}
        t, c = time.perf_counter(), time.thread_time()
        extents = [parts.part_extent(self.path, self.table, plan.parts[p]) for p in round_parts]
        if direct:
            data, calls = self._extent_reader.read(extents, slot=slot, into=[direct.get(p) for p in round_parts])
        else:
            data, calls = self._extent_reader.read(extents, slot=slot)
        self.stats.seconds["io"] += time.perf_counter() - t
        self.stats.seconds["cpu_io"] += time.thread_time() - c
        self.stats.file_bytes += sum(e.nbytes for e in extents)
        self.stats.direct_bytes += sum(d.nbytes for p in round_parts for _, d in direct.get(p, ()))
        self.stats.file_calls += calls
        return dict(zip(round_parts, data, strict=True))

    def _verify_round(self, plan: readplan.AggregatorPlan, arrays: Mapping[int, np.ndarray],
                      direct: Mapping[int, list[tuple[int, np.ndarray]]]) -> BaseException | None:
        """Local, an aggregator, in the calling thread: check the checksums of a round's parts as read
        (``arrays``, by part index, in the plan's order: a block streamed across rounds is hashed in round
        order), before any of their bytes is sent; this rank's failure (agreed on after the round's exchange) or
        None."""
        if not self.verify:
            return None
        t, c = time.perf_counter(), time.thread_time()
        try:
            for p, arr in arrays.items():
                stretches = direct.get(p)
                if stretches and memtypes.address(arr) != memtypes.address(stretches[0][1]):  # split: arr has holes
                    self._checker.verify_split(plan.parts[p], arr.reshape(-1).view(np.uint8), stretches)
                else:
                    self._checker.verify_part(plan.parts[p], arr)
        except BaseException as exc:  # agreed on by the caller after the exchange
            return exc
        finally:
            self.stats.seconds["verify"] += time.perf_counter() - t
            self.stats.seconds["cpu_verify"] += time.thread_time() - c
        return None

    def _plan(self, received: list[np.ndarray]) -> readplan.AggregatorPlan | None:
        """Local: an aggregator's plan for the requests it received (None elsewhere)."""
        if self.table is None:
            if any(len(r) for r in received):
                raise AssertionError("a rank that is not a restart aggregator received read requests")
            return None
        return readplan.match_requests(self.table, received, self._itemsizes, self.buffer_bytes)

    def _exchange(self, k: int, plan: readplan.AggregatorPlan | None, incoming: Mapping[int, np.ndarray],
                  arrays: Mapping[int, np.ndarray], records: np.ndarray, outputs: list[np.ndarray],
                  error: BaseException | None) -> BaseException | None:
        """Collective over ``comm``: round ``k``'s exchange, moving every piece from its aggregator to the rank that
        asked (:func:`ckptio.coord.exchange.move_pieces`).

        ``plan``: this rank's aggregator plan (None elsewhere); ``incoming``: per source, the descriptors
        ``[qi, lo, shape]`` of what it sends this rank in this round, in the order it sends them; ``arrays``:
        the round's parts as read, by part index; ``records``: this rank's padded requests. ``error``: this
        rank's failure so far in the round (its read or checksum). A failure while preparing is added; the ranks
        then skip the data movement together and the round's error (or None) is returned for the agreement that
        follows. Pieces an aggregator holds for itself skip MPI: read straight into the output, else one copy
        from the part into the output."""
        me, nd = self.comm.Get_rank(), self.routing.ndim
        send: dict[int, Any] = {}
        recv: dict[int, Any] = {}
        if error is None:
            try:
                if plan is not None and len(plan.piece_round):
                    send = parts.send_streams(self.table, k, plan, arrays, records, outputs, me, nd,
                                              self._direct_pieces)
                recv = parts.recv_streams(incoming, records, outputs, me, nd)
            except BaseException as exc:  # agreed on by the caller, after move_pieces' status check
                error = exc
        if self._p2p_comm is None:  # collective: every rank reaches its first exchange
            self._p2p_comm = comms.duplicate(self.comm)
        error, messages = exchange.move_pieces(self.comm, self._p2p_comm, k % 32768, send, recv, error)
        if error is None:
            self.stats.messages += messages
            self.stats.bytes_sent += sum(st.nbytes for st in send.values())
            self.stats.bytes_received += sum(st.nbytes for st in recv.values())
        return error

