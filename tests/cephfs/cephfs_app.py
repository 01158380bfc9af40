"""MPI program of the CephFS tests (tests/cephfs): write a checkpoint on N ranks, restart it on M ranks.

    mpirun -n N python cephfs_app.py write PATH BACKEND MODE MIB [STAGE_DIR]   (MODE: sync, async, staged)
    mpirun -n M python cephfs_app.py read PATH

Every rank of ``write`` declares one block of the 1-D variable ``u`` (MIB MiB of float64 per rank, values that
say where they belong) and a 2-D variable ``small``; rank 0 prints ``JSON {...}`` with the checkpoint's metadata
``layout`` entry, the ``ceph.file.layout`` the file system reports for the committed file, every rank's pid and
how ckptio's write aggregators wrote it (``stats.write.aggregation``: their ranks, the kind of file domains).
Every rank of ``read`` reads its own share of ``u`` (an uneven decomposition) and ``small`` and checks them;
rank 0 prints ``JSON {...}`` with the restart's aggregators and, for the native backend, each aggregator's file
domains of ``u`` as byte ranges ``[aggregator rank, start, end)`` (from the reader's routing and the block
table), which the tests map to Ceph objects and OSDs.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
from mpi4py import MPI

import ckptio

WORDS_PER_MIB = (1 << 20) // 8


def expected(start: int, count: int) -> np.ndarray:
    return np.arange(start, start + count, dtype=np.float64) * 0.5


def write(path: str, backend: str, mode: str, mib: int, stage_dir: str | None) -> None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    n = mib * WORDS_PER_MIB
    kw = {"stage_dir": stage_dir} if mode == "staged" else {"mode": mode}
    w = ckptio.create(path, comm, backend=backend, attrs={"writers": size}, **kw)
    w.write("u", expected(rank * n, n), offset=(rank * n,), global_shape=(size * n,))
    w.write("small", np.full((1, 3), rank, np.int32), offset=(rank, 0), global_shape=(size, 3))
    w.close()
    w.wait()
    # which file system client each rank went through: every ceph-fuse mount is its own device
    clients = comm.gather([MPI.Get_processor_name(), os.stat(os.path.dirname(os.path.abspath(path))).st_dev])
    pids = comm.gather(os.getpid())  # which process is which rank (the strace of the write aggregators)
    if rank == 0:
        try:
            xattr = os.getxattr(path, "ceph.file.layout").decode()
        except OSError as exc:
            xattr = f"ERROR {exc}"
        print("JSON " + json.dumps({"layout": w.meta["layout"], "xattr": xattr, "inode": os.stat(path).st_ino,
                                    "size": os.path.getsize(path), "clients": clients, "pids": pids,
                                    "aggregation": w.meta["stats"]["write"].get("aggregation")}), flush=True)


def read(path: str) -> None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    with ckptio.open(path, comm) as ck:
        writers = int(ck.attrs["writers"])
        total = int(ck.variables["u"].shape[0])
        # uneven: rank r reads [r*total//(size+1), ...), the last rank the rest
        cuts = [r * total // (size + 1) for r in range(size)] + [total]
        got = ck.read("u", offset=(cuts[rank],), shape=(cuts[rank + 1] - cuts[rank],))
        np.testing.assert_array_equal(got, expected(cuts[rank], cuts[rank + 1] - cuts[rank]))
        small = ck.read("small")
        np.testing.assert_array_equal(small, np.repeat(np.arange(writers, dtype=np.int32)[:, None], 3, axis=1))
        domains = _domains(ck, path) if rank == 0 else None
        aggregators = list(ck.aggregators)
    ok = comm.allreduce(1, op=MPI.SUM)
    clients = comm.gather([MPI.Get_processor_name(), os.stat(os.path.dirname(os.path.abspath(path))).st_dev])
    if rank == 0:
        print("JSON " + json.dumps({"aggregators": aggregators, "domains": domains, "readers": ok,
                                    "clients": clients}), flush=True)


def _domains(ck, path: str) -> list[list[int]] | None:
    """Rank 0: [aggregator rank, file start, file end) of every run of ``u`` (native backend: blocks have file
    offsets), from the reader's routing (which aggregator holds which element range) and the block table."""
    from ckptio.backends import detect_backend

    backend = detect_backend(path)
    if backend.name != "mpiio":
        return None
    meta = backend.read_document(path)
    blocks = [dict(b) for b in meta["variables"]["u"]["blocks"]]
    routing = ck._restart.routing
    index = list(meta["variables"]).index("u")
    out = []
    for run in np.flatnonzero(routing.run_var == index):
        lo, hi = int(routing.run_lo[run][0]), int(routing.run_hi[run][0])
        agg = int(routing.aggregators[routing.run_agg[run]])
        for b in blocks:
            b_lo, b_hi = int(b["offset"][0]), int(b["offset"][0]) + int(b["shape"][0])
            s, e = max(lo, b_lo), min(hi, b_hi)
            if s < e:
                out.append([agg, int(b["file_offset"]) + (s - b_lo) * 8, int(b["file_offset"]) + (e - b_lo) * 8])
    return out


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6] if len(sys.argv) > 6 else None)
    else:
        read(sys.argv[2])
