"""CephFS case (issue 26): write and restart bandwidth with stripe count 1 against ckptio's min(nprocs, 80), and
where the objects went (objects, bytes and writing ranks per OSD), on the real CephFS of ci/cephfs.sh.

    bash ci/cephfs.sh up
    eval "$(bash ci/cephfs.sh env)"; export CEPH_CONF CKPTIO_CEPH_KEYRING CKPTIO_CEPH_DATA_POOL
    mpirun -n 4 .venv/bin/python -m benchmarks.cephfs --dir /mnt/ckptio-cephfs/bench --size 512M --repeats 3

Each rank writes one contiguous block of a 1-D float64 variable (native backend); the restart reads it on N-1
ranks with another decomposition, every value checked. Stripe count 1 is asked through the hints
(``striping_factor=1``), which ckptio now applies on CephFS, so both cases differ only in the layout; the stripe
unit is ckptio's default 1 MiB in both (object size 4 MiB). The layout the file system gave is read back from the
checkpoint's metadata, the objects are listed with ``rados`` and placed with ``ceph osd map``, and each object's
writing rank is the rank whose region holds it (block table). Restart reads are warm: ceph-fuse keeps its own
object cache, which dropping the kernel's page cache does not empty (honest cold reads need a remount).
Prints a table and, with ``--json FILE``, every sample.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from collections import defaultdict

import numpy as np
from mpi4py import MPI

import ckptio
from ckptio.model.document import CheckpointDocument
from ckptio.model.fs_layout_record import StripeLayout
from ckptio.tools.simulate import parse_size


def _ceph(*args: str) -> str:
    cmd = [args[0], "-n", "client.admin"]
    if os.environ.get("CKPTIO_CEPH_KEYRING"):
        cmd += ["-k", os.environ["CKPTIO_CEPH_KEYRING"]]
    return subprocess.run([*cmd, *args[1:]], capture_output=True, text=True, check=True, timeout=120).stdout


def got_layout(meta: CheckpointDocument) -> StripeLayout | None:
    """The layout the file system gave the checkpoint (``inspect``'s "layout got"), None where none was read."""
    fs = meta.layout.fs if meta.layout is not None else None
    return None if fs is None else fs.got_layout()


def objects_per_osd(path: str, meta: CheckpointDocument) -> dict:
    """Rank 0: objects, bytes and writing ranks per OSD of the checkpoint file ``path`` (see module docstring)."""
    pool = os.environ.get("CKPTIO_CEPH_DATA_POOL", "cephfs_data")
    got = got_layout(meta)
    assert got is not None, "CephFS reported no layout for the checkpoint"
    su, sc, osz = got.stripe_unit, got.stripe_count, got.object_size
    prefix = f"{os.stat(path).st_ino:x}."
    names = [n for n in _ceph("rados", "-p", pool, "ls").split() if n.startswith(prefix)]
    from ckptio.backends import detect_backend

    stored = detect_backend(path).read_document(path)
    writer_of: dict[int, set[int]] = defaultdict(set)
    for b in stored.variables["u"].blocks.blocks():
        start, end = b.file_offset, b.file_offset + b.stored_nbytes
        for unit in range(start // su, (end - 1) // su + 1):
            stripe, pos = divmod(unit, sc)
            writer_of[(stripe // (osz // su)) * sc + pos].add(b.rank)
    per_osd: dict[int, dict] = defaultdict(lambda: {"objects": 0, "bytes": 0, "writers": set()})
    for name in names:
        osd = json.loads(_ceph("ceph", "osd", "map", pool, name, "-f", "json"))["acting_primary"]
        size = int(_ceph("rados", "-p", pool, "stat", name).split("size ")[-1])
        entry = per_osd[osd]
        entry["objects"] += 1
        entry["bytes"] += size
        entry["writers"] |= writer_of.get(int(name[len(prefix):], 16), set())
    shared = sum(1 for w in writer_of.values() if len(w) > 1)
    return {"layout": dict(got.values), "objects": len(names), "objects_with_two_writers": shared,
            "per_osd": {str(k): {**v, "writers": sorted(v["writers"])} for k, v in sorted(per_osd.items())}}


def run_case(comm, directory: str, nbytes: int, count: int, repeat: int) -> dict:
    rank, size = comm.Get_rank(), comm.Get_size()
    n = nbytes // 8 // size
    data = np.arange(rank * n, (rank + 1) * n, dtype=np.float64)
    path = os.path.join(directory, f"ck_s{count}_r{repeat}")
    comm.Barrier()
    t = time.perf_counter()
    with ckptio.create(path, comm, hints={"striping_factor": count}) as w:
        w.write("u", data, offset=(rank * n,), global_shape=(size * n,))
    write_s = comm.allreduce(time.perf_counter() - t, op=MPI.MAX)
    meta = w.meta if rank == 0 else None
    readers = comm.Split(0 if rank < max(1, size - 1) else MPI.UNDEFINED, rank)
    read_s = 0.0
    if readers != MPI.COMM_NULL:
        m = readers.Get_size()
        total = size * n
        lo, hi = readers.Get_rank() * total // m, (readers.Get_rank() + 1) * total // m
        readers.Barrier()
        t = time.perf_counter()
        with ckptio.open(path, readers) as ck:
            got = ck.read("u", offset=(lo,), shape=(hi - lo,))
        read_s = readers.allreduce(time.perf_counter() - t, op=MPI.MAX)
        assert np.array_equal(got, np.arange(lo, hi, dtype=np.float64)), "restart read wrong values"
        readers.Free()
    read_s = comm.allreduce(read_s, op=MPI.MAX)
    out = {"stripe_count": count, "repeat": repeat, "write_s": write_s, "read_s": read_s,
           "write_MiBps": nbytes / write_s / 2**20, "read_MiBps": nbytes / read_s / 2**20}
    if rank == 0:
        got = got_layout(meta)
        out["got"] = None if got is None else dict(got.values)
        out["placement"] = objects_per_osd(path, meta) if repeat == 0 else None
        os.unlink(path)
    return comm.bcast(out if rank == 0 else None, root=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", required=True, help="a directory on CephFS")
    parser.add_argument("--size", default="512M")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 0:
        os.makedirs(args.dir, exist_ok=True)
    comm.Barrier()
    nbytes = parse_size(args.size)
    counts = sorted({1, min(comm.Get_size(), 80)})
    samples = [run_case(comm, args.dir, nbytes, c, r) for r in range(args.repeats) for c in counts]
    if comm.Get_rank() != 0:
        return
    print(f"CephFS, {comm.Get_size()} writers, {comm.Get_size() - 1 or 1} readers, {nbytes / 2**20:.0f} MiB, "
          f"{args.repeats} repeats (median [min-max] MiB/s)")
    for c in counts:
        rows = [s for s in samples if s["stripe_count"] == c]
        for key in ("write_MiBps", "read_MiBps"):
            v = sorted(s[key] for s in rows)
            print(f"  stripe count {c:>2}  {key[:-6]:<5} {np.median(v):8.1f} [{v[0]:.1f}-{v[-1]:.1f}]")
        placement = rows[0]["placement"]
        print(f"    layout got {rows[0]['got']}; {placement['objects']} objects, "
              f"{placement['objects_with_two_writers']} written by two ranks' regions")
        for osd, entry in placement["per_osd"].items():
            print(f"    osd.{osd}: {entry['objects']:3d} objects {entry['bytes'] / 2**20:7.1f} MiB  "
                  f"writing ranks {entry['writers']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(samples, f, indent=1)


if __name__ == "__main__":
    main()
