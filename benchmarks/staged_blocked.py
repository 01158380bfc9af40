"""Blocked time of a staged checkpoint to node-local tmpfs vs a synchronous write to disk (issue 14).

The application is blocked for the whole write in sync mode, and only for ``close()`` when staging: every
rank writes its blocks into its own node's stage (``/dev/shm`` in the emulated nodes: a private tmpfs per
node), the drain to disk runs in the background (each staged checkpoint is waited for before the next
measurement, so drains never overlap a measured write).

    python -m benchmarks.staged_blocked --nodes 2,2 --size 1G --outdir /var/tmp/bench   # emulated nodes
    mpirun -n 4 python -m benchmarks.staged_blocked --run --size 1G --outdir DIR --stage /dev/shm/x  # real job

``--nodes`` starts the job itself on emulated nodes (tests/multinode.py; needs unshare): they are
namespaces of one machine, so every "node" shares the same cores (two on the reference machine) and the same
disk: the figure shows what ckptio's own work costs, not a cluster's bandwidth. Prints one JSON line.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from benchmarks import emulated_nodes


def measure(size: int, outdir: str, stage: str, repeats: int) -> dict | None:
    """Collective (MPI program): medians of the blocked seconds per checkpoint, sync and staged."""
    import numpy as np
    from mpi4py import MPI

    import ckptio

    comm = MPI.COMM_WORLD
    rank, nprocs = comm.Get_rank(), comm.Get_size()
    count = size // 8 // nprocs
    data = np.random.default_rng(rank).random(count)
    results: dict[str, list[float]] = {"sync": [], "staged": []}
    for i in range(repeats):
        for mode in ("sync", "staged"):
            path = os.path.join(outdir, f"bench_{mode}_{i}")
            kw = {"stage_dir": stage} if mode == "staged" else {}
            comm.Barrier()
            t = time.perf_counter()
            ck = ckptio.create(path, comm, **kw)
            ck.write("x", data, offset=(count * rank,), global_shape=(count * nprocs,))
            ck.close()
            blocked = comm.allreduce(time.perf_counter() - t, op=MPI.MAX)
            ck.wait()
            comm.Barrier()
            results[mode].append(blocked)
            if rank == 0:
                os.unlink(path)
    hosts = comm.gather(MPI.Get_processor_name())
    if rank != 0:
        return None
    sync, staged = statistics.median(results["sync"]), statistics.median(results["staged"])
    return {"bytes": count * 8 * nprocs, "ranks": nprocs, "repeats": repeats, "sync_s": results["sync"],
            "staged_s": results["staged"], "sync_median_s": sync, "staged_median_s": staged,
            "ratio": staged / sync, "hosts": sorted(set(hosts))}


def main(argv: list[str] | None = None) -> int:
    return emulated_nodes.main("benchmarks.staged_blocked", measure, __doc__.split("\n\n")[0], size="1G",
                               stage="/dev/shm/ckptio-bench-stage", nodes_example="2,2", argv=argv)


if __name__ == "__main__":
    sys.exit(main())
