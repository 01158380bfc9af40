"""On a real CephFS (ci/cephfs.sh), item 3 of issue 26: the native backend places each rank's region on whole
objects of the layout ckptio set, and the restart's aggregators read file domains made of whole objects, so no
object is shared between two writers' regions or two aggregators' domains. Checked against the objects that
really exist in the data pool (``rados ls``/``stat``) and where they are (``ceph osd map``); the per-OSD
distribution is written to ``$CKPTIO_CEPH_REPORT`` (JSON) when set, for the benchmark notes."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import apprun
import pytest

from ckptio import fslayout

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
