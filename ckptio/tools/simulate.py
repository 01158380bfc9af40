"""What-if planning for ``ckptio plan``: lay out a hypothetical FLASH-like job's checkpoint and run the restart
planner on it (no MPI, no data), and compare the load each pattern puts on the Lustre OSTs.

The model: ``variables`` unknowns per block, blocks of 16^3 float64 cells (32 KiB per variable per block),
enough blocks for ``bytes`` in total, each writer rank owning a contiguous range of blocks (one ``(count, 16,
16, 16)`` block per variable per rank). Everything is numpy columns, one row per stored block (2.4 M rows at
100,000 ranks), never a Python object per block:

* the file is laid out by :func:`ckptio.model.native_layout.place_blocks`, the placement the native backend's
  :meth:`NativeBackend.layout` itself uses;
* the restart (``readers`` ranks, the writer's or a shifted decomposition) is partitioned among the aggregators
  by the real :func:`ckptio.model.readplan.partition` of the job's :class:`~ckptio.model.extent_table.ExtentTable`; each
  aggregator's owned rows that some reader needs are cut into parts of at most the buffer and grouped into
  rounds exactly as :func:`ckptio.model.readplan.match_requests` does (:func:`aggregator_rounds`, checked against it
  in the tests), and the parts of one round that touch in the file are read as one contiguous run.

Each contiguous byte run a process reads or writes is cut at stripe boundaries; each piece counts as one request
to OST ``(offset // stripe_size) % stripe_count`` (round-robin striping starting at OST 0).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np

from ckptio.coord.hints import MAX_STRIPE_COUNT
from ckptio.model import readplan
from ckptio.model.extent_table import ExtentTable
from ckptio.model.native_layout import place_blocks

CELLS = 16 * 16 * 16
BLOCK_VAR_BYTES = CELLS * 8
_I64 = np.int64
def parse_size(text: str | int) -> int:
    """'189G' -> bytes (binary units: K, M, G, T)."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"cannot parse size {text!r} (examples: 189G, 512M, 1048576)")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    return int(float(m.group(1)) * scale)


@dataclass
class PlanScenario:
    ranks: int
    nbytes: int
    stripe_count: int
    stripe_size: int
    variables: int = 24
    readers: int | None = None
    decomposition: str = "shifted"
    aggregators: int | None = None
    buffer_bytes: int = 64 << 20
    ranks_per_node: int | None = None  # None: placement on nodes is not modelled (every rank its own node)

    @classmethod
    def from_args(cls, args) -> PlanScenario:
        return cls(ranks=args.ranks, nbytes=parse_size(args.bytes),
                   stripe_count=args.stripe_count or min(args.ranks, MAX_STRIPE_COUNT),
                   stripe_size=parse_size(args.stripe_size), variables=args.variables, readers=args.readers,
                   decomposition=args.decomposition, aggregators=args.aggregators,
                   buffer_bytes=parse_size(args.buffer), ranks_per_node=getattr(args, "ranks_per_node", None))


def bounds_even(n: int, parts: int) -> np.ndarray:
    """Boundaries (``parts + 1``, from 0 to ``n``) of ``parts`` near-equal contiguous pieces (first ones larger)."""
    base, extra = divmod(n, parts)
    counts = np.full(parts, base, _I64)
    counts[:extra] += 1
    return np.concatenate(([0], np.cumsum(counts))).astype(_I64)


def bounds_shifted(n: int, parts: int) -> np.ndarray:
    """Boundaries of an uneven decomposition unlike the writer's: alternately 3/4 and 5/4 of the mean share."""
    weights = np.where(np.arange(parts) % 2 == 0, 3.0, 5.0)
    return np.floor(np.concatenate(([0.0], np.cumsum(weights))) / weights.sum() * n).astype(_I64)


def _pairs(bounds: np.ndarray) -> list[tuple[int, int]]:
    return list(zip(bounds[:-1].tolist(), np.diff(bounds).tolist(), strict=True))


def split_even(n: int, parts: int) -> list[tuple[int, int]]:
    """[start, count) of ``parts`` near-equal contiguous pieces of ``n`` (first ones one larger)."""
    return _pairs(bounds_even(n, parts))


