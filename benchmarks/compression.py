"""Compression break-even (issue #6): when does ``compression=`` make a checkpoint faster, and when slower?

Model. Writing ``S`` bytes takes ``S / B_fs`` uncompressed, where ``B_fs`` is the file-system bandwidth the job
gets. Compressed, every rank first compresses its share (aggregate speed ``B_c`` = ``P_eff x B_zstd``, with
``P_eff`` = ranks that really run in parallel, i.e. min(ranks, cores)) and then writes ``S / r`` bytes::

    T_u = S / B_fs            T_c = S / B_c + S / (r * B_fs)

so compression pays exactly when ``r > 1 / (1 - B_fs / B_c)``, which needs ``B_c > B_fs``; per rank:
``B_fs / P < B_zstd * (1 - 1/r)`` -- a rank's share of the file system must be *smaller* than the speed at which it
removes bytes by compressing. (``r > 1 + B_fs / B_c`` is the first-order form, good when ``B_fs << B_c``.)

Measured here, in the same run as the bandwidth table:

* ``B_c``, ``r`` and decompression speed of the chosen codec on the benchmark's own data, every rank compressing
  its own arrays at the same time (as ckptio's declare phase does), max over ranks between barriers; and the
  single-process speed (``B_zstd``);
* the two regimes: ckptio ``mpiio`` uncompressed versus compressed writes to the scratch disk (taken from the
  bandwidth table: low per-rank share) and to ``/dev/shm`` (tmpfs: a very high per-rank share, the regime in
  which compression must be left off).
"""

from __future__ import annotations

import os
import time
from statistics import median
from typing import Any

import numpy as np

from ckptio.model import codec as codecs

from .common import GIB, Dataset, summary, timed
from .pagecache import remove


def throughput(comm, data: Dataset, spec: str, repeats: int) -> dict[str, Any]:
    """Aggregate and single-process compression/decompression speed and ratio of ``spec`` on ``data``."""
    codec, level = codecs.parse_compression(spec)
    stored: list[bytes] = []

    def compress_all() -> int:
        stored.clear()
        stored.extend(codecs.compress(data.local(v), codec, level) for v in range(len(data.names)))
        return sum(len(b) for b in stored)

    def decompress_all() -> None:
        for v, blob in enumerate(stored):
            codecs.decompress(blob, codec, np.dtype(np.float64), data.local(v).size, f"bench var {v}")

    comp, decomp, nstored = [], [], 0
    for _ in range(repeats):
        t, nstored = timed(comm, compress_all)
        comp.append(t)
        decomp.append(timed(comm, decompress_all)[0])
    stored_total = comm.allreduce(nstored)
    single = None
    if comm.Get_rank() == 0:  # one process alone, nothing else running: the per-core speed B_zstd
        t0 = time.perf_counter()
        compress_all()
        single = data.data.nbytes / GIB / max(time.perf_counter() - t0, 1e-9)
    single = comm.bcast(single, root=0)
    stored.clear()
    return {"codec": f"{codec}:{level}", "ratio": data.total_bytes / stored_total,
            "compress_seconds_all_ranks": summary(comp), "decompress_seconds_all_ranks": summary(decomp),
            "compress_aggregate_gib_s": data.total_bytes / GIB / median(comp),
            "decompress_aggregate_gib_s": data.total_bytes / GIB / median(decomp),
            "compress_single_process_gib_s": single,
            "method": "every rank compresses its own arrays (one block per variable, as the bandwidth cases "
                      "write them) concurrently; max over ranks between barriers; single process: rank 0 alone"}


def fast_tier_writes(ctx, cases, repeats: int, outdir: str, log) -> dict[str, Any]:
    """Write-only timings of ``cases`` (ckptio mpiio without/with compression) with files in ``outdir``."""
    from .cases import Context

    fast = Context(ctx.comm, ctx.readers, ctx.data, outdir)
    out: dict[str, Any] = {}
    for case in cases:
        seconds = []
        for _ in range(repeats):
            if ctx.rank == 0:
                remove(case.paths(fast))
            t, _info = timed(ctx.comm, lambda case=case: case.write(fast))
            seconds.append(t)
            if ctx.rank == 0:
                remove(case.paths(fast))
            ctx.comm.Barrier()
        bws = [ctx.data.total_bytes / GIB / s for s in seconds]
        out[case.key] = {"label": case.label, "write_seconds": seconds, "write": summary(bws)}
        log(f"  {outdir}: {case.label}: write {median(seconds):.2f} s")
    return out


def analyse(section: dict[str, Any], bw: dict[str, Any], nprocs: int) -> dict[str, Any]:
    """Break-even ratio and predicted/measured times for the disk (bandwidth table) and the fast tier."""
    tp = section["throughput"]
    r, b_c = tp["ratio"], tp["compress_aggregate_gib_s"]
    cores = os.cpu_count() or 1
    regimes = {}
    plain_key, comp_key = section["cases"]
    sources = {"disk": {k: bw.get(k) for k in (plain_key, comp_key)}, "tmpfs": section.get("tmpfs", {})}
    for name, src in sources.items():
        plain, comp = src.get(plain_key), src.get(comp_key)
        if not plain or not comp or "write" not in plain or "write" not in comp:
            continue
        b_fs = plain["write"]["median"]  # what the job gets from this tier, uncompressed
        breakeven = 1.0 / (1.0 - b_fs / b_c) if b_c > b_fs else None
        predicted_speedup = (1.0 / b_fs) / (1.0 / b_c + 1.0 / (r * b_fs))
        measured_speedup = comp["write"]["median"] / b_fs
        regimes[name] = {
            "b_fs_gib_s": b_fs, "per_rank_share_gib_s": b_fs / nprocs, "breakeven_ratio": breakeven,
            "ratio": r, "pays_by_rule": breakeven is not None and r > breakeven,
            "predicted_speedup": predicted_speedup, "measured_speedup": measured_speedup,
            "uncompressed_gib_s": b_fs, "compressed_gib_s": comp["write"]["median"]}
    return {"ranks": nprocs, "cores": cores, "p_eff": min(nprocs, cores), "regimes": regimes,
            "rule": "compression pays iff r > 1 / (1 - B_fs / B_c), B_c = aggregate compression speed "
                    "(P_eff x B_zstd, P_eff = min(ranks, cores)); never when B_fs / P_eff >= B_zstd"}
