"""The scale harness: the restart control plane's cost for ONE simulated rank of a large job, measured by running
the real per-rank code paths (:mod:`ckptio.model.readplan`, :mod:`ckptio.model.extent_table`,
:func:`ckptio.model.meta.loads`)
with what the collectives would deliver to that rank. No MPI, no data: ``ckptio plan`` runs it (100,000 ranks in
well under a minute on 2 cores) and ``benchmarks/control_plane.py`` tabulates it.

The job is FLASH-like: ``nvars`` variables of shape ``(ranks * rows, 16, 16, 16)`` float64, one block of
``rows`` leading rows per variable per rank, written by the native backend rank-major (each rank's blocks
contiguous), restarted by the same number of ranks with the same decomposition (every rank reads its own
blocks of every variable in one ``read_many``).

Three ranks are measured (wall seconds; memory: the growth of the peak RSS for rank 0's open, which runs first
in the process, and the peak of traced allocations for the per-read steps, see :func:`measure`):

* **rank 0 at open**: parse and validate the metadata document, build the extent table, choose aggregators,
  partition the table, cut each aggregator's rows out. The document is format 2's (the block table as integer
  columns); with ``open_max_ranks`` below the job's size its parse is measured at that size and scaled
  linearly, the rest at full size (the result says ``extrapolated``);
* **an aggregator per read**: match the requests the routing sends it (those of the ranks whose blocks it
  owns: computed here by routing every candidate rank's requests with the real code) against its rows, plan
  parts, rounds and pieces, and produce every destination's descriptors;
* **any rank per read**: build and route its requests, the Alltoall count vectors (O(ranks): what MPI needs),
  parse the descriptors it receives.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio.model import extent_table, readplan
from ckptio.model import meta as metamod
from ckptio.model.block_table import BlockTable
from ckptio.model.document import CHECKSUM_ALGORITHM, SCHEMA_VERSION, CheckpointDocument, LayoutRecord, VariableRecord
from ckptio.model.extent_table import ExtentTable
from ckptio.model.layout import Box
from ckptio.model.plan import Request, choose_aggregators

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


def measure(fn: Callable[[], Any], traced: bool = False) -> tuple[Any, Measured]:
    """Run ``fn`` once: its wall time and the memory it needed. Untraced: the growth of the process's peak
    resident memory during it (RSS high-water mark reset before, Linux), which counts what a rank would really
    hold, but only what did not fit in memory the process had already freed: right for a step that runs in a
    fresh process. ``traced`` (or where the mark cannot be reset): the peak of the allocations made during the
    step (tracemalloc, which numpy reports its arrays to), with the wall time of a second, untraced run
    (tracing slows allocation-heavy code several times)."""
    gc.collect()
    if not traced and _reset_peak():
        base = _status_kib("VmRSS")
        t = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - t
        return result, Measured(seconds, max(0, _status_kib("VmHWM") - base) * 1024)
    tracemalloc.start()
    try:
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    gc.collect()
    t = time.perf_counter()
    result = fn()
    return result, Measured(time.perf_counter() - t, peak)


def _rows(ranks: int, total_bytes: int, nvars: int) -> int:
    return max(1, round(total_bytes / (ranks * nvars * ROW_BYTES)))


def _checksums(ranks: int, nvars: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 2**63, size=min(ranks * nvars, 1 << 16)).astype(np.uint64)


def flash_like_document(ranks: int, total_bytes: int, nvars: int = 24, data_start: int = 1 << 20,
                        schema: int = SCHEMA_VERSION) -> bytes:
    """The native metadata document of the FLASH-like job (as rank 0 reads it from the file's index), in the
    current schema (columnar block table) or, with ``schema=1``, one JSON object per block as before."""
    rows = _rows(ranks, total_bytes, nvars)
    block = rows * ROW_BYTES
    sums = _checksums(ranks, nvars)
    r = np.arange(ranks, dtype=np.int64)
    offset = np.zeros((ranks, 4), np.int64)
    offset[:, 0] = r * rows
    shape = np.tile(np.array([rows, 16, 16, 16], np.int64), (ranks, 1))
    variables = {}
    for v in range(nvars):
        table = BlockTable(r, offset, shape, sums[(r * nvars + v) % len(sums)],
                           data_start + (r * nvars + v) * block, np.full(ranks, block, np.int64),
                           np.full(ranks, -1, np.int64), [])
        variables[f"var{v:02d}"] = VariableRecord("<f8", (ranks * rows, 16, 16, 16), "array", table, ranks)
    doc = CheckpointDocument(schema, "mpiio", ranks, CHECKSUM_ALGORITHM, {}, variables,
                             layout=LayoutRecord(stripe_count=80, stripe_unit=1 << 20))
    return metamod.dumps(doc)


def flash_like_table(ranks: int, total_bytes: int, nvars: int = 24, data_start: int = 1 << 20) -> ExtentTable:
    """The extent table rank 0 builds from :func:`flash_like_document` (``extent_table.from_blocks`` of the parsed
    document; ``tests/test_simulate.py`` checks they are equal), built directly from columns: the input of the
    partition step when the document itself is too large to parse within ``ckptio plan``'s budget."""
    rows = _rows(ranks, total_bytes, nvars)
    n = ranks * nvars
    rank = np.repeat(np.arange(ranks, dtype=np.int64), nvars)
    var = np.tile(np.arange(nvars, dtype=np.int32), ranks)
    lo = np.zeros((n, 4), np.int64)
    lo[:, 0] = rank * rows
    shape = np.full((n, 4), 16, np.int64)
    shape[:, 0] = rows
    sums = _checksums(ranks, nvars)
    return ExtentTable([f"var{v:02d}" for v in range(nvars)], np.full(nvars, 4, np.int32), [], var, lo, shape,
                       data_start + np.arange(n, dtype=np.int64) * rows * ROW_BYTES,
                       np.full(n, rows * ROW_BYTES, np.int64), np.full(n, -1, np.int16),
                       np.arange(n + 1, dtype=np.int64), rank.copy(), rank.astype(np.int32), lo.copy(), shape.copy(),
                       sums[np.arange(n) % len(sums)])


def restart_control_plane(ranks: int, total_bytes: int, nvars: int = 24, ranks_per_node: int = 16,
                          stripe_count: int = 80, buffer_bytes: int = 64 << 20,
                          open_max_ranks: int | None = None, aggregators: int | None = None) -> dict[str, Any]:
    """Measure rank 0's open and one aggregator's and one other rank's per-read control plane (see module).

    With ``open_max_ranks`` below ``ranks``, the part of rank 0's open that parses and validates the metadata
    document and builds the extent table from it is measured on the same job
    (same block size) at ``open_max_ranks`` ranks; the rest of the open (the partition) and everything per read
    run at full size on the table that step would have built (:func:`flash_like_table`). ``rank0_open`` then
    says ``extrapolated``: the parse's time and peak scaled linearly in blocks, plus the measured partition."""
    rows = _rows(ranks, total_bytes, nvars)

    def partition(table: ExtentTable):
        aggs = choose_aggregators(ranks, [r // ranks_per_node for r in range(ranks)], stripe_count, aggregators)
        owner, routing = readplan.partition(table, aggs, 1 << 20)
        parts = readplan.rows_of_aggregators(owner, len(aggs))
        return aggs, routing, [table.take(p) for p in parts]

    full = open_max_ranks is None or ranks <= open_max_ranks
    parse_ranks = ranks if full else max(1, open_max_ranks)
    document = flash_like_document(parse_ranks, rows * parse_ranks * nvars * ROW_BYTES, nvars)
    document_bytes = len(document)
    parse = part = None
    if full:
        def open_on_rank0():
            table = extent_table.from_blocks(metamod.loads(document))
            return (table, *partition(table))

        (table, aggs, routing, per_aggregator), rank0 = measure(open_on_rank0)
        document = b""  # rank 0 drops the document once the table is built
    else:
        _, parse = measure(lambda: extent_table.from_blocks(metamod.loads(document)))
        document = b""
        table = flash_like_table(ranks, total_bytes, nvars)
        (aggs, routing, per_aggregator), part = measure(lambda: partition(table))
        factor = ranks / parse_ranks
        rank0 = Measured(parse.seconds * factor + part.seconds,
                         int(max(parse.peak_bytes * factor, part.peak_bytes + table.memory_bytes())))
    nd = table.ndim
    by_var = routing.by_var()

    var_index = {str(v): v for v in range(nvars)}

    def requests_of(rank: int) -> np.ndarray:  # (the records as Restart.read builds them)
        return readplan.records_of([Request(str(v), Box((rank * rows, 0, 0, 0), (rows, 16, 16, 16)))
                                    for v in range(nvars)], var_index, nd)

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

    (plan, descriptors), aggregator = measure(plan_on_aggregator, traced=True)
    other = max(received) if received else 0
    from_aggs = [empty] * ranks
    from_aggs[aggs[a]] = descriptors[other]

    def read_on_any_rank():
        records = requests_of(other)
        routed = readplan.route_requests(records, routing, by_var)
        counts = [np.zeros(ranks, np.int64) for _ in range(4)]  # Alltoall send/receive counts, twice
        incoming = readplan.parse_descriptors(from_aggs, nd, plan.nrounds)
        return routed, counts, incoming

    _, any_rank = measure(read_on_any_rank, traced=True)
    broadcast = routing.memory_bytes() + sum(len(n) for n in table.names)
    out = {
        "ranks": ranks, "bytes": total_bytes, "variables": nvars, "blocks": len(table),
        "aggregators": len(aggs), "rounds": plan.nrounds, "ranks_routed_to_aggregator": len(received),
        "rank0_open": rank0.to_json() | {"extrapolated": not full}, "aggregator_per_read": aggregator.to_json(),
        "any_rank_per_read": any_rank.to_json(), "broadcast_to_every_rank_bytes": broadcast,
        "aggregator_rows_bytes": mine.memory_bytes(), "extent_table_bytes": table.memory_bytes(),
        "block_bytes": rows * ROW_BYTES, "metadata_document_bytes": round(document_bytes * ranks / parse_ranks),
        "model": f"FLASH-like: {nvars} variables x one ({rows},16,16,16) float64 block per rank, native format, "
                 f"N-to-N restart, {ranks_per_node} rank(s) per node, stripe count {stripe_count}, buffer "
                 f"{buffer_bytes >> 20} MiB",
    }
    if parse is not None and part is not None:
        out["rank0_open_parts"] = {
            "parse_validate_table": parse.to_json() | {"measured_at_ranks": parse_ranks,
                                                       "measured_at_blocks": parse_ranks * nvars},
            "partition": part.to_json()}
    return out


def format_report(r: dict[str, Any]) -> str:
    """Human-readable lines of :func:`restart_control_plane`'s result."""
    def fmt(m: dict[str, float]) -> str:
        return f"{m['seconds']:8.3f} s {m['peak_MiB']:9.1f} MiB"

    steps = (("rank 0 at open (parse, validate, extent table, partition)", r["rank0_open"]),
             (f"one aggregator per read ({r['ranks_routed_to_aggregator']} ranks' requests, {r['rounds']} rounds)",
              r["aggregator_per_read"]),
             ("any other rank per read (route, counts, descriptors)", r["any_rank_per_read"]))
    lines = ["RESTART CONTROL PLANE per rank (scale harness: the real per-rank code paths fed what the collectives "
             "deliver, one simulated rank each)", f"  {r['model']}"]
    lines += [f"  {label:<64}{fmt(m)}" + ("  EXTRAPOLATED (below)" if m.get("extrapolated") else "")
              for label, m in steps]
    lines.append(f"  every rank receives at open: {r['broadcast_to_every_rank_bytes'] / 1024:.1f} KiB of routing; an "
                 f"aggregator also its rows: {r['aggregator_rows_bytes'] / 2**20:.1f} MiB (whole table "
                 f"{r['extent_table_bytes'] / 2**20:.1f} MiB, {r['blocks']} blocks; metadata document "
                 f"{r['metadata_document_bytes'] / 2**20:.0f} MiB of JSON)")
    if "rank0_open_parts" in r:
        p, q = r["rank0_open_parts"]["parse_validate_table"], r["rank0_open_parts"]["partition"]
        lines.append(f"  rank 0's open was not run whole: its JSON parse + validation + extent table was measured at "
                     f"{p['measured_at_ranks']} ranks ({p['measured_at_blocks']} blocks):{fmt(p)}, and scaled "
                     f"linearly in blocks (--open-max-ranks); the partition ran at full size:{fmt(q)}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- write side
def _flash_declarations(rank: int, rows: int, ranks: int, nvars: int, sums: np.ndarray) -> list[dict[str, Any]]:
    """What rank ``rank`` of the FLASH-like job declares (``declared.declaration`` plus the prepare step's checksum)."""
    return [{"name": f"var{v:02d}", "dtype": "<f8", "kind": "array", "global_shape": [ranks * rows, 16, 16, 16],
             "offset": [rank * rows, 0, 0, 0], "shape": [rows, 16, 16, 16],
             "checksum": f"{int(sums[(rank * nvars + v) % len(sums)]):016x}"} for v in range(nvars)]


def write_control_plane(ranks: int, total_bytes: int, nvars: int = 24, ranks_per_node: int = 16,
                        stripe_unit: int = 1 << 20) -> dict[str, Any]:
    """Measure the write control plane of the FLASH-like job, native format (see the module docstring):

    * **rank 0**: validate and plan every rank's packed declarations (``plan_packed``), the file layout, the
      O(variables) headers and every rank's share (``plan_headers``, ``segment_starts``, ``Backend.place``,
      pickled as the scatter sends them), the metadata document from every rank's report
      (``engine.index.build_index``, typed as the writer types it), its light copy and its encoding
      (``meta.dumps``);
    * **any other rank**: unpickle what it receives (the headers, its share, the light document) and rebuild its
      own plan (``own_plan``);

    and the bytes every other rank receives. Rank 0's time includes unpickling what the two gathers deliver
    (every rank's declarations and its report, pickled beforehand as each rank would send them)."""
    import pickle

    from ckptio.backends import get_backend
    from ckptio.engine.gc_pause import gc_paused
    from ckptio.engine.index import DocumentInputs, RankReport, WrittenColumns, build_index, light_copy
    from ckptio.model.declared import RankShare
    from ckptio.model.plan import pack_declarations, plan_packed
    from ckptio.model.rank_plan import own_plan, plan_headers, segment_starts

    rows = _rows(ranks, total_bytes, nvars)
    backend = get_backend("mpiio")
    sums = _checksums(ranks, nvars)
    hosts = [{"host": f"node{r // ranks_per_node}", "file_bytes": None} for r in range(ranks)]
    # what the two gathers deliver to rank 0, pickled by each rank as mpi4py sends it: the declarations, then
    # each rank's report of what it wrote (its blocks' file offsets from the layout the plan gives)
    declared = [pickle.dumps(pack_declarations(_flash_declarations(r, rows, ranks, nvars, sums)),
                             pickle.HIGHEST_PROTOCOL) for r in range(ranks)]
    offsets = [share["offsets"] for share in
               backend.place(plan_packed([pickle.loads(d) for d in declared]), stripe_unit, ranks).shares]
    reported = [pickle.dumps(RankReport(WrittenColumns(offsets[r], [rows * ROW_BYTES] * nvars, [None] * nvars),
                                        nvars * rows * ROW_BYTES, {}, hosts[r]),
                             pickle.HIGHEST_PROTOCOL) for r in range(ranks)]
    del offsets

    def on_rank0():
        with gc_paused():  # as the writer's declare and index phases
            return plan_and_index()

    def plan_and_index():
        variables = plan_packed([pickle.loads(d) for d in declared])
        placement = backend.place(variables, stripe_unit, ranks)
        headers = pickle.dumps((plan_headers(variables), "tmp", {}, stripe_unit), pickle.HIGHEST_PROTOCOL)
        shares = [pickle.dumps(RankShare(s, share), pickle.HIGHEST_PROTOCOL) for s, share in
                  zip(segment_starts(variables, ranks), placement.shares, strict=True)]
        reports = [pickle.loads(r) for r in reported]
        inputs = DocumentInputs(backend.name, backend.format_version,
                                {"striping_factor": "80", "striping_unit": str(stripe_unit)}, {})
        doc = build_index(variables, reports, inputs, {}, {}).typed()
        light = pickle.dumps(light_copy(doc), pickle.HIGHEST_PROTOCOL)
        document = metamod.dumps(doc)
        return headers, shares[ranks // 2], light, len(document)

    (headers, share, light, document_bytes), rank0 = measure(on_rank0, traced=True)
    mine = _flash_declarations(ranks // 2, rows, ranks, nvars, sums)
    declared = reported = []  # rank 0 drops them

    def on_other_rank():
        common, _tmp, _described, _unit = pickle.loads(headers)
        received = pickle.loads(share)
        pickle.loads(light)
        return own_plan(common, mine, ranks // 2, received.segments)

    plan, other = measure(on_other_rank, traced=True)
    assert sum(len(v.rank) for v in plan.values()) == nvars
    return {"ranks": ranks, "variables": nvars, "blocks": ranks * nvars,
            "rank0": rank0.to_json(), "any_other_rank": other.to_json(),
            "every_rank_receives_bytes": len(headers) + len(share) + len(light),
            "receives": {"headers": len(headers), "own_share": len(share), "light_document": len(light)},
            "metadata_document_bytes": document_bytes,
            "model": f"FLASH-like: {nvars} variables x one ({rows},16,16,16) float64 block per rank, native format, "
                     f"{ranks_per_node} rank(s) per node (rank 0 unpickles the gathers' inputs)"}
