"""Where the I/O ran, per node (issue 14): collective reports for a live :class:`ckptio.Reader` or a closed
:class:`ckptio.Writer`, every rank getting O(nodes + aggregators) back, never a per-rank table (a job may
have 100,000 ranks).

* :func:`read_report` (collective over ``reader.comm``): this rank's host, whether it is a read aggregator and
  its read statistics, and for every node its rank count, its aggregators (ranks) and the bytes they read from
  the file, sent and received. ``reader.aggregators`` is already known on every rank; the report adds where
  they run.
* :func:`write_report` (collective over ``writer.comm``, after ``close()``; for a background checkpoint after
  ``wait()``): the placement stored in the checkpoint (``stats.write.placement``, see
  :mod:`ckptio.engine.placement_stats`): per node its ranks, the ranks that moved bytes to the file (the MPI-IO
  layer's write aggregators) and those bytes.

Only rank 0 sees every rank's record (through :func:`ckptio.coord.gather_and_plan`, like the writer's index).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ckptio import coord
from ckptio.engine.placement_stats import aggregators_per_node, rank_placement
from ckptio.model.document import as_document


def per_node(hosts: Sequence[str], ranks: Sequence[int]) -> dict[str, list[int]]:
    """Local: Pure: ``ranks`` grouped by the host they run on, every host present (hosts in first-rank order)."""
    out: dict[str, list[int]] = {h: [] for h in dict.fromkeys(hosts)}
    for r in sorted(ranks):
        out[hosts[r]].append(r)
    return out


def summarize_read(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Local: Pure (rank 0): one entry per host, in first-rank order, from every rank's row (``host``, ``aggregator``,
    ``file_bytes``, ``bytes_sent``, ``bytes_received``) in rank order. Aggregator ranks are listed (there are
    few of them); other ranks are counted."""
    nodes: dict[str, dict[str, Any]] = {}
    for rank, row in enumerate(rows):
        node = nodes.setdefault(row["host"], {"host": row["host"], "ranks": 0, "first_rank": rank,
                                              "aggregators": [], "file_bytes": 0, "bytes_sent": 0,
                                              "bytes_received": 0})
        node["ranks"] += 1
        if row["aggregator"]:
            node["aggregators"].append(rank)
        for key in ("file_bytes", "bytes_sent", "bytes_received"):
            node[key] += int(row[key])
    return list(nodes.values())


def read_report(reader) -> dict[str, Any]:
    """Collective over ``reader.comm``: ``{"rank": this rank's host, aggregator flag and read statistics,
    "nodes": [per node, see summarize_read], "aggregators": [ranks], "aggregators_per_node": {host: [ranks]}}``.
    The same on every rank except ``"rank"``."""
    comm = reader.comm
    mine = {**rank_placement(reader.aggregators, comm.Get_rank()), **reader.stats.to_json()}
    row = {k: mine[k] for k in ("host", "aggregator", "file_bytes", "bytes_sent", "bytes_received")}
    nodes = coord.gather_and_plan(comm, f"read {reader.path}: placement report", lambda: row, summarize_read)
    return {"rank": mine, "nodes": nodes, "aggregators": sorted(int(a) for a in reader.aggregators),
            "aggregators_per_node": {n["host"]: n["aggregators"] for n in nodes}}


def write_report(writer) -> dict[str, Any] | None:
    """Collective over ``writer.comm``: the placement the write recorded (``stats.write.placement``, the same
    on every rank) plus ``aggregators_per_node`` ``{host: count}``; None where the checkpoint has none. From
    the writer when it wrote the file itself, else (a background or staged checkpoint, whose file a copy of the
    writer wrote) read by rank 0 from the checkpoint's metadata."""
    meta = getattr(writer, "meta", None)  # set on every rank by a successful synchronous close(), or on none

    def recorded() -> dict[str, Any] | None:  # rank 0: the document it committed, or the checkpoint's own
        """Local."""
        document = as_document(meta) if meta is not None else writer.backend.read_document(writer.path)
        stats = None if document.stats is None else document.stats.write
        return None if stats is None or stats.placement is None else dict(stats.placement)

    # only rank 0 keeps the whole document (the others hold a light copy): it sends the O(nodes) placement
    placement = coord.bcast_from_root(writer.comm, f"checkpoint {writer.path}: placement report", recorded)
    if placement is None:
        return None
    return {**placement, "aggregators_per_node": aggregators_per_node(placement)}
