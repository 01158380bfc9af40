"""Multi-level checkpoints (issue 28): blocked time and extra node-local bytes per redundancy scheme against a
synchronous write to disk, and the restart after a lost node against a restart from the parallel file system.

Per repeat: a synchronous checkpoint to ``--outdir`` (blocked = the whole write); then for ``single``, ``partner``
and ``xor`` a Series checkpoint to the node-local stage that is not drained (``drain_every`` larger than the run:
blocked = the stage write plus the redundancy exchange); for ``partner`` and ``xor`` the last node's stage is then
wiped and a new Series' ``latest()`` rebuilds the checkpoint, drains it and every rank reads its block back
("restart after a lost node"), against opening and reading the synchronous checkpoint ("restart from the
parallel file system").

    python -m benchmarks.multilevel --nodes 1,1,1,1 --size 256M --outdir /var/tmp/bench   # emulated nodes

Emulated nodes (tests/multinode.py) share this machine's cores and disk, so the figures show ckptio's own work,
not a cluster's network or bandwidth. Prints one JSON line.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time

from benchmarks import emulated_nodes

SCHEMES = ("single", "partner", "xor")


def measure(size: int, outdir: str, stage: str, repeats: int) -> dict | None:
    """Collective (MPI program): the samples of every measurement, on rank 0 (None elsewhere)."""
    import numpy as np
    from mpi4py import MPI

    import ckptio

    comm = MPI.COMM_WORLD
    rank, nprocs = comm.Get_rank(), comm.Get_size()
    hosts = comm.allgather(MPI.Get_processor_name())
    leader = hosts.index(hosts[rank]) == rank
    last_leader = hosts.index(hosts[-1])
    count = size // 8 // nprocs
    data = np.random.default_rng(rank).random(count)
    samples: dict[str, list[float]] = {}

    def timed(key: str, fn) -> object:
        comm.Barrier()
        t = time.perf_counter()
        out = fn()
        samples.setdefault(key, []).append(comm.allreduce(time.perf_counter() - t, op=MPI.MAX))
        return out

    def write(ck) -> None:
        ck.write("x", data, offset=(count * rank,), global_shape=(count * nprocs,))
        ck.close()

    def read(path: str) -> None:
        with ckptio.open(path, comm) as rd:
            assert (rd.read("x", offset=(count * rank,), shape=(count,)) == data).all()

    extra: dict[str, int] = {}
    for i in range(repeats):
        sync = os.path.join(outdir, f"sync_{i}")
        timed("sync_blocked", lambda sync=sync: write(ckptio.create(sync, comm)))
        for scheme in SCHEMES:
            directory = os.path.join(outdir, f"{scheme}_{i}")
            series = ckptio.Series(directory, comm, stage_dir=stage, redundancy=scheme, drain_every=1 << 30)
            timed(f"{scheme}_blocked", lambda series=series: write(series.create(1)))
            series.wait()
            mine = 0
            if leader:
                for root, _dirs, files in os.walk(stage):
                    if "redundancy" in root.split(os.sep):
                        mine += sum(os.path.getsize(os.path.join(root, f)) for f in files if f != "level.json")
            extra[scheme] = comm.allreduce(mine)
            if scheme != "single":
                if rank == last_leader:
                    shutil.rmtree(stage)
                comm.Barrier()

                def restart(directory: str = directory, scheme: str = scheme) -> None:
                    found = ckptio.Series(directory, comm, stage_dir=stage, redundancy=scheme).latest()
                    read(found)

                timed(f"{scheme}_restart_lost_node", restart)
            if leader:
                shutil.rmtree(stage, ignore_errors=True)
            comm.Barrier()
            if rank == 0:
                shutil.rmtree(directory, ignore_errors=True)
        timed("pfs_restart", lambda sync=sync: read(sync))
        if rank == 0:
            os.unlink(sync)
    if rank != 0:
        return None
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {"bytes": count * 8 * nprocs, "ranks": nprocs, "repeats": repeats, "samples_s": samples,
            "median_s": med, "extra_bytes": extra,
            "extra_fraction": {k: v / (count * 8 * nprocs) for k, v in extra.items()},
            "hosts": sorted(set(hosts))}


def main(argv: list[str] | None = None) -> int:
    return emulated_nodes.main("benchmarks.multilevel", measure, __doc__.split("\n\n")[0], size="256M",
                               stage="/dev/shm/ckptio-bench-multilevel", nodes_example="1,1,1,1", argv=argv)


if __name__ == "__main__":
    sys.exit(main())
