"""On a real CephFS (ci/cephfs.sh), item 3 of issue 26: the native backend places each rank's region on whole
objects of the layout ckptio set, and the restart's aggregators read file domains made of whole objects, so no
object is shared between two writers' regions or two aggregators' domains. On the write side (issue 29 item 1),
ckptio's own write aggregators write stripe-cyclic domains: traced with strace, every object has one writer, and
with as many aggregators as stripes each writes one object index class. Checked against the objects that
really exist in the data pool (``rados ls``/``stat``) and where they are (``ceph osd map``); the per-OSD
distribution is written to ``$CKPTIO_CEPH_REPORT`` (JSON) when set, for the benchmark notes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import apprun
import pytest
from ckptio.backends.mpiio import NativeBackend
from mpi_helpers import mpi_env

from ckptio.engine import fslayout

pytestmark = [pytest.mark.cephfs, pytest.mark.mpi]
MIB = 1 << 20


def objects_of(start: int, end: int, layout: dict) -> set[int]:
    """Ceph's striping (file_to_extents): the object numbers holding file bytes [start, end)."""
    su, sc, os_ = layout["stripe_unit"], layout["stripe_count"], layout["object_size"]
    per_object = os_ // su
    out = set()
    for block in range(start // su, (end - 1) // su + 1):
        stripe, pos = divmod(block, sc)
        out.add((stripe // per_object) * sc + pos)
    return out


@pytest.mark.timeout(600)
def test_domains_cover_whole_objects(cephdir, ceph, ceph_env):
    nprocs, mib = 4, 16
    path = cephdir / "objects"
    rep = apprun.write(nprocs, path, "mpiio", mib=mib)
    layout = rep["layout"]["fs"]["got"]
    assert (layout["stripe_count"], layout["stripe_unit"], layout["object_size"]) == (4, MIB, 4 * MIB)
    granule = fslayout.granule(layout)
    assert granule == 16 * MIB
    got = apprun.read(nprocs, path)
    assert sorted(got["aggregators"]) == [0, 1, 2, 3]
    domains = got["domains"]
    assert sum(e - s for _, s, e in domains) == nprocs * mib * MIB  # the whole of "u", each byte once

    owners: dict[int, set[int]] = defaultdict(set)
    for agg, start, end in domains:
        assert start % granule == 0 and end % granule == 0, (agg, start, end)  # whole object sets
        for obj in objects_of(start, end, layout):
            owners[obj].add(agg)
    shared = {obj: aggs for obj, aggs in owners.items() if len(aggs) > 1}
    assert not shared, f"objects read by more than one aggregator: {shared}"
    # every writer's block of "u" is one aggregator's domain here (4 writers, 4 readers): so one writer per object
    assert len(owners) == nprocs * mib * MIB // layout["object_size"]

    prefix = f"{rep['inode']:x}."
    pool = ceph_env["CKPTIO_CEPH_DATA_POOL"]
    names = sorted(n for n in ceph("rados", "-p", pool, "ls").split() if n.startswith(prefix))
    numbers = {int(n[len(prefix):], 16): n for n in names}
    assert set(owners) <= set(numbers), f"planned objects missing from the pool: {set(owners) - set(numbers)}"

    def where(name: str) -> tuple[str, int, int]:
        size = int(ceph("rados", "-p", pool, "stat", name).split("size ")[-1])
        osd = json.loads(ceph("ceph", "osd", "map", pool, name, "-f", "json"))["acting_primary"]
        return name, osd, size

    with ThreadPoolExecutor(8) as pool_:
        placed = {name: (osd, size) for name, osd, size in pool_.map(where, names)}
    for obj in owners:  # data objects are full: the regions covered them whole
        assert placed[numbers[obj]][1] == layout["object_size"], (numbers[obj], placed[numbers[obj]])
    per_osd: dict[int, dict] = defaultdict(lambda: {"objects": 0, "bytes": 0, "aggregators": set()})
    for obj, name in numbers.items():
        osd, size = placed[name]
        per_osd[osd]["objects"] += 1
        per_osd[osd]["bytes"] += size
        per_osd[osd]["aggregators"] |= owners.get(obj, set())
    summary = {str(o): {**v, "aggregators": sorted(v["aggregators"])} for o, v in sorted(per_osd.items())}
    report = {"layout": layout, "objects": len(numbers), "data_objects": len(owners), "per_osd": summary,
              "object_owner": {numbers[o]: sorted(a) for o, a in sorted(owners.items())},
              "object_osd": {n: placed[n][0] for n in names}}
    print(json.dumps(report, indent=1))
    if os.environ.get("CKPTIO_CEPH_REPORT"):
        with open(os.environ["CKPTIO_CEPH_REPORT"], "w") as f:
            json.dump(report, f, indent=1)


# ------------------------------------------------------------------------------------------ the write side
_CLONE = re.compile(r"^clone3?\(.*CLONE_THREAD.*\) = (\d+)$", re.M)
# pwrite64(fd, buf, count, offset), pwritev(fd, iov, iovcnt, offset), pwritev2(fd, iov, iovcnt, offset, flags)
_PWRITE = re.compile(r"^pwrite(?:64|v)\((\d+), .*, (\d+)\) = (\d+)$|^pwritev2\((\d+), .*, (\d+), \d+\) = (\d+)$",
                     re.M)


def traced_writes(prefix: Path, path: Path) -> dict[int, list[tuple[int, int]]]:
    """Per process (pid), the ``(offset, bytes)`` of every positional write to the checkpoint (its temporary
    name), from ``strace -ff`` traces (one file per thread: threads joined to their process through the
    ``clone`` calls with CLONE_THREAD)."""
    parent: dict[int, int] = {}
    texts = {}
    for trace in prefix.parent.glob(f"{prefix.name}.*"):
        tid = int(trace.name.rsplit(".", 1)[1])
        texts[tid] = trace.read_text()
        for child in _CLONE.findall(texts[tid]):
            parent[int(child)] = tid

    def leader(tid: int) -> int:
        while tid in parent:
            tid = parent[tid]
        return tid

    name = re.escape(str(path.parent))
    opened = re.compile(rf'open(?:at)?\(.*"{name}/\.{re.escape(path.name)}\.ckptio-tmp-[0-9a-f]{{12}}", '
                        r'[^)]*\) = (\d+)')
    fds: dict[int, set[str]] = defaultdict(set)
    for tid, text in texts.items():
        fds[leader(tid)] |= set(opened.findall(text))
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for tid, text in texts.items():
        pid = leader(tid)
        for match in _PWRITE.findall(text):
            fd, off, n = match[:3] if match[0] else match[3:]
            if fd in fds[pid]:
                out[pid].append((int(off), int(n)))
    return {pid: done for pid, done in out.items() if done}


@pytest.mark.timeout(600)
@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is installed by ci/install.sh")
def test_write_aggregators_write_whole_objects_one_class_each(cephdir, ceph, tmp_path):
    """Issue 26 item 3 on the write side (issue 29 item 1): with the layout ckptio set (4 stripes of 1 MiB, 4 MiB
    objects) and A = S = 4 write aggregators on stripe-cyclic domains, strace shows every data object written by
    exactly one aggregator, aggregator a writing only objects a, a + 4, a + 8, ... (one object index class); and
    only the aggregators wrote to the file at all."""
    nprocs, mib = 4, 16
    path = cephdir / "written"
    prefix = tmp_path / "trace"
    cmd = ["strace", "-f", "-qq", "-e", "trace=openat,open,pwrite64,pwritev,pwritev2,clone,clone3", "-ff", "-o",
           str(prefix), "mpirun", "-n", str(nprocs), sys.executable, apprun.APP, "write", str(path), "mpiio", "sync",
           str(mib)]
    proc = subprocess.run(cmd, env=mpi_env({"CKPTIO_WRITE_BUFFER_BYTES": "8M"}), capture_output=True, text=True,
                          timeout=500)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    rep = apprun.report(proc.stdout)
    layout = rep["layout"]["fs"]["got"]
    assert (layout["stripe_count"], layout["stripe_unit"], layout["object_size"]) == (4, MIB, 4 * MIB)
    agg = rep["aggregation"]
    assert agg["kind"] == "cyclic" and agg["aggregators"] == [0, 1, 2, 3] and agg["cell"] == MIB, agg
    assert agg["rounds"] > 1 and agg["threaded"], agg  # 8 MiB rounds of a 16+ MiB domain: the pipeline ran
    rank_of = {pid: r for r, pid in enumerate(rep["pids"])}
    meta = NativeBackend().read_document(str(path))
    data_end = max(int(b["file_offset"]) + int(b["stored_nbytes"]) for v in meta["variables"].values()
                   for b in v["blocks"])
    writes = traced_writes(prefix, path)
    assert set(writes) <= set(rank_of), "a process that is not a rank wrote to the checkpoint"
    owners: dict[int, set[int]] = defaultdict(set)
    for pid, done in writes.items():
        for off, n in done:
            end = min(off + n, data_end)  # rank 0 also writes the index and trailer after the data
            if off < end:
                for obj in objects_of(off, end, layout):
                    owners[obj].add(rank_of[pid])
    assert set().union(*owners.values()) == {0, 1, 2, 3}
    shared = {obj: w for obj, w in owners.items() if len(w) > 1}
    assert not shared, f"objects written by more than one aggregator: {shared}"
    for obj, w in owners.items():
        assert w == {agg["aggregators"][obj % 4]}, (obj, w)  # aggregator a: objects a, a + S, a + 2S, ...
    assert len(owners) >= nprocs * mib * MIB // layout["object_size"]
    print(json.dumps({"object_writer": {str(o): sorted(w) for o, w in sorted(owners.items())}}))
