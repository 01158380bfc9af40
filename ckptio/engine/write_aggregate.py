"""ckptio's own collective buffering on the write side (issue 29, item 1): the mirror of the two-phase restart.

::

      every rank (its own pieces)                      aggregators only (A of P)
    --------------------------------------------     -----------------------------------------------------
    Backend.placed_pieces: (file offset, array)
    cut at the domains and rounds                     (model.write_domains: stripe-cyclic on a striped file,
                                                       whole rank regions elsewhere)
    descriptors [offset, position, length]   ---->    rounds: what arrives from whom, where it goes
                    (sparse exchange: O(peers) per rank, no P-sized array)
    round k: Isend its pieces of round k     ---->    Irecv into round buffer k % 2 (what others send: at most
             (zero-copy: datatypes over the            round_bytes); own pieces: no MPI, no round buffer
              caller's arrays, strided views too)      write round k, calls of <= 1 MiB (pwritev in a
                                                       helper thread while round k+1 is received; or
                                                       MPI_File_write_at in the calling thread)
    agree after every round: a failed write on one aggregator is the error of every rank at the next round

When no rank sends any other a byte (agreed with the round count: every rank's pieces lie in its own domain, as
with one aggregator per rank on an unstriped file), the rounds are the aggregators' own: each writes its rounds
through the same pipeline with no collective between them, and only the last agreement remains. Nothing can wait
for a peer there, and the job no longer pays every round's slowest rank.

Only the aggregators open and write the file (``Backend.create`` on them alone); the planning rank is always one
(it writes the header, and the index and trailer in the commit). Every collective goes through
:mod:`ckptio.coord` (agreement, the sparse descriptor exchange, the matched point-to-point rounds); the local
work is :mod:`ckptio.engine.write_rounds` and :mod:`ckptio.engine.writepipe`.

What a rank computes and receives is O(its pieces + the aggregators): descriptors go only to the aggregators a
rank's bytes reach, and an aggregator receives the descriptors of its own domain.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ckptio import coord, settings
from ckptio.backends.base import RangeWriter
from ckptio.coord import exchange
from ckptio.coord import hints as hintsmod
from ckptio.engine import fslayout
from ckptio.engine.write_rounds import STAGE_BYTES, WIDTH, AggregatorPlan, SenderPlan
from ckptio.engine.writepipe import RoundWriter, threads_allowed
from ckptio.model import units
from ckptio.model.write_domains import (
    RankDomain,
    StripeLayout,
    WriteDomains,
    contiguous_domains,
    cyclic_domains,
    node_ids,
)

WRITE_IO_ENV = "CKPTIO_WRITE_IO"  # posix (default), mpiio, write_all (the backend's own collective write)
DESCRIPTOR_TAG = 32767  # the rounds use tags k mod 32767
SECONDS = ("write_plan", "write_exchange", "write_exchange_cpu", "write_io", "write_io_cpu", "write_wait")


class AggregatedWrite:
    """One checkpoint's data, written by the write aggregators. :meth:`run` is collective over ``comm``;
    ``p2p`` is a private duplicate of it (the exchange's messages), ``ranges`` this rank's byte-range writer on an
    aggregator (None elsewhere), ``own`` its part of contiguous domains (None for cyclic ones)."""

    def __init__(self, comm, p2p, domains: WriteDomains, own: RankDomain | None, ranges: RangeWriter | None,
                 where: str):
        self.comm, self.p2p, self.domains, self.own, self.where = comm, p2p, domains, own, where
        self.me = comm.Get_rank()
        self.ranges = ranges if self.me in domains.aggregators else None
        self._missing_writer = self.me in domains.aggregators and ranges is None  # raised in the first phase
        self.seconds: dict[str, float] = dict.fromkeys(SECONDS, 0.0)
        self.counts = {"bytes_sent": 0, "bytes_received": 0, "messages": 0, "rounds": 0, "file_bytes": 0,
                       "file_calls": 0, "own_bytes": 0, "writebacks": 0}
        self.storage_bytes: int | None = 0  # what the helper thread's writes moved to storage (placement)
        self.threaded = False
        self.exchanged = True  # whether any rank sent another a piece (agreed with the round count)

    def run(self, describe: Callable[[], Sequence[tuple[int, np.ndarray]]]) -> None:
        """Collective over ``comm``: ``describe()`` (this rank's pieces: agreed as the first phase), the descriptor
        exchange, the aggregators' round plans (agreed), the round count and whether any rank sends another
        anything (one reduction), then the rounds, each agreed (or, when nothing moves between ranks, each
        aggregator's own rounds with no collective: :meth:`_own_rounds`); the last writes are waited for and
        agreed on. Raises the same error on every rank."""
        comm, where = self.comm, self.where
        t = time.perf_counter()
        def cut() -> SenderPlan:
            if self._missing_writer:
                raise AssertionError("a write aggregator without a byte-range writer")
            return SenderPlan(describe(), self.domains, self.own, self.me)

        sender: SenderPlan = coord.run(comm, f"{where}: write data (cut the pieces at the aggregators' domains)", cut)
        received = exchange.sparse_records(self.p2p, sender.descriptors(), WIDTH, DESCRIPTOR_TAG)
        plan: AggregatorPlan | None = None
        local_rounds = sender.nrounds

        def plan_rounds() -> int:
            nonlocal plan
            if self.ranges is not None:
                plan = AggregatorPlan(received, sender, self.domains.round_bytes, self.domains.cell)
                return plan.nrounds
            if any(len(r) for r in received.values()):
                raise AssertionError("a rank that is not a write aggregator received pieces")
            return 0

        local_rounds = max(local_rounds, coord.run(comm, f"{where}: write data (plan the rounds)", plan_rounds))
        moves = int(len(sender.sent) > 0 or (plan is not None and len(plan.rows) > 0))
        nrounds, moved = exchange.maxima_over_ranks(comm, (local_rounds, moves))
        self.exchanged = bool(moved)
        pipe = None
        if plan is not None:
            self.threaded = nrounds > 1 and self.ranges.independent and threads_allowed()
            pipe = RoundWriter(self.ranges, self.threaded, self.seconds, min(STAGE_BYTES, self.domains.round_bytes))
        self.seconds["write_plan"] += time.perf_counter() - t
        try:
            error = None
            if moved:
                for k in range(nrounds):
                    self._round(k, nrounds, sender, plan, pipe)
            elif plan is not None:
                error = self._own_rounds(sender, plan, pipe)
            finished = pipe.finish() if pipe is not None else None
            coord.agree(comm, f"{where}: write data (the last writes)", error or finished)
        finally:
            if pipe is not None:
                pipe.close()
                self.counts["file_bytes"] += pipe.file_bytes
                self.counts["file_calls"] += pipe.file_calls
                self.counts["writebacks"] += getattr(self.ranges, "writebacks", 0)  # (a writer may lack it)
                self.storage_bytes = pipe.storage_bytes if pipe.threaded else 0

    def _round(self, k: int, nrounds: int, sender: SenderPlan, plan: AggregatorPlan | None,
               pipe: RoundWriter | None) -> None:
        """Collective over ``comm``: round ``k``: this rank's messages of the round (and, on an aggregator, its
        buffer for the round once the write from it two rounds ago is done), the matched point-to-point
        exchange, the round's write handed over (or made), then the round's agreement."""
        t, c = time.perf_counter(), time.thread_time()
        before = {key: self.seconds[key] for key in ("write_wait", "write_io", "write_io_cpu")}
        error = pipe.wait(k - 2) if pipe is not None else None  # slot k % 2 is free again
        send: dict[int, Any] = {}
        recv: dict[int, Any] = {}
        if error is None:
            try:
                send = sender.streams(k)
                if plan is not None:
                    recv = plan.receives(k)
            except BaseException as exc:  # agreed on below, after move_pieces' status check
                error = exc
        error, messages = exchange.move_pieces(self.comm, self.p2p, k % DESCRIPTOR_TAG, send, recv, error)
        if error is None:
            self.counts["messages"] += messages
            self.counts["bytes_sent"] += sum(s.nbytes for s in send.values())
            self.counts["bytes_received"] += sum(s.nbytes for s in recv.values())
            if plan is not None:
                error = self._submit(k, sender, plan, pipe)  # (agreed on below)
        self.counts["rounds"] += 1
        inline = pipe is not None and not pipe.threaded  # the write was made here: it is counted as write_io
        waited = self.seconds["write_wait"] - before["write_wait"]
        wrote = (self.seconds["write_io"] - before["write_io"]) if inline else 0.0
        wrote_cpu = (self.seconds["write_io_cpu"] - before["write_io_cpu"]) if inline else 0.0
        self.seconds["write_exchange"] += time.perf_counter() - t - waited - wrote
        self.seconds["write_exchange_cpu"] += time.thread_time() - c - wrote_cpu
        coord.agree(self.comm, f"{self.where}: write data (round {k + 1} of {nrounds})", error)

    def _own_rounds(self, sender: SenderPlan, plan: AggregatorPlan, pipe: RoundWriter) -> BaseException | None:
        """Local (an aggregator, when the agreed answer is that no rank sends any other a byte: every rank's
        region is in its own domain, e.g. one aggregator per rank on an unstriped file): its own rounds, handed to
        the pipeline one after another with no collective between them, so no rank waits for another's write
        until the final agreement. At most two rounds are in the pipeline, as in the exchange. A signal held since
        the write began (a batch system's warning) is delivered before each round, as the exchange's agreements
        deliver it, so its handler's error stops the writes within a round and the watchdog of
        ``CKPTIO_SIGNAL_GRACE`` sees progress. Returns the first failure (the rounds stop there), for the final
        agreement, where every rank raises it."""
        for k in range(plan.nrounds):
            error = coord.deliver_held_signals() or pipe.wait(k - 2)
            if error is None:
                error = self._submit(k, sender, plan, pipe)
            self.counts["rounds"] += 1
            if error is not None:
                return error
        return None

    def _submit(self, k: int, sender: SenderPlan, plan: AggregatorPlan, pipe: RoundWriter) -> BaseException | None:
        """Local (an aggregator): round ``k``'s writes handed to the pipeline (or made at once); this rank's
        failure (for the caller's agreement), or None."""
        try:
            runs = plan.runs(k)
            self.counts["own_bytes"] += int(sender.own.length[sender.own.round == k].sum())
            return pipe.submit(k, runs)
        except BaseException as exc:  # agreed on by the caller
            return exc

    def statistics(self) -> dict[str, Any]:
        """Local: this rank's figures of the write (seconds, bytes, calls) for the index report."""
        return {"seconds": dict(self.seconds), **self.counts, "threaded": self.threaded,
                "aggregator": self.ranges is not None, "exchanged": self.exchanged}


# ------------------------------------------------------------------------------ the planning rank's choices
DEFAULT_BUFFER_BYTES = 64 << 20
STRIPED = ("cephfs", "lustre")  # file systems whose layout read back gives stripe-cyclic domains


def aggregated_io(backend: Any) -> str | None:
    """Local (the planning rank, inside the declare phase): how the data of a checkpoint of ``backend`` is
    written: ``"posix"``/``"mpiio"`` through ckptio's write aggregators (a backend whose bytes ckptio places,
    ``Capabilities.placed_bytes``, unless ``CKPTIO_WRITE_IO=write_all``), None by the backend's own steps."""
    io = settings.get(WRITE_IO_ENV)
    return io if backend.capabilities.placed_bytes and io != "write_all" else None


def aggregator_override(user_hints: Mapping[str, Any] | None) -> int | None:
    """Local: the write aggregator count the user forced: ``CKPTIO_WRITE_AGGREGATORS``, else an explicit
    ``cb_nodes`` hint (``hints=`` or ``CKPTIO_HINTS``), else None (the automatic choice)."""
    count = settings.get("CKPTIO_WRITE_AGGREGATORS")
    if count is not None:
        return int(count)
    explicit = {**{str(k): str(v) for k, v in (user_hints or {}).items()},
                **hintsmod.parse_hint_string(settings.raw(hintsmod.ENV_HINTS))}
    if "cb_nodes" in explicit:
        return units.parse_count(explicit["cb_nodes"], "hint cb_nodes")
    return None


def buffer_bytes() -> int:
    """Local: the round buffer of a write aggregator (``CKPTIO_WRITE_BUFFER_BYTES``, default 64 MiB)."""
    return settings.get("CKPTIO_WRITE_BUFFER_BYTES") or DEFAULT_BUFFER_BYTES


def planned_contiguous(spans: np.ndarray, hosts: Sequence[str], hints: Mapping[str, str], cell: int,
                       user_hints: Mapping[str, Any] | None) -> tuple[WriteDomains, list[RankDomain]]:
    """The planning rank, in the declare phase: contiguous domains (every rank's share gets its
    :class:`RankDomain`), used when the file turns out to have no striped layout."""
    stripe_count, _unit = hintsmod.stripe_layout(hints)
    return contiguous_domains(spans, node_ids(hosts), stripe_count, aggregator_override(user_hints), cell,
                              buffer_bytes())


def domains_for_file(tmp: str, record: Mapping[str, Any] | None, hosts: Sequence[str],
                     contiguous: WriteDomains, user_hints: Mapping[str, Any] | None) -> WriteDomains:
    """The planning rank, once the empty file exists with its layout (``fslayout.prepare``): stripe-cyclic
    domains over the layout the file system reports for it (CephFS, Lustre), else ``contiguous``."""
    fs = record.get("type") if record else None
    layout = StripeLayout.from_record(fslayout.read_back(tmp, fs)) if fs in STRIPED else None
    if layout is None:
        return contiguous
    return cyclic_domains(len(hosts), node_ids(hosts), layout, aggregator_override(user_hints), buffer_bytes())


def describe(domains: WriteDomains) -> dict[str, Any]:
    """The write domains as the document records them (``stats.write.aggregation``): O(aggregators)."""
    return {"kind": domains.kind, "aggregators": list(domains.aggregators), "cell": domains.cell,
            "round_bytes": domains.round_bytes, "stripe_count": domains.stripe_count,
            "units_per_object": domains.units_per_object}