def split_shifted(n: int, parts: int) -> list[tuple[int, int]]:
    """An uneven decomposition unlike the writer's: alternately 3/4 and 5/4 of the mean share."""
    return _pairs(bounds_shifted(n, parts))


@dataclass
class FlashJob:
    """The scenario's checkpoint as columns: ``table`` (one row per stored block, in file order) and the writer
    and reader decompositions in FLASH blocks (boundaries, ``ranks + 1`` and ``readers + 1``)."""

    table: ExtentTable
    writer: np.ndarray      # int32 [rows]: the rank that wrote each row
    offsets: np.ndarray     # int64 [ranks, variables]: file offset of each rank's block of each variable
    writer_bounds: np.ndarray
    reader_bounds: np.ndarray
    file_end: int


def build_job(s: PlanScenario) -> FlashJob:
    """Lay out the scenario's native-format file (:func:`~ckptio.model.native_layout.place_blocks`) and describe it
    as an extent table."""
    nblocks = max(s.ranks, s.nbytes // (s.variables * BLOCK_VAR_BYTES))
    wb = bounds_even(nblocks, s.ranks)
    count = np.diff(wb)
    nv = s.variables
    rank = np.repeat(np.arange(s.ranks, dtype=_I64), nv)
    local = np.tile(np.arange(nv, dtype=_I64), s.ranks)  # a rank declares its block of var00, var01, ...
    offsets, end, _ = place_blocks(rank, local, count[rank] * BLOCK_VAR_BYTES, s.stripe_size)
    keep = count[rank] > 0
    order = np.flatnonzero(keep)[np.argsort(offsets[keep], kind="stable")]
    n = len(order)
    lo = np.zeros((n, 4), _I64)
    lo[:, 0] = wb[rank[order]]
    shape = np.full((n, 4), 16, _I64)
    shape[:, 0] = count[rank[order]]
    table = ExtentTable([f"var{v:02d}" for v in range(nv)], np.full(nv, 4, np.int32), [],
                        local[order].astype(np.int32), lo, shape, offsets[order], shape[:, 0] * BLOCK_VAR_BYTES,
                        np.full(n, -1, np.int16), np.arange(n + 1, dtype=_I64), rank[order],
                        rank[order].astype(np.int32), lo, shape, np.zeros(n, np.uint64))
    readers = s.readers or s.ranks
    rb = (bounds_even if s.decomposition == "blocks" else bounds_shifted)(nblocks, readers)
    return FlashJob(table, rank[order].astype(np.int32), offsets.reshape(s.ranks, nv), wb, rb, end)


def ost_load(runs: np.ndarray, clients: np.ndarray, stripe_size: int, stripe_count: int) -> dict[str, Any]:
    """Per-OST bytes, requests and distinct clients for byte runs ``runs[:, 0]=start, runs[:, 1]=length`` read
    or written by ``clients[i]``."""
    keep = runs[:, 1] > 0
    runs, clients = runs[keep], np.asarray(clients, _I64)[keep]
    first = runs[:, 0] // stripe_size
    last = (runs[:, 0] + runs[:, 1] - 1) // stripe_size
    counts = (last - first + 1).astype(_I64)
    run_index = np.repeat(np.arange(len(runs)), counts)
    stripe = first[run_index] + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts))
    lo = np.maximum(runs[run_index, 0], stripe * stripe_size)
    hi = np.minimum(runs[run_index, 0] + runs[run_index, 1], (stripe + 1) * stripe_size)
    ost = stripe % stripe_count
    nbytes = np.bincount(ost, weights=hi - lo, minlength=stripe_count)
    requests = np.bincount(ost, minlength=stripe_count)
    width = int(clients.max()) + 1 if len(clients) else 1
    pairs = np.unique(ost.astype(_I64) * width + clients[run_index])
    distinct = np.bincount(pairs // width, minlength=stripe_count)

    def summary(a: np.ndarray) -> dict[str, float]:
        mean = float(a.mean()) if len(a) else 0.0
        return {"max": float(a.max()) if len(a) else 0.0, "mean": mean,
                "imbalance": float(a.max() / mean) if mean else 1.0}

    return {"bytes": summary(nbytes), "requests": summary(requests), "clients": summary(distinct),
            "bytes_per_ost": nbytes.tolist(), "requests_per_ost": requests.tolist(),
            "clients_per_ost": distinct.tolist()}


def merge_runs(offset: np.ndarray, nbytes: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte ranges merged into contiguous runs within each ``key`` (a process, or a process's round): returns
    ``runs`` (n, 2: start, length) and each run's key. Ranges of one key that touch in the file become one."""
    order = np.lexsort((offset, key))
    off, n, k = offset[order], nbytes[order], key[order]
    new = np.ones(len(off), bool)
    new[1:] = (k[1:] != k[:-1]) | (off[1:] != off[:-1] + n[:-1])
    first = np.flatnonzero(new)
    if not len(first):
        return np.zeros((0, 2), _I64), np.zeros(0, _I64)
    return np.column_stack([off[first], np.add.reduceat(n, first)]).astype(_I64), k[first]


def needed_rows(job: FlashJob) -> np.ndarray:
    """Rows some reader's request meets (every reader asks for its leading-axis range of every variable)."""
    t = job.table
    rb = job.reader_bounds
    nblocks = int(job.writer_bounds[-1])
    cover = np.zeros(nblocks + 1, _I64)
    nonempty = rb[1:] > rb[:-1]
    np.add.at(cover, rb[:-1][nonempty], 1)
    np.add.at(cover, rb[1:][nonempty], -1)
    covered = np.concatenate(([0], np.cumsum(np.cumsum(cover)[:-1] > 0)))
    lo, hi = t.lo[:, 0], t.lo[:, 0] + t.shape[:, 0]
    return np.flatnonzero(covered[hi] > covered[lo])


class ReadParts(NamedTuple):
    """The parts the restart aggregators read (:func:`aggregator_rounds`), one entry per part in each column."""

    agg: np.ndarray  # the aggregator (its index among the aggregators)
    offset: np.ndarray  # file offset
    nbytes: np.ndarray
    round: np.ndarray  # the aggregator's round that reads it


def aggregator_rounds(table: ExtentTable, rows: np.ndarray, owner: np.ndarray, buffer_bytes: int) -> ReadParts:
    """The parts every aggregator reads and the round of each, as :func:`ckptio.model.readplan.match_requests` plans
    them for an aggregator whose needed rows are ``rows`` (file order): an uncompressed extent of more than
    ``buffer_bytes`` with more than one leading row is split along its leading axis into parts of whole rows
    fitting the buffer; each aggregator's parts, in file order, are grouped greedily into rounds of at most
    ``buffer_bytes`` (a part alone may be larger)."""
    rows = rows[np.lexsort((table.file_offset[rows], owner[rows]))]
    nbytes, lead = table.nbytes[rows], table.shape[rows, 0]
    splittable = (nbytes > buffer_bytes) & (table.codec[rows] < 0) & (lead > 1) & \
        (table.var_ndim[table.var[rows]] > 0)
    row_bytes = nbytes // np.maximum(lead, 1)
    per_part = np.maximum(1, buffer_bytes // np.maximum(row_bytes, 1))
    nparts = np.where(splittable, -(-lead // per_part), 1)
    src = np.repeat(np.arange(len(rows)), nparts)
    k = np.arange(int(nparts.sum())) - np.repeat(np.cumsum(nparts) - nparts, nparts)
    part_rows = np.minimum(per_part[src], lead[src] - k * per_part[src])
    p_off = table.file_offset[rows][src] + np.where(splittable[src], k * per_part[src] * row_bytes[src], 0)
    p_bytes = np.where(splittable[src], part_rows * row_bytes[src], nbytes[src])
    p_agg = owner[rows][src].astype(_I64)
    rnd = np.zeros(len(src), _I64)
    firsts = np.flatnonzero(np.concatenate(([True], p_agg[1:] != p_agg[:-1]))) if len(src) else np.zeros(0, _I64)
    ends = np.append(firsts[1:], len(src))
    for a, b in zip(firsts.tolist(), ends.tolist(), strict=True):  # one step per round, not per part
        cum = np.cumsum(p_bytes[a:b])
        i, k = 0, 0
        while i < b - a:
            base = int(cum[i - 1]) if i else 0
            j = max(i + 1, int(np.searchsorted(cum, base + buffer_bytes, side="right")))
            rnd[a + i:a + j] = k
            i, k = j, k + 1
    return ReadParts(p_agg, p_off, p_bytes, rnd)


def node_of_ranks(nranks: int, ranks_per_node: int | None) -> list[int]:
    """Node id of every rank, ranks filled node by node (``mpirun``'s default mapping); without
    ``ranks_per_node`` every rank is its own node (the planner's view before issue 14)."""
    return list(range(nranks)) if not ranks_per_node else [r // ranks_per_node for r in range(nranks)]


def placement_summary(aggregators: list[int] | np.ndarray, nranks: int, ranks_per_node: int) -> dict[str, Any]:
    """Pure: how ``aggregators`` (ranks) of an ``nranks``-rank job spread over its nodes: max/min/mean per node,
    how many nodes hold one, and a histogram {aggregators on a node: nodes}. O(nodes) time, O(distinct) size."""
    nodes = -(-nranks // ranks_per_node)
    counts = np.bincount(np.asarray(aggregators, dtype=_I64) // ranks_per_node, minlength=nodes)
    values, freq = np.unique(counts, return_counts=True)
    return {"nodes": nodes, "ranks_per_node": ranks_per_node, "max": int(counts.max()), "min": int(counts.min()),
            "mean": float(counts.mean()), "nodes_with_aggregators": int((counts > 0).sum()),
            "histogram": {str(int(v)): int(f) for v, f in zip(values, freq, strict=True)}}


def write_aggregator_ranks(s: PlanScenario) -> list[int]:
    """The ranks that write the file in the ckptio pattern: ``cb_nodes`` (the --aggregators override, else the
    stripe count) of them; with ``ranks_per_node``, as ROMIO places them under ckptio's ``cb_config_list=*:1``:
    the first rank of each node, at most one per node (so never more than the job's nodes)."""
    want = min(s.ranks, s.aggregators or s.stripe_count)
    if not s.ranks_per_node:
        return list(range(want))
    nodes = -(-s.ranks // s.ranks_per_node)
    return [n * s.ranks_per_node for n in range(min(want, nodes))]


def _restart_naive(s: PlanScenario, job: FlashJob) -> dict[str, Any]:
    """Every reader reads its own hyperslab of every variable straight from the file: one run per (reader,
    writer block) intersection."""
    wb, rb = job.writer_bounds, job.reader_bounds
    a, b = rb[:-1], rb[1:]
    w0 = np.searchsorted(wb, a, side="right") - 1
    w1 = np.searchsorted(wb, b, side="left") - 1
    n = np.where(b > a, w1 - w0 + 1, 0)
    reader = np.repeat(np.arange(len(a)), n)
    w = np.repeat(w0, n) + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
    lo, hi = np.maximum(a[reader], wb[w]), np.minimum(b[reader], wb[w + 1])
    ok = hi > lo
    reader, w, lo, hi = reader[ok], w[ok], lo[ok], hi[ok]
    nv = job.offsets.shape[1]
    start = (job.offsets[w] + ((lo - wb[w]) * BLOCK_VAR_BYTES)[:, None]).reshape(-1)
    length = np.repeat((hi - lo) * BLOCK_VAR_BYTES, nv)
    return ost_load(np.column_stack([start, length]), np.repeat(reader, nv), s.stripe_size, s.stripe_count)


def simulate(s: PlanScenario) -> dict[str, Any]:
    """Write and restart, naive versus ckptio, for the scenario. Returns a JSON-able document; with
    ``ranks_per_node``, each pattern also gets ``aggregators_per_node`` (:func:`placement_summary`)."""
    from ckptio.model.plan import choose_aggregators

    job = build_job(s)
    t = job.table
    readers = len(job.reader_bounds) - 1
    aggs = choose_aggregators(readers, node_of_ranks(readers, s.ranks_per_node), s.stripe_count, s.aggregators)
    # restart, ckptio: the real partition of the table; each aggregator reads its needed rows in rounds
    owner, _routing = readplan.partition(t, aggs, s.stripe_size)
    parts = aggregator_rounds(t, needed_rows(job), owner, s.buffer_bytes)
    per_agg_rounds = int(parts.round.max(initial=0)) + 1
    runs, key = merge_runs(parts.offset, parts.nbytes, parts.agg * per_agg_rounds + parts.round)
    who = key // per_agg_rounds
    restart_agg = ost_load(runs, who, s.stripe_size, s.stripe_count)
    nrounds = int(parts.round.max(initial=-1)) + 1
    domains, per_agg = [], np.bincount(who, minlength=len(aggs))
    for a in range(len(aggs)):
        mine = runs[who == a]
        domains.append((int(mine[:, 0].min()), int((mine[:, 0] + mine[:, 1]).max())) if len(mine) else (0, 0))
    spans = merge_runs(parts.offset, parts.nbytes, parts.agg)[0]
    restart_naive = _restart_naive(s, job)
    # write: naive = every rank writes its region itself; ckptio = cb_nodes aggregators with stripe-aligned domains
    runs_w, who_w = merge_runs(t.file_offset, t.nbytes, job.writer.astype(_I64))
    write_naive = ost_load(runs_w, who_w, s.stripe_size, s.stripe_count)
    writers = write_aggregator_ranks(s)
    nagg_write = len(writers)
    start, end = int(t.file_offset.min()), int((t.file_offset + t.nbytes).max())
    domain = -(-((end - start) // nagg_write + 1) // s.stripe_size) * s.stripe_size
    lo = start + np.arange(nagg_write, dtype=_I64) * domain
    hi = np.minimum(end, lo + domain)
    write_agg = ost_load(np.column_stack([lo, hi - lo]), np.arange(nagg_write), s.stripe_size, s.stripe_count)
    result = {
        "scenario": asdict(s) | {"readers": readers, "file_bytes": end},
        "write": {"naive": {"ranks_opening_file": s.ranks, "aggregators": s.ranks, **write_naive},
                  "ckptio": {"ranks_opening_file": nagg_write, "aggregators": nagg_write, **write_agg}},
        "restart": {"naive": {"ranks_opening_file": readers, "aggregators": readers, **restart_naive},
                    "ckptio": {"ranks_opening_file": len(aggs), "aggregators": len(aggs), "rounds": nrounds,
                               "domains": domains, "contiguous_runs": len(spans),
                               "reads_per_aggregator": {"max": int(per_agg.max()), "mean": float(per_agg.mean())},
                               **restart_agg}},
    }
    if s.ranks_per_node:
        rpn = s.ranks_per_node
        for phase, pattern, ranks, nranks in (("write", "naive", np.arange(s.ranks), s.ranks),
                                              ("write", "ckptio", writers, s.ranks),
                                              ("restart", "naive", np.arange(readers), readers),
                                              ("restart", "ckptio", aggs, readers)):
            result[phase][pattern]["aggregators_per_node"] = placement_summary(ranks, nranks, rpn)
    return result


def format_comparison(result: dict[str, Any]) -> str:
    sc = result["scenario"]
    lines = [f"ckptio plan: {sc['ranks']} writer ranks, {sc['readers']} restart ranks, "
             f"{sc['nbytes'] / 2**30:.1f} GiB, stripe count {sc['stripe_count']}, stripe size {sc['stripe_size']}",
             ""]
    header = f"{'':22}{'ranks opening':>14}{'aggregators':>12}{'OST MiB max/mean':>20}{'requests/OST max/mean':>24}" \
             f"{'clients/OST max/mean':>22}"
    for phase in ("write", "restart"):
        lines.append(phase.upper())
        lines.append(header)
        for pattern in ("naive", "ckptio"):
            r = result[phase][pattern]
            b, q, c = r["bytes"], r["requests"], r["clients"]
            lines.append(f"  {pattern:<20}{r['ranks_opening_file']:>14}{r['aggregators']:>12}"
                         f"{b['max'] / 2**20:>11.0f} /{b['mean'] / 2**20:>7.0f}"
                         f"{q['max']:>13.0f} /{q['mean']:>9.0f}{c['max']:>12.0f} /{c['mean']:>8.0f}")
        lines.append("")
    r = result["restart"]["ckptio"]
    lines.append(f"restart: {r['aggregators']} aggregators read their partitions as {r['contiguous_runs']} "
                 f"contiguous runs in {r['rounds']} round(s), at most {r['reads_per_aggregator']['max']} reads per "
                 f"aggregator; per-OST byte imbalance (max/mean) {r['bytes']['imbalance']:.3f}")
    if sc.get("ranks_per_node"):
        lines += ["", *format_placement(result)]
    return "\n".join(lines)


def format_placement(result: dict[str, Any]) -> list[str]:
    """Text lines: aggregators per node and per OST of every phase and pattern (``--ranks-per-node``)."""
    sc = result["scenario"]
    w, r = result["write"]["naive"]["aggregators_per_node"], result["restart"]["naive"]["aggregators_per_node"]
    lines = [f"PLACEMENT ({sc['ranks_per_node']} ranks per node: {w['nodes']} writer nodes, {r['nodes']} restart "
             "nodes; ckptio writes modelled as ROMIO with cb_config_list=*:1)",
             f"{'':22}{'aggregators/node max/mean':>26}{'nodes with one':>16}{'aggregators/OST max/mean':>26}"]
    for phase in ("write", "restart"):
        for pattern in ("naive", "ckptio"):
            p = result[phase][pattern]
            a, c = p["aggregators_per_node"], p["clients"]
            lines.append(f"  {phase + ' ' + pattern:<20}{a['max']:>16} /{a['mean']:>8.2f}"
                         f"{a['nodes_with_aggregators']:>9}/{a['nodes']:<6}{c['max']:>17.0f} /{c['mean']:>7.1f}")
    return lines


def plot_ost_load(result: dict[str, Any], path: str) -> None:
    """A PNG of the MODELLED per-OST load (requests and distinct clients per OST, naive vs ckptio, write and
    restart) of a :func:`simulate` result. Linear axes from 0 unless the values span a decade or more (then log),
    so a difference of one request never looks like a cliff; identical curves are drawn once and labelled so."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5), sharex=True)
    for col, phase in enumerate(("write", "restart")):
        for row, (key, what) in enumerate((("requests_per_ost", "requests"), ("clients_per_ost", "distinct clients"))):
            ax = axes[row, col]
            naive = np.asarray(result[phase]["naive"][key], dtype=float)
            ours = np.asarray(result[phase]["ckptio"][key], dtype=float)
            osts = np.arange(len(naive))
            if np.array_equal(naive, ours):
                ax.plot(osts, naive, color="tab:purple", label="naive = ckptio (identical)")
            else:
                ax.plot(osts, naive, color="tab:red", label="naive (every rank does its own I/O)")
                ax.plot(osts, ours, color="tab:blue", label="ckptio (aggregated)")
            both = np.concatenate([naive, ours])
            lo, hi = float(both.min()), float(both.max())
            log = lo > 0 and hi >= 10 * lo
            if log:
                ax.set_yscale("log")
            else:
                ax.set_ylim(0, hi * 1.3 if hi > 0 else 1.0)
            ax.set_ylabel(f"{what} per OST" + (" (log scale)" if log else ""))
            ax.set_title(f"{phase}: {what} per OST (min {lo:,.0f}, max {hi:,.0f})", fontsize=10)
            ax.legend(fontsize=8, loc="best")
        axes[1, col].set_xlabel("OST index")
    sc = result["scenario"]
    fig.suptitle(f"MODELLED by ckptio plan, not measured: {sc['ranks']} ranks, {sc['nbytes'] / 2**30:.0f} GiB, "
                 f"{sc['stripe_count']} OSTs")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
