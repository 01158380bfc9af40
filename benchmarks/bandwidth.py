"""The bandwidth measurement loop: for each repeat, each case: write, evict, cold read (verified), hot read.

Repeats are interleaved (repeat 1 of every case, then repeat 2, ...) so slow drifts of the machine (other
load, the disk's write-back state) spread over all cases instead of biasing one. Exactly one case's files exist
at a time; they are removed after each round, outside the timed regions. ``reads="first"`` reads (and verifies)
only in the first round, for write-only sections; a case without ``read`` never reads.

A reference program run as its own MPI job (IOR, FLASH-IO: benchmarks/external.py) reports its own time
(``seconds`` in its result on rank 0), which replaces the runner's wall time (that includes mpirun's start-up;
kept as ``*_wall_seconds``), and may report its own size (``bytes``: IOR's pattern rounds the data set down to
what every rank count splits evenly).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from .cases import Case, Context
from .common import BenchError, bandwidths, collective, expected_block_range, round_order, summary, time_summary, timed
from .pagecache import evict, remove, resident_fraction


def new_entry(case: Case) -> dict[str, Any]:
    """The JSON entry of one case before measuring."""
    entry: dict[str, Any] = {"label": case.label, "group": case.group, "note": case.note, **case.extra,
                             "status": "ok" if case.available else "skipped",
                             "write_seconds": [], "read_cold_seconds": [], "read_hot_seconds": [],
                             "resident_before_cold_read": [], "resident_after_write": []}
    if not case.available:
        entry["reason"] = case.reason
    return entry


def _verify(ctx: Context, arrays: list[np.ndarray] | None) -> None:
    """Compare a reader's arrays with the values the writers generated (raises on the first difference)."""
    if arrays is None:
        return
    first, count = ctx.my_read_range()
    for v, (name, arr) in enumerate(zip(ctx.data.names, arrays, strict=True)):
        if arr.shape != (count, 16, 16, 16) or not np.array_equal(arr, expected_block_range(v, first, count)):
            raise BenchError(f"{name}: restart read returned wrong data for blocks [{first}, {first + count})")


def _max_over_ranks(comm, values: dict[str, float]) -> dict[str, float]:
    gathered = comm.allgather(values)
    return {k: max(g.get(k, 0.0) for g in gathered) for k in values}


def reported(comm, wall: float, info: dict[str, Any], entry: dict[str, Any], what: str) -> float:
    """Collective: the time of one operation: the program's own (``info["seconds"]`` on rank 0; the wall time is
    kept as ``{what}_wall_seconds``), else the runner's wall time. Records a reported ``bytes`` in ``entry``, and on
    rank 0 any other figure the program reported (``{what}_details``)."""
    own = comm.bcast((info.get("seconds"), info.get("bytes")) if comm.Get_rank() == 0 else None, root=0)
    details = {k: v for k, v in info.items() if k not in ("seconds", "bytes", "stats", "blocked_seconds")}
    if details and comm.Get_rank() == 0:  # e.g. FLASH-IO's own checkpoint time and the fsync after it (rank 0's
        entry.setdefault(f"{what}_details", []).append(details)  # document is the one written)
    if own[1]:
        entry["bytes"] = own[1]
    if own[0] is None:
        return wall
    entry.setdefault(f"{what}_wall_seconds", []).append(wall)
    return own[0]


def one_round(ctx: Context, case: Case, entry: dict[str, Any], verify: bool, read: bool = True) -> None:
    """Write, evict, cold read (+ verify), hot read of one case; appends the timings to ``entry``. Without
    ``read`` (or a ``read`` of the case), the write alone."""
    comm, rank = ctx.comm, ctx.rank
    paths = case.paths(ctx)
    t_write, winfo = timed(comm, lambda: case.write(ctx))
    winfo = winfo or {}
    entry["write_seconds"].append(reported(comm, t_write, winfo, entry, "write"))
    if "stats" in winfo:
        entry.setdefault("write_stats", []).append(winfo["stats"])
        entry.setdefault("blocked_seconds", []).append(comm.allreduce(winfo["blocked_seconds"], op=_max()))
    if not read or case.read is None:
        return
    reader = case.read
    residency = resident_fraction(paths) if rank == 0 else 0.0
    if rank == 0:
        evict(paths)
    cold = comm.bcast((residency, resident_fraction(paths)) if rank == 0 else None, root=0)
    case.prepare(ctx)
    t_cold, (arrays, rinfo) = timed(comm, lambda: reader(ctx))
    if verify and case.group not in ("raw", "reference"):
        collective(comm, lambda got=arrays: _verify(ctx, got))
        entry["verified"] = True
    arrays = None  # free the restart arrays before the hot read allocates new ones
    t_hot, hinfo = timed(comm, lambda: reader(ctx)[1])
    entry["read_cold_seconds"].append(reported(comm, t_cold, rinfo or {}, entry, "read_cold"))
    entry["read_hot_seconds"].append(reported(comm, t_hot, hinfo or {}, entry, "read_hot"))
    entry["resident_after_write"].append(cold[0])
    entry["resident_before_cold_read"].append(cold[1])
    if case.group == "ckptio":
        entry.setdefault("read_stats_seconds_max", []).append(_max_over_ranks(comm, _read_phases(rinfo)))
        entry.setdefault("read_hot_stats_seconds_max", []).append(_max_over_ranks(comm, _read_phases(hinfo)))


