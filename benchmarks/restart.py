"""Restart on several reader counts (issue 29: 4 -> 2 and 4 -> 3), cold and hot, the way users call it.

Files: a native ckptio checkpoint, an h5py file and the storage reference's file (IOR, else the built-in MPI-IO
reference: benchmarks/ior.py), each written once by every writer rank, then read once cold, untimed
(:func:`warm_up`). Then ``repeats`` interleaved rounds: for each reader count R (ranks 0..R-1, the shifted
decomposition of benchmarks/common.py) and each reader, all pairs in the round's order (common.round_order):
evict the file from the page cache (checked with mincore), cold read, hot read. Readers:

* ``ckptio-alloc``: ``ck.read(name, offset, shape)`` per variable, ckptio allocates the arrays (how Python
  users restart);
* ``ckptio-out``: the same calls with ``out=`` arrays from ``ckptio.empty`` (allocated and touched once per R,
  outside the timed reads, as a simulation's own arrays);
* ``h5py``: h5py's allocating collective read (``driver="mpio"``, ``with dset.collective``);
* ``reference``: IOR's (or the built-in reference's) independent read of the same bytes on R ranks.

Every checkpoint library's first read is verified element by element. The statistics are the mean time over
the rounds and its spread (benchmarks/common.py ``time_summary``), and ckptio's read phases (Reader.stats,
max over ranks, mean over rounds) to name what limits a missed goal.
"""

from __future__ import annotations

from typing import Any

from .bandwidth import _max_over_ranks, _read_phases, _verify, reported
from .cases import Case, Context, ReadResult, ckptio_case, h5py_case
from .common import NXB, BenchError, Dataset, collective, readers_comm, round_order, time_summary, timed
from .pagecache import evict, remove, resident_fraction


def ckptio_read(file_case: Case, out: bool):
    """``ck.read`` per variable (allocating, or into ``ckptio.empty`` arrays with ``out``)."""

    def read(ctx: Context) -> ReadResult:
        import ckptio

        if not ctx.is_reader:
            return None, {}
        first, count = ctx.my_read_range()
        shape = (count, NXB, NXB, NXB)
        given = ctx.cache.get("restart/out") if out else None
        with ckptio.open(file_case.paths(ctx)[0], ctx.readers) as ck:
            arrays = [ck.read(name, (first, 0, 0, 0), shape, out=None if given is None else given[v])
                      for v, name in enumerate(ctx.data.names)]
            stats = ck.stats.to_json()
        return arrays, {"stats": stats}

    return read


def prepare_out(ctx: Context) -> None:
    """The ``out=`` arrays of this reader count, pages touched (once per Context)."""
    import ckptio

    if ctx.is_reader and "restart/out" not in ctx.cache:
        shape = (ctx.my_read_range()[1], NXB, NXB, NXB)
        arrays = [ckptio.empty(shape) for _ in ctx.data.names]
        for a in arrays:
            a[...] = -1.0
        ctx.cache["restart/out"] = arrays


READERS = {"ckptio-alloc": "ckptio mpiio, allocating (ck.read per variable)",
           "ckptio-out": "ckptio mpiio, into out= (ckptio.empty arrays, ck.read(out=))",
           "h5py": "h5py mpio, allocating collective read",
           "reference": "storage reference, independent read of the same bytes"}


