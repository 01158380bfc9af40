"""The ``--stats`` part of ``ckptio inspect``: the write statistics stored in a checkpoint, with where the bytes
went (``stats.write.placement``: per node, its ranks, its write aggregators and the bytes they moved to the
file, see :mod:`ckptio.engine.placement_stats`). Local, pure formatting of the metadata document."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TextIO

MAX_NODES_SHOWN = 32  # a job on thousands of nodes: the busiest ones, then a summary line


def stats_lines(stats: Mapping[str, Any], human: Callable[[float], str]) -> list[str]:
    """Text lines for the write statistics ``stats`` (the metadata's ``stats`` object)."""
    w = stats.get("write", {})
    secs = w.get("seconds", {})
    lines = ["write stats " + ", ".join(f"{k} {v:.4f} s" for k, v in secs.items())]
    per_rank = w.get("bytes_per_rank", [])  # format 1 kept a list of every rank's bytes
    summary = w.get("bytes") or ({"min": min(per_rank), "max": max(per_rank), "total": sum(per_rank)}
                                 if per_rank else None)
    if summary:
        lines.append(f"            bytes handed to the write per rank min {human(summary['min'])} max "
                     f"{human(summary['max'])} total {human(summary['total'])}")
    placement = w.get("placement")
    if placement is None:
        lines.append("placement   not recorded (written by a ckptio without placement statistics)")
        return lines
    nodes = placement.get("nodes", [])
    if placement.get("measured"):
        busy = sum(1 for n in nodes if n["aggregators"])
        lines.append(f"placement   {placement['aggregators']} write aggregator(s) on {busy} of {len(nodes)} node(s) "
                     f"moved {human(placement['file_bytes'])} to the file")
    else:
        lines.append(f"placement   {len(nodes)} node(s); bytes moved to the file not measured: {placement.get('why')}")
    width = max([len(n["host"]) for n in nodes[:MAX_NODES_SHOWN]] + [4])
    lines.append(f"  {'node':<{width}}  {'ranks':>6} {'first rank':>10} {'aggregators':>11} {'bytes to file':>14} "
                 f"{'bytes handed':>13}")
    shown = sorted(nodes, key=lambda n: -(n["file_bytes"] or 0))[:MAX_NODES_SHOWN]
    for n in sorted(shown, key=lambda n: n["first_rank"]):
        aggs = "?" if n["aggregators"] is None else str(n["aggregators"])
        moved = "?" if n["file_bytes"] is None else human(n["file_bytes"])
        lines.append(f"  {n['host']:<{width}}  {n['ranks']:>6} {n['first_rank']:>10} {aggs:>11} {moved:>14} "
                     f"{human(n['declared_bytes']):>13}")
    if len(nodes) > len(shown):
        rest = [n for n in nodes if n not in shown]
        lines.append(f"  ... {len(rest)} more node(s) ({sum(n['ranks'] for n in rest)} ranks) that moved fewer bytes")
    return lines


def print_stats(stats: Mapping[str, Any], human: Callable[[float], str], out: TextIO) -> None:
    """Print :func:`stats_lines` to ``out``."""
    for line in stats_lines(stats, human):
        print(line, file=out)