def _read_phases(info: dict[str, Any]) -> dict[str, float]:
    """A reader's ``stats.seconds`` plus ``hidden``: the exchange time it hid behind its reads (helper thread; 0
    without one)."""
    secs = dict((info.get("stats") or {}).get("seconds", {}))
    if "data" in secs:
        busy = secs.get("io", 0.0) + secs.get("verify", 0.0) + secs.get("exchange", 0.0)
        secs["hidden"] = max(0.0, busy - secs["data"])
    return secs


def _max():
    from mpi4py import MPI

    return MPI.MAX


def finish(entry: dict[str, Any], nbytes: int) -> None:
    """Add bandwidth summaries (GiB/s: median, min, max), the mean-time statistics the goals use
    (``{what}_time``: :func:`benchmarks.common.time_summary`) and phase medians and means to a measured entry."""
    if entry["status"] != "ok" or not entry["write_seconds"]:
        return
    nbytes = entry.get("bytes") or nbytes
    for what in ("write", "read_cold", "read_hot"):
        if entry[f"{what}_seconds"]:
            entry[what] = summary(bandwidths(nbytes, entry[f"{what}_seconds"]))
            entry[f"{what}_time"] = time_summary(nbytes, entry[f"{what}_seconds"])
    if entry.get("write_stats"):
        phases = sorted({k for s in entry["write_stats"] for k in s["seconds"]})
        entry["write_phases_median"] = {k: summary([s["seconds"].get(k, 0.0) for s in entry["write_stats"]])["median"]
                                        for k in phases}
        entry["write_phases_mean"] = {k: sum(s["seconds"].get(k, 0.0) for s in entry["write_stats"]) /
                                      len(entry["write_stats"]) for k in phases}
        entry["stored_bytes"] = entry["write_stats"][-1]["bytes_total"]
        entry["compression_ratio"] = nbytes / entry["stored_bytes"] if entry["stored_bytes"] else None
        del entry["write_stats"]
    for raw, median in (("read_stats_seconds_max", "read_phases_median"),
                        ("read_hot_stats_seconds_max", "read_hot_phases_median")):
        if entry.get(raw):
            keys = sorted({k for s in entry[raw] for k in s})
            entry[median] = {k: summary([s.get(k, 0.0) for s in entry[raw]])["median"] for k in keys}
            entry[median.replace("_median", "_mean")] = {k: sum(s.get(k, 0.0) for s in entry[raw]) / len(entry[raw])
                                                         for k in keys}
            del entry[raw]


def warm_up(ctx: Context) -> float:
    """Collective over ``ctx.comm``: every rank writes its data once (plain ``os.write`` of each array into a file
    of its own, fsynced) and removes it, untimed; returns the seconds it took (max over ranks). The first write of
    a section otherwise paid for everyone: on the VMs of these runs the first write after the data was made took
    1.7-2.2x as long as the same case's later rounds, whichever case the round's shuffled order put first (the
    MPI-IO reference 3.61 s against 1.3-1.9 s for every case after it; ckptio hdf5 4.39 s against 1.73-2.48 s), as
    the restart section's first cold reads did before its untimed warm-up read (benchmarks/restart.py)."""
    path = os.path.join(ctx.outdir, f"warm-up.{ctx.rank}")
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for v in range(len(ctx.data.names)):
            view = memoryview(ctx.data.local(v).reshape(-1).view(np.uint8))
            while view:
                view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(path)
    return ctx.comm.allreduce(time.perf_counter() - t0, op=_max())


def _max():
    from mpi4py import MPI

    return MPI.MAX


def measure(ctx: Context, cases: list[Case], repeats: int, log, reads: str = "every") -> dict[str, dict[str, Any]]:
    """Every available case, ``repeats`` interleaved rounds after an untimed :func:`warm_up`; returns {case key:
    JSON entry}. ``reads``: "every" round, or only the "first" (verification; the other rounds write only)."""
    results = {c.key: new_entry(c) for c in cases}
    if any(c.available for c in cases):
        log(f"  warm-up: every rank wrote its data once, untimed ({warm_up(ctx):.2f} s)")
    for rep in range(repeats):
        for case in round_order(cases, rep):
            entry = results[case.key]
            if entry["status"] != "ok":
                continue
            paths = case.paths(ctx) + case.cleanup(ctx)
            try:
                if ctx.rank == 0:
                    remove(paths)
                ctx.comm.Barrier()
                one_round(ctx, case, entry, verify=rep == 0, read=reads == "every" or rep == 0)
                done = f"  [{rep + 1}/{repeats}] {case.label}: write {entry['write_seconds'][-1]:.2f} s"
                if len(entry["read_cold_seconds"]) == len(entry["write_seconds"]):
                    done += (f", cold read {entry['read_cold_seconds'][-1]:.2f} s, "
                             f"hot {entry['read_hot_seconds'][-1]:.2f} s")
                log(done)
            except BenchError as exc:
                entry.update(status="failed", reason=str(exc))
                log(f"  {case.label}: FAILED {exc}")
            finally:
                if ctx.rank == 0:
                    remove(paths)
                ctx.comm.Barrier()
    for entry in results.values():
        finish(entry, ctx.data.total_bytes)
    return results