def run(world, contexts: dict[int, Context], reference: Case, repeats: int, log) -> dict[str, Any]:
    """Collective over ``world`` (the writers): write the three files once, then the rounds (module docstring).
    ``contexts``: one per reader count, all on ``world`` and the same data set. Returns
    {"readers": {R: {reader key: entry}}, "files": {...}}."""
    first_ctx = next(iter(contexts.values()))
    files = {"ckptio": ckptio_case("mpiio"), "h5py": h5py_case(), "reference": reference}
    readers = {"ckptio-alloc": ("ckptio", ckptio_read(files["ckptio"], False), None),
               "ckptio-out": ("ckptio", ckptio_read(files["ckptio"], True), prepare_out),
               "h5py": ("h5py", files["h5py"].read, None),
               "reference": ("reference", reference.read, None)}
    out: dict[str, Any] = {"readers": {str(r): {} for r in contexts}, "files": {}}
    for r in contexts:
        for key, label in READERS.items():
            label = f"{reference.label}: read of the same bytes" if key == "reference" else label
            case = files[readers[key][0]]
            out["readers"][str(r)][key] = ({"label": label, "status": "ok", "read_cold_seconds": [],
                                            "read_hot_seconds": [], "resident_before_cold_read": [],
                                            "resident_before_hot_read": []}
                                           if case.available else
                                           {"label": label, "status": "skipped", "reason": case.reason})
    try:
        for name, case in files.items():
            if not case.available:
                out["files"][name] = {"status": "skipped", "reason": case.reason}
                continue
            t, _ = timed(world, lambda case=case: case.write(first_ctx))
            out["files"][name] = {"status": "ok", "label": case.label, "write_seconds": t}
        for ctx in contexts.values():  # every reader count's out= arrays exist before the warm-up: see warm_up
            for _file_key, _read, prepare in readers.values():
                if prepare is not None:
                    prepare(ctx)
        out["warm_up_seconds"] = warm_up(world, first_ctx, files, readers, out, log)
        # every (reader count, reader) of a round in one order (round_order mirrors it in odd rounds: over each
        # pair of rounds every read gets an even and an odd place among the round's cold reads)
        pairs = [(r, ctx, key, spec) for r, ctx in contexts.items() for key, spec in readers.items()
                 if out["readers"][str(r)][key]["status"] == "ok" and out["files"][spec[0]]["status"] == "ok"]
        for rep in range(repeats):
            for r, ctx, key, (file_key, read, prepare) in round_order(pairs, rep):
                entry = out["readers"][str(r)][key]
                if entry["status"] != "ok":  # (failed in an earlier round)
                    continue
                try:
                    one_read(world, ctx, files[file_key], read, prepare, entry, verify=rep == 0 and
                             file_key != "reference")
                    resident = entry["resident_before_hot_read"][-1]
                    log(f"  [{rep + 1}/{repeats}] restart {world.Get_size()} -> {r}, {entry['label']}: cold "
                        f"{entry['read_cold_seconds'][-1]:.2f} s, hot {entry['read_hot_seconds'][-1]:.2f} s" +
                        ("" if resident >= 0.99 else f" (only {resident:.0%} of the file resident before it)"))
                except BenchError as exc:
                    entry.update(status="failed", reason=str(exc))
                    log(f"  restart {world.Get_size()} -> {r}, {entry['label']}: FAILED {exc}")
    finally:
        if world.Get_rank() == 0:
            remove([p for case in files.values() if case.available for p in case.paths(first_ctx)])
        world.Barrier()
    nbytes = first_ctx.data.total_bytes
    for per_r in out["readers"].values():
        for entry in per_r.values():
            finish(entry, nbytes)
    return out


def run_counts(world, data: Dataset, outdir: str, counts: list[int], reference: Case, repeats: int,
               log) -> dict[str, Any]:
    """Collective over ``world``: :func:`run` with one Context per reader count (world ranks 0..R-1 read)."""
    from mpi4py import MPI

    contexts: dict[int, Context] = {}
    try:
        for r in counts:
            contexts[r] = Context(world, readers_comm(world, r)[0], data, outdir)
        return run(world, contexts, reference, repeats, log)
    finally:
        for ctx in contexts.values():
            if ctx.readers != MPI.COMM_NULL:
                ctx.readers.Free()


