"""What-if planning for ``ckptio plan``: run the real layout and read planner for a hypothetical FLASH-like job
(no MPI, no data) and compare the load it puts on each Lustre OST with the naive pattern.

The model: ``variables`` unknowns per block, blocks of 16^3 float64 cells (32 KiB per variable per block),
enough blocks for ``bytes`` in total, each writer rank owning a contiguous range of blocks; the file is laid
out by the native backend's real :meth:`NativeBackend.layout`; the restart requests come from ``readers`` ranks
with the same or a shifted decomposition and go through the real :func:`ckptio.plan.plan_read`. Each contiguous
byte run a process reads is cut at stripe boundaries; each piece counts as one request to OST
``(offset // stripe_size) % stripe_count`` (round-robin striping starting at OST 0).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .hints import MAX_STRIPE_COUNT
from .layout import Box
from .plan import BlockPlan, Extent, Request, VariablePlan, plan_read

CELLS = 16 * 16 * 16
BLOCK_VAR_BYTES = CELLS * 8


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


def split_even(n: int, parts: int) -> list[tuple[int, int]]:
    """[start, count) of ``parts`` near-equal contiguous pieces of ``n`` (first ones one larger)."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for p in range(parts):
        c = base + (1 if p < extra else 0)
        out.append((start, c))
        start += c
    return out


def split_shifted(n: int, parts: int) -> list[tuple[int, int]]:
    """An uneven decomposition unlike the writer's: alternately 3/4 and 5/4 of the mean share."""
    weights = np.array([3 if p % 2 == 0 else 5 for p in range(parts)], dtype=float)
    bounds = np.floor(np.concatenate(([0.0], np.cumsum(weights))) / weights.sum() * n).astype(np.int64)
    return [(int(bounds[p]), int(bounds[p + 1] - bounds[p])) for p in range(parts)]


