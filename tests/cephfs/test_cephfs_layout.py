"""On a real CephFS (ci/cephfs.sh): ckptio sets the file layout it chose (stripe count min(nprocs, 80), stripe unit
as the hints say) on every backend and in every write mode, the file system reports that layout for the
committed checkpoint, the metadata records it and ``ckptio inspect`` shows it as "layout got"; the checkpoint
restarts on another rank count (N-to-M)."""

from __future__ import annotations

import json
import subprocess
import sys

import apprun
import pytest
from mpi_helpers import BACKENDS

from ckptio.engine import fslayout

pytestmark = [pytest.mark.cephfs, pytest.mark.mpi]
MIB = 1 << 20
READERS = {1: 2, 2: 3, 4: 3, 8: 5}


def getfattr(path) -> dict:
    """The layout as ``getfattr`` (attr package), not Python, reports it."""
    out = subprocess.run(["getfattr", "--only-values", "-n", "ceph.file.layout", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return fslayout.parse_ceph_layout(out)


def inspect(path) -> tuple[str, dict]:
    text = subprocess.run([sys.executable, "-m", "ckptio", "inspect", str(path)], capture_output=True, text=True,
                          check=True).stdout
    doc = json.loads(subprocess.run([sys.executable, "-m", "ckptio", "inspect", "--json", str(path)],
                                    capture_output=True, text=True, check=True).stdout)
    return text, doc


def check_applied(path, rep: dict, count: int, unit: int = MIB) -> None:
    want = {"stripe_count": count, "stripe_unit": unit, "object_size": fslayout.ceph_object_size(unit)}
    fs = rep["layout"]["fs"]
    assert fs["type"] == "cephfs" and fs["mode"] == "set" and fs["method"] == "ceph.file.layout xattr", fs
    assert fs["reason"] is None, fs
    assert fs["asked"] == want
    assert {k: fs["got"][k] for k in want} == want, fs
    assert {k: v for k, v in getfattr(path).items() if k in want} == want
    text, doc = inspect(path)
    line = next(x for x in text.splitlines() if x.startswith("layout got"))
    assert f"stripe_count={count}" in line and f"stripe_unit={unit}" in line, text
    assert doc["layout"]["fs"]["got"] == fs["got"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("nprocs", [1, 2, 4, 8])
@pytest.mark.parametrize("backend", BACKENDS)
def test_layout_applied_and_n_to_m(backend, nprocs, cephdir):
    """Stripe count min(nprocs, 80) on the file (getfattr), in the metadata and inspect; restart on M ranks."""
    path = cephdir / f"ck_{backend}_{nprocs}"
    rep = apprun.write(nprocs, path, backend)
    check_applied(path, rep, min(nprocs, 80))
    got = apprun.read(READERS[nprocs], path)
    assert got["readers"] == READERS[nprocs]
    # the restart's aggregators follow the real stripe count: min(readers, stripe count)
    assert len(got["aggregators"]) == min(READERS[nprocs], nprocs)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["async", "staged"])
@pytest.mark.parametrize("backend", ["mpiio"])
def test_background_drains_set_the_layout(backend, mode, cephdir, tmp_path):
    """An asynchronous write and a staged drain (stage on the local disk) create the CephFS file the same way
    (their I/O thread runs the synchronous close of every backend, which the matrix above covers per backend)."""
    path = cephdir / f"bg_{backend}_{mode}"
    rep = apprun.write(4, path, backend, mode=mode, stage_dir=tmp_path / "stage" if mode == "staged" else None)
    check_applied(path, rep, 4)
    assert apprun.read(2, path)["readers"] == 2


@pytest.mark.timeout(600)
def test_layout_with_romio(cephdir):
    """Open MPI's ROMIO (romio321, UFS driver on the FUSE mount) keeps the layout set on the empty file too."""
    path = cephdir / "romio"
    env = {"OMPI_MCA_io": "romio321"}
    rep = apprun.write(4, path, "mpiio", env=env)
    assert rep["layout"]["fs"]["asked"] is not None
    check_applied(path, rep, 4)
    assert apprun.read(3, path, env=env)["readers"] == 3


@pytest.mark.timeout(600)
def test_hinted_stripe_count_and_unit(cephdir):
    """User hints (CKPTIO_HINTS) choose the layout: stripe count 3 and unit 256 KiB on 4 ranks."""
    path = cephdir / "hinted"
    rep = apprun.write(4, path, env={"CKPTIO_HINTS": "striping_factor=3;striping_unit=262144"})
    check_applied(path, rep, 3, 256 << 10)
    assert rep["layout"]["stripe_count"] == 3 and rep["layout"]["stripe_unit"] == 256 << 10
