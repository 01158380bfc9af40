"""On a real CephFS (ci/cephfs.sh): a directory's own layout (a site default), layouts that cannot be set and why
(a file with data, a stripe unit CephFS refuses, a directory that is not on CephFS): the checkpoint is written
anyway and the record says what happened."""

from __future__ import annotations

import os
import subprocess
import sys

import apprun
import pytest

from ckptio.engine import fslayout

pytestmark = [pytest.mark.cephfs, pytest.mark.mpi]
MIB = 1 << 20


def set_dir_layout(directory, count: int, unit: int, object_size: int) -> None:
    for key, value in (("object_size", object_size), ("stripe_unit", unit), ("stripe_count", count)):
        os.setxattr(directory, f"ceph.dir.layout.{key}", str(value).encode())


@pytest.mark.timeout(600)
def test_directory_default_inherited_or_overridden(cephdir):
    """A directory with 2 stripes of 1 MiB: ckptio sets its own count (4 ranks: 4) by default; with
    CKPTIO_LAYOUT=inherit the file keeps the directory's 2, the record says so, the restart uses 2 aggregators
    (min(readers, real stripe count)) and ``ckptio plan --directory`` models 2 stripes."""
    set_dir_layout(cephdir, 2, MIB, 4 * MIB)
    assert fslayout.directory_layout(str(cephdir))["stripe_count"] == 2
    rep = apprun.write(4, cephdir / "own")
    assert rep["layout"]["fs"]["got"]["stripe_count"] == 4
    assert apprun.read(4, cephdir / "own")["aggregators"] == [0, 1, 2, 3]

    rep = apprun.write(4, cephdir / "inherited", env={"CKPTIO_LAYOUT": "inherit"})
    fs = rep["layout"]["fs"]
    assert fs["mode"] == "inherit" and fs["method"] == "inherited from the directory" and fs["asked"] is None, fs
    assert fs["got"]["stripe_count"] == 2 and fs["got"]["stripe_unit"] == MIB, fs
    assert rep["xattr"].startswith("stripe_unit=1048576 stripe_count=2 ")
    assert len(apprun.read(4, cephdir / "inherited")["aggregators"]) == 2
    for layout_mode, count in (("inherit", 2), ("set", 64)):
        plan = subprocess.run([sys.executable, "-m", "ckptio", "plan", "--ranks", "64", "--bytes", "1G",
                               "--no-control-plane", "--directory", str(cephdir)], capture_output=True, text=True,
                              check=True, env={**os.environ, "CKPTIO_LAYOUT": layout_mode})
        assert f"stripe count {count}" in plan.stdout, plan.stdout
        assert ("directory layout" in plan.stderr) == (layout_mode == "inherit"), plan.stderr

def test_file_with_data_keeps_its_layout(cephdir):
    """CephFS refuses a new layout on a file that has data: the record says why, and what the file has."""
    path = cephdir / "full"
    path.write_bytes(b"x" * 4096)
    before = fslayout.read_ceph(str(path))
    record = fslayout.finish(fslayout.apply(str(path), 4, MIB), str(path))
    assert record["type"] == "cephfs" and record["asked"]["stripe_count"] == 4
    assert "already has data" in record["reason"], record
    assert record["got"] == before and record["got"]["stripe_count"] != 4


@pytest.mark.timeout(600)
def test_unit_cephfs_refuses_is_recorded_not_fatal(cephdir):
    """A stripe unit that is no multiple of 64 KiB: no layout, a reason, and a checkpoint that restarts."""
    rep = apprun.write(2, cephdir / "odd", env={"CKPTIO_HINTS": "striping_unit=100000"})
    fs = rep["layout"]["fs"]
    assert "not a multiple of 65536" in fs["reason"], fs
    assert fs["got"]["stripe_unit"] != 100000  # the directory's (the file system's default) layout
    assert apprun.read(3, cephdir / "odd")["readers"] == 3


@pytest.mark.timeout(600)
def test_not_on_cephfs(tmp_path):
    """A local-disk directory: no striping, recorded as such ("layout got (none)" in inspect)."""
    rep = apprun.write(2, tmp_path / "local")
    fs = rep["layout"]["fs"]
    assert fs["type"] not in ("cephfs", "lustre", "gpfs") and fs["got"] is None, fs
    assert "no per-file striping" in fs["reason"], fs
    text = subprocess.run([sys.executable, "-m", "ckptio", "inspect", str(tmp_path / "local")], capture_output=True,
                          text=True, check=True).stdout
    assert "layout got  (none)" in text, text