def build_job(s: PlanScenario) -> tuple[list[Extent], dict[str, int], list[list[Request]]]:
    """Extents of a native-format file for the scenario and the restart requests of every reader."""
    from .backends.mpiio import NativeBackend  # pure layout code, no MPI

    nblocks = max(s.ranks, s.nbytes // (s.variables * BLOCK_VAR_BYTES))
    names = [f"var{v:02d}" for v in range(s.variables)]
    owners = split_even(nblocks, s.ranks)
    variables: dict[str, VariablePlan] = {}
    for v, name in enumerate(names):
        var = VariablePlan(name, "<f8", (nblocks, 16, 16, 16), "array")
        var.blocks = [BlockPlan(r, v, Box((start, 0, 0, 0), (count, 16, 16, 16))) for r, (start, count) in
                      enumerate(owners)]
        variables[name] = var
    layout = NativeBackend().layout(variables, s.stripe_size, s.ranks)
    extents = []
    for name, var in variables.items():
        for b in var.blocks:
            if b.box.size:
                extents.append(Extent(name, b.box, layout["offsets"][f"{b.rank}:{b.local_index}"], b.box.size * 8))
    extents.sort(key=lambda e: e.file_offset)
    readers = s.readers or s.ranks
    split = split_even if s.decomposition == "blocks" else split_shifted
    requests = [[Request(name, Box((start, 0, 0, 0), (count, 16, 16, 16))) for name in names]
                for start, count in split(nblocks, readers)]
    return extents, {n: 8 for n in names}, requests


def ost_load(runs: np.ndarray, clients: np.ndarray, stripe_size: int, stripe_count: int) -> dict[str, Any]:
    """Per-OST bytes, requests and distinct clients for byte runs ``runs[:, 0]=start, runs[:, 1]=length``."""
    runs = runs[runs[:, 1] > 0]
    clients = clients[: len(runs)] if len(clients) == len(runs) else clients
    first = runs[:, 0] // stripe_size
    last = (runs[:, 0] + runs[:, 1] - 1) // stripe_size
    counts = (last - first + 1).astype(np.int64)
    run_index = np.repeat(np.arange(len(runs)), counts)
    stripe = first[run_index] + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts))
    lo = np.maximum(runs[run_index, 0], stripe * stripe_size)
    hi = np.minimum(runs[run_index, 0] + runs[run_index, 1], (stripe + 1) * stripe_size)
    ost = stripe % stripe_count
    nbytes = np.bincount(ost, weights=hi - lo, minlength=stripe_count)
    requests = np.bincount(ost, minlength=stripe_count)
    pairs = np.unique(ost.astype(np.int64) * (int(clients.max()) + 1 if len(clients) else 1) + clients[run_index])
    distinct = np.bincount(pairs // (int(clients.max()) + 1 if len(clients) else 1), minlength=stripe_count)

    def summary(a: np.ndarray) -> dict[str, float]:
        mean = float(a.mean()) if len(a) else 0.0
        return {"max": float(a.max()) if len(a) else 0.0, "mean": mean,
                "imbalance": float(a.max() / mean) if mean else 1.0}

    return {"bytes": summary(nbytes), "requests": summary(requests), "clients": summary(distinct),
            "bytes_per_ost": nbytes.tolist(), "requests_per_ost": requests.tolist(),
            "clients_per_ost": distinct.tolist()}


def _merge_runs(offsets: list[int], lengths: list[int]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for off, n in sorted(zip(offsets, lengths, strict=True)):
        if merged and merged[-1][0] + merged[-1][1] == off:
            merged[-1][1] += n
        else:
            merged.append([off, n])
    return [(a, b) for a, b in merged]


def node_of_ranks(nranks: int, ranks_per_node: int | None) -> list[int]:
    """Node id of every rank, ranks filled node by node (``mpirun``'s default mapping); without
    ``ranks_per_node`` every rank is its own node (the planner's view before issue 14)."""
    return list(range(nranks)) if not ranks_per_node else [r // ranks_per_node for r in range(nranks)]


def placement_summary(aggregators: list[int], nranks: int, ranks_per_node: int) -> dict[str, Any]:
    """Pure: how ``aggregators`` (ranks) of an ``nranks``-rank job spread over its nodes: max/min/mean per node,
    how many nodes hold one, and a histogram {aggregators on a node: nodes}. O(nodes) time, O(distinct) size."""
    nodes = -(-nranks // ranks_per_node)
    counts = np.bincount(np.asarray(aggregators, dtype=np.int64) // ranks_per_node, minlength=nodes)
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


def simulate(s: PlanScenario) -> dict[str, Any]:
    """Write and restart, naive versus ckptio, for the scenario. Returns a JSON-able document; with
    ``ranks_per_node``, each pattern also gets ``aggregators_per_node`` (:func:`placement_summary`)."""
    from .plan import choose_aggregators

    extents, itemsizes, requests = build_job(s)
    readers = len(requests)
    nagg_read = choose_aggregators(readers, node_of_ranks(readers, s.ranks_per_node), s.stripe_count,
                                   s.aggregators)
    plan = plan_read(extents, itemsizes, requests, nagg_read, s.stripe_size, s.buffer_bytes)
    # restart, ckptio: every aggregator reads its domain round by round, merged into contiguous runs
    runs, who = [], []
    for a, rounds in enumerate(plan.rounds):
        for group in rounds:
            for off, n in _merge_runs([e.file_offset for e in group], [e.nbytes for e in group]):
                runs.append((off, n))
                who.append(a)
    restart_agg = ost_load(np.array(runs, dtype=np.int64).reshape(-1, 2), np.array(who, dtype=np.int64),
                           s.stripe_size, s.stripe_count)
    # restart, naive: each reader reads its own hyperslab straight from the file (request ∩ block per extent)
    by_var: dict[str, list[Extent]] = {}
    for e in extents:
        by_var.setdefault(e.var, []).append(e)
    starts = {}
    for name, lst in by_var.items():
        lst.sort(key=lambda e: e.box.offset[0])
        starts[name] = [e.box.offset[0] for e in lst]
    runs, who = [], []
    for rank, reqs in enumerate(requests):
        for q in reqs:
            lst = by_var.get(q.var, [])
            i = max(0, bisect.bisect_right(starts.get(q.var, []), q.box.offset[0]) - 1)
            while i < len(lst) and lst[i].box.offset[0] < q.box.end[0]:
                e = lst[i]
                i += 1
                common = q.box.intersect(e.box)
                if common is None:
                    continue
                row = e.box.size // e.box.shape[0] * itemsizes[e.var]
                runs.append((e.file_offset + (common.offset[0] - e.box.offset[0]) * row, common.shape[0] * row))
                who.append(rank)
    restart_naive = ost_load(np.array(runs, dtype=np.int64).reshape(-1, 2), np.array(who, dtype=np.int64),
                             s.stripe_size, s.stripe_count)
    # write: naive = every rank writes its region itself; ckptio = cb_nodes aggregators with stripe-aligned domains
    runs, who = [], []
    by_rank: dict[int, list[tuple[int, int]]] = {}
    owner_starts = [o[0] for o in split_even(max(s.ranks, s.nbytes // (s.variables * BLOCK_VAR_BYTES)), s.ranks)]
    for e in extents:
        rank = bisect.bisect_right(owner_starts, e.box.offset[0]) - 1
        by_rank.setdefault(rank, []).append((e.file_offset, e.nbytes))
    for rank, pieces in by_rank.items():
        for off, n in _merge_runs([p[0] for p in pieces], [p[1] for p in pieces]):
            runs.append((off, n))
            who.append(rank)
    write_naive = ost_load(np.array(runs, dtype=np.int64).reshape(-1, 2), np.array(who, dtype=np.int64),
                           s.stripe_size, s.stripe_count)
    writers = write_aggregator_ranks(s)
    nagg_write = len(writers)
    start, end = extents[0].file_offset, extents[-1].file_offset + extents[-1].nbytes
    domain = -(-((end - start) // nagg_write + 1) // s.stripe_size) * s.stripe_size
    runs, who = [], []
    for a in range(nagg_write):
        lo = start + a * domain
        hi = min(end, lo + domain)
        if hi > lo:
            runs.append((lo, hi - lo))
            who.append(a)
    write_agg = ost_load(np.array(runs, dtype=np.int64).reshape(-1, 2), np.array(who, dtype=np.int64),
                         s.stripe_size, s.stripe_count)
    result = {
        "scenario": asdict(s) | {"readers": readers, "file_bytes": end},
        "write": {"naive": {"ranks_opening_file": s.ranks, "aggregators": s.ranks, **write_naive},
                  "ckptio": {"ranks_opening_file": nagg_write, "aggregators": nagg_write, **write_agg}},
        "restart": {"naive": {"ranks_opening_file": readers, "aggregators": readers, **restart_naive},
                    "ckptio": {"ranks_opening_file": len(plan.aggregators), "aggregators": len(plan.aggregators),
                               "rounds": plan.nrounds, "domains": plan.domains, **restart_agg}},
    }
    if s.ranks_per_node:
        rpn = s.ranks_per_node
        for phase, pattern, ranks, nranks in (("write", "naive", range(s.ranks), s.ranks),
                                              ("write", "ckptio", writers, s.ranks),
                                              ("restart", "naive", range(readers), readers),
                                              ("restart", "ckptio", list(plan.aggregators), readers)):
            result[phase][pattern]["aggregators_per_node"] = placement_summary(list(ranks), nranks, rpn)
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
    lines.append(f"restart: {r['aggregators']} aggregators read contiguous domains in {r['rounds']} round(s); "
                 f"per-OST byte imbalance (max/mean) {r['bytes']['imbalance']:.3f}")
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 7), sharex=True)
    for col, phase in enumerate(("write", "restart")):
        for pattern, color in (("naive", "tab:red"), ("ckptio", "tab:blue")):
            r = result[phase][pattern]
            osts = np.arange(len(r["bytes_per_ost"]))
            axes[0, col].plot(osts, np.array(r["requests_per_ost"]), color=color, label=pattern)
            axes[1, col].plot(osts, np.array(r["clients_per_ost"]), color=color, label=pattern)
        axes[0, col].set_title(f"{phase}: requests per OST")
        axes[1, col].set_title(f"{phase}: distinct clients per OST")
        axes[1, col].set_xlabel("OST")
        for ax in axes[:, col]:
            ax.set_yscale("log")
            ax.legend()
    sc = result["scenario"]
    fig.suptitle(f"{sc['ranks']} ranks, {sc['nbytes'] / 2**30:.0f} GiB, {sc['stripe_count']} OSTs")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
