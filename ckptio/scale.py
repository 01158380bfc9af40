"""The scale harness: the restart control plane's cost for ONE simulated rank of a large job, measured by running
the real per-rank code paths (:mod:`ckptio.readplan`, :mod:`ckptio.extent_table`, :func:`ckptio.meta.loads`)
with what the collectives would deliver to that rank. No MPI, no data: ``ckptio plan`` runs it for 100,000
ranks on a laptop.

The job is FLASH-like: ``nvars`` variables of shape ``(ranks * rows, 16, 16, 16)`` float64, one block of
``rows`` leading rows per variable per rank, written by the native backend rank-major (each rank's blocks
contiguous), restarted by the same number of ranks with the same decomposition (every rank reads its own
blocks of every variable in one ``read_many``).

Three ranks are measured (seconds, and the growth of the peak resident memory while the step runs):

* **rank 0 at open**: parse and validate the metadata document, build the extent table, choose aggregators,
  partition the table, cut each aggregator's rows out and build every rank's segment info;
* **an aggregator per read**: match the requests the routing sends it (those of the ranks whose blocks it
  owns: computed here by routing every candidate rank's requests with the real code) against its rows, plan
  parts, rounds and pieces, and produce every destination's descriptors;
* **any rank per read**: build and route its requests, the Alltoall count vectors (O(ranks): what MPI needs),
  parse the descriptors it receives.
"""

from __future__ import annotations

import gc
import json
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import extent_table, readplan
from . import meta as metamod
from .plan import choose_aggregators

ROW_BYTES = 16 * 16 * 16 * 8  # one FLASH block of one variable (16^3 doubles)


@dataclass
class Measured:
    seconds: float
    peak_bytes: int

    def to_json(self) -> dict[str, float]:
        return {"seconds": round(self.seconds, 4), "peak_MiB": round(self.peak_bytes / 2**20, 2)}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"no {field} in /proc/self/status")


