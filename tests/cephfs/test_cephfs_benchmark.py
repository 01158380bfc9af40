"""benchmarks/cephfs.py runs on the real CephFS (a small size, one repeat): its figures are measured, not asserted,
but the benchmark must run and report the layout CephFS gave and where the objects went (it once called a function
that the typed document had removed, and nothing ran it)."""

from __future__ import annotations

import json

import pytest
from mpi_helpers import run_mpi

pytestmark = [pytest.mark.cephfs, pytest.mark.mpi]


def test_the_cephfs_benchmark_reports_layout_and_objects_per_osd(cephdir, ceph_env, tmp_path):
    out = tmp_path / "samples.json"
    env = {k: ceph_env[k] for k in ("CEPH_CONF", "CKPTIO_CEPH_KEYRING", "CKPTIO_CEPH_DATA_POOL")}
    proc = run_mpi(2, ["-m", "benchmarks.cephfs", "--dir", str(cephdir), "--size", "8M", "--repeats", "1",
                       "--json", str(out)], timeout=600, env=env)
    assert "stripe count  2" in proc.stdout, proc.stdout
    samples = json.loads(out.read_text())
    assert sorted(s["stripe_count"] for s in samples) == [1, 2]
    for s in samples:
        assert s["got"]["stripe_count"] == s["stripe_count"] and s["got"]["stripe_unit"] > 0, s
        assert s["write_MiBps"] > 0 and s["read_MiBps"] > 0
        placed = s["placement"]
        assert placed["objects"] == sum(e["objects"] for e in placed["per_osd"].values()) >= 2, placed
        assert set().union(*(e["writers"] for e in placed["per_osd"].values())) == {0, 1}, placed
        assert placed["layout"] == s["got"]
