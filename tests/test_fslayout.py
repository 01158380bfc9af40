"""ckptio.engine.fslayout without CephFS (the real-CephFS tests are tests/cephfs, make test-cephfs): file system
detection
on this machine's own disk, the record of a layout that cannot be set, the object arithmetic the restart aligns
to, the typed record's validation, and older checkpoints (no record) falling back to the hints' layout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckptio.engine import fslayout
from ckptio.model import meta as metamod
from ckptio.model.document import LayoutRecord

MIB = 1 << 20
FIXTURES = Path(__file__).resolve().parent / "data"


def test_local_disk_is_detected_and_recorded_as_unstriped(tmp_path):
    fs = fslayout.detect(str(tmp_path))
    assert fs not in ("cephfs", "lustre", "gpfs")
    magic, bsize = fslayout.statfs_magic(str(tmp_path))
    assert magic != 0 and bsize > 0
    path = tmp_path / "ck"
    record = fslayout.finish(fslayout.apply(str(path), 4, MIB), str(path))
    assert path.exists() and path.stat().st_size == 0  # the empty file the backend then opens
    assert record["type"] == fs and record["got"] is None and "no per-file striping" in record["reason"]
    fslayout.check_record(record)
    with pytest.raises(OSError):
        fslayout.statfs_magic(str(tmp_path / "missing" / "dir"))


def test_modes_off_and_unknown(tmp_path, monkeypatch):
    monkeypatch.setenv(fslayout.ENV_LAYOUT, "off")
    record = fslayout.apply(str(tmp_path / "a"), 4, MIB)
    assert record["mode"] == "off" and record["type"] is None and "off" in record["reason"]
    assert fslayout.finish(record, str(tmp_path / "a"))["got"] is None
    monkeypatch.setenv(fslayout.ENV_LAYOUT, "sometimes")
    assert "not one of" in fslayout.apply(str(tmp_path / "b"), 4, MIB)["reason"]


def test_granule_is_whole_objects():
    # CephFS: units interleave over stripe_count objects; a contiguous range of whole objects is an object set
    assert fslayout.granule({"stripe_count": 4, "stripe_unit": MIB, "object_size": 4 * MIB}) == 16 * MIB
    assert fslayout.granule({"stripe_count": 1, "stripe_unit": 4 * MIB, "object_size": 4 * MIB}) == 4 * MIB
    assert fslayout.granule({"stripe_count": 1, "stripe_unit": MIB, "object_size": 4 * MIB}) == 4 * MIB
    assert fslayout.granule({"stripe_count": 8, "stripe_unit": MIB}) == MIB  # Lustre: one stripe unit
    assert fslayout.ceph_object_size(MIB) == 4 * MIB
    assert fslayout.ceph_object_size(3 * MIB) == 6 * MIB
    assert fslayout.ceph_object_size(8 * MIB) == 8 * MIB
    assert fslayout.parse_ceph_layout("stripe_unit=65536 stripe_count=2 object_size=4194304 pool=data") == {
        "stripe_unit": 65536, "stripe_count": 2, "object_size": 4194304, "pool": "data"}


def test_restart_layout_prefers_what_the_file_system_gave():
    hinted = LayoutRecord.from_json({"stripe_count": 8, "stripe_unit": MIB})
    assert fslayout.restart_layout(hinted) == (8, MIB)
    got = LayoutRecord.from_json({"stripe_count": 8, "stripe_unit": MIB,
                                  "fs": {"got": {"stripe_count": 2, "stripe_unit": MIB, "object_size": 4 * MIB}}})
    assert fslayout.restart_layout(got) == (2, 8 * MIB)
    damaged = LayoutRecord.from_json({"stripe_count": 8, "stripe_unit": MIB, "fs": {"got": {"stripe_count": "two"}}})
    assert fslayout.restart_layout(damaged) == (8, MIB)
    assert fslayout.restart_layout(None) == (1, MIB)


@pytest.mark.parametrize("bad", [[1], {"type": 3}, {"got": [4]}, {"asked": {"stripe_count": 1.5}},
                                 {"got": {"stripe_count": True}}])
def test_record_validation_rejects_untyped_values(bad):
    with pytest.raises(ValueError):
        fslayout.check_record(bad)


def test_format1_fixtures_have_no_record_and_still_read():
    fixtures = sorted(p for p in (FIXTURES / "format1").iterdir() if p.suffix in (".ckpt", ".h5", ".nc"))
    assert len(fixtures) >= 4
    from ckptio.backends import detect_backend

    read = 0
    for path in fixtures:
        meta = detect_backend(str(path), thorough=True).read_document(str(path))
        assert "fs" not in meta.get("layout", {})
        assert fslayout.restart_layout(meta)[0] >= 1
        read += 1
    assert read == len(fixtures)


def test_metadata_validation_accepts_the_record_and_rejects_a_broken_one():
    doc = {"schema": 2, "backend": "mpiio", "nprocs": 1, "attrs": {}, "variables": {}, "checksum": "xxh3_64",
           "layout": {"stripe_count": 1, "stripe_unit": MIB,
                      "fs": {"type": "ext4", "mode": "set", "method": None, "asked": None, "got": None,
                             "reason": "ext4 has no per-file striping"}}}
    metamod.validate(doc)
    doc["layout"]["fs"]["got"] = "stripe_count=4"
    with pytest.raises(ValueError):
        metamod.validate(doc)

def test_directory_layout_is_none_off_ceph(tmp_path):
    assert fslayout.directory_layout(str(tmp_path)) is None
    count, unit, source = fslayout.planned_layout(str(tmp_path), 64, MIB)
    assert (count, unit) == (64, MIB) and "no directory layout" in source
    assert fslayout.write_alignment(os.path.join(tmp_path, "x"), {"striping_factor": "4", "striping_unit": "65536"}) \
        == 65536