def _reset_peak() -> bool:
    """Reset this process's RSS high-water mark (Linux: ``echo 5 > /proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure(fn: Callable[[], Any]) -> tuple[Any, Measured]:
    """Run ``fn`` once: its wall time and the growth of the process's peak resident memory during it (RSS
    high-water mark reset before, Linux), which counts what a rank would really hold; elsewhere the peak of
    Python allocations (tracemalloc, which slows allocation-heavy code several times)."""
    gc.collect()
    if _reset_peak():
        base = _status_kib("VmRSS")
        t = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - t
        return result, Measured(seconds, max(0, _status_kib("VmHWM") - base) * 1024)
    tracemalloc.start()
    t = time.perf_counter()
    try:
        result = fn()
        seconds = time.perf_counter() - t
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, Measured(seconds, peak)


def flash_like_document(ranks: int, total_bytes: int, nvars: int = 24, data_start: int = 1 << 20) -> bytes:
    """The native metadata document of the FLASH-like job (as rank 0 reads it from the file's index)."""
    rows = max(1, round(total_bytes / (ranks * nvars * ROW_BYTES)))
    block = rows * ROW_BYTES
    rng = np.random.default_rng(0)
    sums = [f"{x:016x}" for x in rng.integers(0, 2**63, size=min(ranks * nvars, 1 << 16)).tolist()]
    variables = {}
    for v in range(nvars):
        variables[f"var{v:02d}"] = {
            "dtype": "<f8", "kind": "array", "shape": [ranks * rows, 16, 16, 16],
            "blocks": [{"rank": r, "offset": [r * rows, 0, 0, 0], "shape": [rows, 16, 16, 16],
                        "checksum": sums[(r * nvars + v) % len(sums)], "codec": None,
                        "file_offset": data_start + (r * nvars + v) * block, "stored_nbytes": block}
                       for r in range(ranks)]}
    doc = {"schema": metamod.SCHEMA_VERSION, "backend": "mpiio", "nprocs": ranks, "attrs": {}, "checksum":
           metamod.CHECKSUM_ALGORITHM, "layout": {"stripe_count": 80, "stripe_unit": 1 << 20}, "variables": variables}
    return json.dumps(doc, separators=(",", ":")).encode()


def restart_control_plane(ranks: int, total_bytes: int, nvars: int = 24, ranks_per_node: int = 16,
                          stripe_count: int = 80, buffer_bytes: int = 64 << 20) -> dict[str, Any]:
    """Measure rank 0's open and one aggregator's and one other rank's per-read control plane (see module)."""
    document = flash_like_document(ranks, total_bytes, nvars)
    rows = max(1, round(total_bytes / (ranks * nvars * ROW_BYTES)))

    def open_on_rank0():
        meta = metamod.loads(document)
        table = extent_table.from_blocks(meta)
        aggs = choose_aggregators(ranks, [r // ranks_per_node for r in range(ranks)], stripe_count)
        owner, routing = readplan.partition(table, aggs, 1 << 20)
        parts = readplan.rows_of_aggregators(owner, len(aggs))
        per_aggregator = [table.take(p) for p in parts]
        return table, aggs, routing, per_aggregator

    (table, aggs, routing, per_aggregator), rank0 = measure(open_on_rank0)
    document = b""  # rank 0 drops the document once the table is built
    nd = table.ndim
    by_var = routing.by_var()

    def requests_of(rank: int) -> np.ndarray:
        return readplan.request_records([(v, np.array([rank * rows, 0, 0, 0]), np.array([rows, 16, 16, 16]))
                                         for v in range(nvars)], nd)

    # the aggregator in the middle of the job; the ranks that route to it are those whose blocks meet its rows
    a = len(aggs) // 2
    mine = per_aggregator[a]
    first, last = int(mine.lo[:, 0].min()) // rows, -(-int((mine.lo[:, 0] + mine.shape[:, 0]).max()) // rows)
    received = {}
    for r in range(max(0, first - 1), min(ranks, last + 1)):
        recs = readplan.route_requests(requests_of(r), routing, by_var)[a]
        if len(recs):
            received[r] = recs
    empty = np.zeros((0, 2 + 2 * nd), np.int64)
    inbox = [received.get(r, empty) for r in range(ranks)]
    itemsizes = np.full(len(table.names), 8, np.int64)

    def plan_on_aggregator():
        plan = readplan.match_requests(mine, inbox, itemsizes, buffer_bytes)
        return plan, plan.descriptors_for(ranks)

    (plan, descriptors), aggregator = measure(plan_on_aggregator)
    other = max(received) if received else 0
    from_aggs = [empty] * ranks
    from_aggs[aggs[a]] = descriptors[other]

    def read_on_any_rank():
        records = requests_of(other)
        routed = readplan.route_requests(records, routing, by_var)
        counts = [np.zeros(ranks, np.int64) for _ in range(4)]  # Alltoall send/receive counts, twice
        incoming = readplan.parse_descriptors(from_aggs, nd, plan.nrounds)
        return routed, counts, incoming

    _, any_rank = measure(read_on_any_rank)
    broadcast = routing.memory_bytes() + sum(len(n) for n in table.names)
    return {
        "ranks": ranks, "bytes": total_bytes, "variables": nvars, "blocks": len(table),
        "aggregators": len(aggs), "rounds": plan.nrounds, "ranks_routed_to_aggregator": len(received),
        "rank0_open": rank0.to_json(), "aggregator_per_read": aggregator.to_json(), "any_rank_per_read":
        any_rank.to_json(), "broadcast_to_every_rank_bytes": broadcast,
        "aggregator_rows_bytes": mine.memory_bytes(), "extent_table_bytes": table.memory_bytes(),
        "block_bytes": rows * ROW_BYTES,
        "model": f"FLASH-like: {nvars} variables x one ({rows},16,16,16) float64 block per rank, native format, "
                 f"N-to-N restart, {ranks_per_node} ranks/node, stripe count {stripe_count}, buffer "
                 f"{buffer_bytes >> 20} MiB",
    }


def format_report(r: dict[str, Any]) -> str:
    """Human-readable lines of :func:`restart_control_plane`'s result."""
    def fmt(m: dict[str, float]) -> str:
        return f"{m['seconds']:8.3f} s {m['peak_MiB']:9.1f} MiB"

    return "\n".join([
        f"restart control plane per rank (measured: real per-rank code paths, one simulated rank each; {r['model']})",
        f"  rank 0, at open (parse + validate metadata, extent table, partition): {fmt(r['rank0_open'])}",
        f"  one aggregator, per read ({r['ranks_routed_to_aggregator']} ranks' requests, {r['rounds']} rounds):"
        f"   {fmt(r['aggregator_per_read'])}",
        f"  any other rank, per read (route, counts, descriptors):                {fmt(r['any_rank_per_read'])}",
        f"  broadcast to every rank at open: {r['broadcast_to_every_rank_bytes'] / 1024:.1f} KiB; an aggregator's "
        f"rows: {r['aggregator_rows_bytes'] / 2**20:.1f} MiB (whole table {r['extent_table_bytes'] / 2**20:.1f} MiB, "
        f"{r['blocks']} blocks)",
    ])
