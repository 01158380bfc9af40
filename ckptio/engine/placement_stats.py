"""Where a checkpoint's bytes went: per node, how many ranks, which of them wrote to the file, and how many bytes
they moved there (issue 14). Stored in the checkpoint as ``stats.write.placement``, O(nodes), never per rank.

With collective buffering the ranks hand their blocks to the MPI-IO layer and a few of them, the aggregators
chosen by ROMIO (``cb_nodes``, ``cb_config_list``) or OMPIO, write the file; which ones is not reported by MPI.
So it is measured: around the collective data write, each rank reads its thread's ``write_bytes`` from
``/proc/thread-self/io`` (the bytes of page-cache pages the thread dirtied, or wrote directly, for that file
system: storage writes only, not the MPI traffic over sockets that the kernel's ``wchar`` counter also holds).
A rank that moved bytes to the file was a write aggregator. The figure has page granularity (a page two
aggregators share counts for the first one) and is only available where the kernel accounts storage writes:
not on tmpfs (``/dev/shm``), not without ``/proc``; then the placement says so (``measured: false``, with the
reason) and gives no byte or aggregator figures, never invented ones.

Which ranks call what:
* :func:`io_mark` and :func:`local_record`: every rank, local (the writer, around its data write);
* :func:`summarize`: rank 0 only, pure (the writer's metadata builder, from the gathered records);
* :func:`rank_placement`: any rank, local (this rank's host and whether it is a read aggregator).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from typing import Any

MEASURE = "write_bytes of /proc/thread-self/io during the collective data write (page granularity)"


def _thread_io_path() -> str:
    if os.path.exists("/proc/thread-self/io"):
        return "/proc/thread-self/io"
    return f"/proc/self/task/{threading.get_native_id()}/io"


def storage_bytes_written() -> int | None:
    """Local: this thread's ``write_bytes`` counter (bytes it sent to the storage layer), None when the kernel
    does not provide it (no ``/proc``, no task I/O accounting)."""
    try:
        with open(_thread_io_path()) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key == "write_bytes":
                    return int(value)
    except (OSError, ValueError):
        return None
    return None


def io_mark() -> int | None:
    """Local, every rank, in the thread that does the collective write, right before it."""
    return storage_bytes_written()


def local_record(mark: int | None) -> dict[str, Any]:
    """Local, every rank, in the same thread right after the collective write: this rank's host and the bytes it
    moved to storage since ``mark`` (None when not measurable)."""
    from ckptio.coord.mpi import MPI

    now = storage_bytes_written()
    moved = None if mark is None or now is None else max(0, now - mark)
    return {"host": MPI.Get_processor_name(), "file_bytes": moved}


def summarize(records: Sequence[dict[str, Any]], declared: Sequence[int]) -> dict[str, Any]:
    """Rank 0, pure: the O(nodes) placement document from every rank's :func:`local_record` (in rank order)
    and the bytes each rank handed to the write (``declared``).

    ``nodes``: one entry per host in the order of its first rank, with ``ranks`` (count), ``first_rank``,
    ``aggregators`` (ranks that moved bytes to the file), ``file_bytes`` (what they moved) and
    ``declared_bytes`` (what the node's ranks handed to the write). Where the kernel accounted no storage
    write at all while data was written (tmpfs), or a rank could not measure, ``measured`` is false, ``why``
    says so, and the aggregator and byte figures are None.
    """
    moved = [r["file_bytes"] for r in records]
    why = None
    if any(m is None for m in moved):
        missing = [i for i, m in enumerate(moved) if m is None]
        why = (f"no per-thread I/O accounting (/proc/thread-self/io) on rank {missing[0]}"
               + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    elif sum(moved) == 0 and sum(declared) > 0:
        why = ("the kernel accounted no storage writes for the file (a file system without a page cache "
               "writeback, e.g. tmpfs)")
    measured = why is None
    nodes: dict[str, dict[str, Any]] = {}
    for rank, (rec, handed) in enumerate(zip(records, declared, strict=True)):
        node = nodes.setdefault(rec["host"], {"host": rec["host"], "ranks": 0, "first_rank": rank,
                                               "aggregators": 0 if measured else None,
                                               "file_bytes": 0 if measured else None, "declared_bytes": 0})
        node["ranks"] += 1
        node["declared_bytes"] += int(handed)
        if measured and rec["file_bytes"] > 0:
            node["aggregators"] += 1
            node["file_bytes"] += int(rec["file_bytes"])
    listed = list(nodes.values())
    return {"measure": MEASURE, "measured": measured, "why": why, "nodes": listed,
            "aggregators": sum(n["aggregators"] for n in listed) if measured else None,
            "file_bytes": sum(n["file_bytes"] for n in listed) if measured else None}


def aggregators_per_node(placement: dict[str, Any]) -> dict[str, int | None]:
    """Pure: ``{host: write aggregators}`` of a stored placement document (None where not measured)."""
    return {n["host"]: n["aggregators"] for n in placement.get("nodes", [])}


def rank_placement(aggregators: Iterable[int], rank: int) -> dict[str, Any]:
    """Local, any rank: this rank's host (``MPI_Get_processor_name``) and whether it is one of ``aggregators``
    (e.g. a Reader's read aggregators)."""
    from ckptio.coord.mpi import MPI

    return {"host": MPI.Get_processor_name(), "aggregator": rank in set(int(a) for a in aggregators)}
