"""Checksum cost: ckptio's block checksum (``ckptio.model.meta.checksum``, xxh3-64) over the checkpoint data.

Every rank hashes its own arrays at the same time, as ckptio's declare phase does, between barriers; the
result is compared with the write time of the native backend in the report (target: < 5 % of it).
"""

from __future__ import annotations

import time
from typing import Any

from ckptio.model import meta as metamod

from .common import GIB, Dataset, summary, timed


def run(comm, data: Dataset, repeats: int) -> dict[str, Any]:
    """Seconds for every rank to checksum its variables (max over ranks) and single-core xxh3 throughput."""
    def hash_all() -> None:
        for v in range(len(data.names)):
            metamod.checksum(data.local(v))

    seconds = [timed(comm, hash_all)[0] for _ in range(repeats)]
    single = None
    if comm.Get_rank() == 0:  # one process alone: the per-core speed
        t0 = time.perf_counter()
        hash_all()
        single = data.data.nbytes / GIB / max(time.perf_counter() - t0, 1e-9)
    single = comm.bcast(single, root=0)
    return {"algorithm": metamod.CHECKSUM_ALGORITHM, "bytes_total": data.total_bytes,
            "seconds_all_ranks": summary(seconds), "seconds_samples": seconds,
            "aggregate_gib_s": data.total_bytes / GIB / summary(seconds)["median"],
            "single_process_gib_s": single,
            "method": "every rank hashes its own arrays concurrently (as in ckptio's declare phase); max over "
                      "ranks between barriers"}