def warm_up(world, ctx: Context, files: dict[str, Case], readers: dict[str, tuple], out: dict[str, Any],
            log) -> dict[str, float]:
    """One untimed cold read of every file (by its first reader, on the first reader count) before the rounds.

    Why: the first cold reads after the files are written ran 2.5-3.6 s for 2 GiB on 2 readers where every later
    round took 1.0-1.5 s, for the ``out=`` read as much as the allocating one, whichever read first; the time
    was the kernel's own CPU inside the reads (2.0-2.4 s against 0.2-0.8 s): the page cache taking guest memory
    that the host had not backed yet (the development VM reports free memory to its host, see
    ckptio/engine/restart_memory.py). Without this pass, the first reader of the first round paid it for
    everyone (ckptio's, in the order of :data:`READERS`); the same happened to the first read after the ``out=``
    arrays of a reader count were allocated (2 GiB more in use), so those are allocated before (:func:`run`).
    Returns each file's warm-up time (in results.json)."""
    seconds: dict[str, float] = {}
    for file_key in files:
        if out["files"].get(file_key, {}).get("status") != "ok":
            continue
        read, prepare = next((rd, prep) for fk, rd, prep in readers.values() if fk == file_key)
        paths = files[file_key].paths(ctx)
        if world.Get_rank() == 0:
            evict(paths)
        if prepare is not None:
            prepare(ctx)
        try:
            seconds[file_key], _ = timed(world, lambda read=read: read(ctx))
        except BenchError as exc:  # the timed rounds report it per reader
            log(f"  restart warm-up of the {file_key} file: FAILED {exc}")
            continue
        log(f"  restart warm-up (untimed): cold read of the {file_key} file {seconds[file_key]:.2f} s")
    return seconds


def one_read(world, ctx: Context, file_case: Case, read, prepare, entry: dict[str, Any], verify: bool) -> None:
    """Evict, cold read (verified when asked), hot read; appends to ``entry``."""
    paths = file_case.paths(ctx)
    if world.Get_rank() == 0:
        evict(paths)
    entry["resident_before_cold_read"].append(world.bcast(resident_fraction(paths) if world.Get_rank() == 0
                                                          else None, root=0))
    if prepare is not None:
        prepare(ctx)
    t_cold, (arrays, cinfo) = timed(world, lambda: read(ctx))
    if verify:
        collective(world, lambda got=arrays: _verify(ctx, got))
        entry["verified"] = True
    arrays = None
    # a hot read is one of a resident file: on a host short of memory the cold read's pages may be gone again
    entry["resident_before_hot_read"].append(world.bcast(resident_fraction(paths) if world.Get_rank() == 0
                                                         else None, root=0))
    t_hot, (_, hinfo) = timed(world, lambda: read(ctx))
    entry["read_cold_seconds"].append(reported(world, t_cold, cinfo or {}, entry, "read_cold"))
    entry["read_hot_seconds"].append(reported(world, t_hot, hinfo or {}, entry, "read_hot"))
    if file_case.group == "ckptio":  # the same on every rank: _max_over_ranks is collective
        entry.setdefault("cold_phases", []).append(_max_over_ranks(world, _phases_and_faults(cinfo or {})))
        entry.setdefault("hot_phases", []).append(_max_over_ranks(world, _phases_and_faults(hinfo or {})))


def _phases_and_faults(info: dict[str, Any]) -> dict[str, float]:
    """A reader's phases (benchmarks.bandwidth) and its page faults during the read (``faults``: minor ones, the
    first touch of fresh memory; ckptio versions that do not count them give none)."""
    phases = _read_phases(info)
    stats = info.get("stats") or {}
    if "page_faults" in stats:
        phases["faults"] = float(stats["page_faults"])
    if "fresh_outputs" in stats:  # outputs of 4 MiB and more made in fresh memory (not in kept memory)
        phases["fresh_outputs"] = float(stats["fresh_outputs"])
    return phases


def finish(entry: dict[str, Any], nbytes: int) -> None:
    """Mean-time statistics and mean phases of one reader's rounds."""
    if entry.get("status") != "ok" or not entry.get("read_cold_seconds"):
        return
    nbytes = entry.get("bytes") or nbytes
    for what in ("read_cold", "read_hot"):
        entry[f"{what}_time"] = time_summary(nbytes, entry[f"{what}_seconds"])
    for raw in ("cold_phases", "hot_phases"):
        rounds = entry.pop(raw, None)
        if rounds:
            keys = sorted({k for s in rounds for k in s})
            entry[f"{raw}_mean"] = {k: sum(s.get(k, 0.0) for s in rounds) / len(rounds) for k in keys}
