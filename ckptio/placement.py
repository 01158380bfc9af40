"""Where the I/O ran: per rank, its host, whether it was an aggregator and the bytes it moved (issue 14).

:func:`read_report` (collective over the reader's communicator) gathers, for an open :class:`ckptio.Reader`,
every rank's host (``MPI_Get_processor_name``), aggregator flag and read statistics, and groups the
aggregators by node; :func:`write_report` does the same for a closed :class:`ckptio.Writer` (the bytes each
rank handed to the collective write; which ranks wrote to the file is the MPI-IO layer's choice, so writes have
no aggregator flag). Both return plain JSON-able dicts, the same on every rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def per_node(hosts: Sequence[str], ranks: Sequence[int]) -> dict[str, list[int]]:
    """Pure: ``ranks`` grouped by the host they run on, every host present (hosts in first-rank order)."""
    out: dict[str, list[int]] = {h: [] for h in dict.fromkeys(hosts)}
    for r in sorted(ranks):
        out[hosts[r]].append(r)
    return out


def read_report(reader) -> dict[str, Any]:
    """Collective over ``reader.comm``: per-rank host, aggregator flag and read statistics (bytes read from
    the file, sent and received in the exchange), and the aggregators of every node."""
    from mpi4py import MPI

    comm = reader.comm
    rows = comm.allgather({"host": MPI.Get_processor_name(), **reader.stats.to_json()})
    aggregators = sorted(int(a) for a in reader.aggregators)
    ranks = [{"rank": r, "host": row["host"], "aggregator": r in aggregators, "file_bytes": row["file_bytes"],
              "bytes_sent": row["bytes_sent"], "bytes_received": row["bytes_received"]}
             for r, row in enumerate(rows)]
    hosts = [row["host"] for row in rows]
    return {"ranks": ranks, "aggregators": aggregators, "aggregators_per_node": per_node(hosts, aggregators)}


def write_report(writer) -> dict[str, Any]:
    """Collective over ``writer.comm`` (after ``close()``; for a background checkpoint, after ``wait()``):
    per-rank host and bytes handed to the write."""
    from mpi4py import MPI

    comm = writer.comm
    hosts = comm.allgather(MPI.Get_processor_name())
    moved = list(writer.stats.bytes_per_rank) or [0] * len(hosts)
    return {"ranks": [{"rank": r, "host": h, "bytes": int(b)} for r, (h, b) in enumerate(zip(hosts, moved,
                                                                                             strict=True))],
            "ranks_per_node": per_node(hosts, range(len(hosts)))}
