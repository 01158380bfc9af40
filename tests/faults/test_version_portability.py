"""Format versions and byte order, for every backend.

* A checkpoint whose ckptio format version is newer than this ckptio (the native header's version field, the
  HDF5 ``/ckptio`` attribute ``format_version``, the CDF global attribute ``ckptio_format_version``, each set
  to ``FORMAT_VERSION + 1`` in a copy of a good checkpoint) is refused: ``ckptio inspect`` exits 1, and a
  4-rank ``open`` raises ``FormatVersionError`` on every rank; both messages name both versions.
* Byte order: big-endian ``>f8``/``>i4`` and little-endian ``<f8`` arrays written on this (little-endian)
  machine keep their declared byte order in the file's metadata, the checkpoint records the writer's byte
  order, and a restart on another decomposition returns the right values in native byte order.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import NPROCS, assert_every_rank_failed, require_backend, run_job
from mpi_helpers import REPO

BACKENDS = ("mpiio", "hdf5", "pnetcdf")


def _bump_native(path: Path) -> int:
    from ckptio.backends import mpiio
    from ckptio.backends.mpiio import FORMAT_VERSION

    raw = bytearray(path.read_bytes())
    assert struct.unpack_from("<I", raw, 8)[0] == FORMAT_VERSION  # the header: magic (8 bytes), version
    struct.pack_into("<I", raw, 8, FORMAT_VERSION + 1)
    struct.pack_into("<Q", raw, 16, mpiio.header_checksum(bytes(raw[:mpiio.HEADER_SIZE])))  # a newer file, intact
    path.write_bytes(bytes(raw))
    return FORMAT_VERSION


def _bump_hdf5(path: Path) -> int:
    import h5py
    import numpy as np
    from ckptio.backends.hdf5 import FORMAT_VERSION

    with h5py.File(path, "r+", locking=False) as f:
        assert int(f["ckptio"].attrs["format_version"]) == FORMAT_VERSION
        f["ckptio"].attrs["format_version"] = np.int64(FORMAT_VERSION + 1)
    return FORMAT_VERSION


def _bump_cdf(path: Path) -> int:
    """Patch the value of the int32 global attribute in the CDF-5 header in place (same size, so nothing
    moves): name (padded to 4 bytes), nc_type (4 bytes), nelems (8 bytes in CDF-5), then the big-endian value."""
    import netCDF4
    from ckptio.backends.pnetcdf import FORMAT_VERSION

    raw = bytearray(path.read_bytes())
    name = b"ckptio_format_version"
    at = raw.index(name) + (len(name) + 3) // 4 * 4
    nc_type, nelems = struct.unpack_from(">iq", raw, at)
    assert (nc_type, nelems) == (4, 1)  # NC_INT, one value
    assert struct.unpack_from(">i", raw, at + 12)[0] == FORMAT_VERSION
    struct.pack_into(">i", raw, at + 12, FORMAT_VERSION + 1)
    path.write_bytes(bytes(raw))
    with netCDF4.Dataset(path) as ds:  # the patch is what a netCDF reader sees
        assert int(ds.getncattr("ckptio_format_version")) == FORMAT_VERSION + 1
    return FORMAT_VERSION


BUMP = {"mpiio": _bump_native, "hdf5": _bump_hdf5, "pnetcdf": _bump_cdf}


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
def test_newer_format_version_is_refused_naming_both_versions(corpus: Path, tmp_path: Path, backend: str) -> None:
    require_backend(backend)
    path = tmp_path / "chk_000010"
    shutil.copyfile(corpus / backend / "chk_000010", path)
    ours = BUMP[backend](path)
    theirs = ours + 1

    def names_both(msg: str) -> bool:
        return f"version {theirs}" in msg and f"version {ours}" in msg

    cli = subprocess.run([sys.executable, "-m", "ckptio.tools.cli", "inspect", "--verify", str(path)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert names_both(cli.stdout + cli.stderr), cli.stdout + cli.stderr

    result = run_job(["readall", str(path)], tmp_path, timeout=120)
    assert result.returncode == 0, result.describe()
    for rank, o in assert_every_rank_failed(result, str(path)).items():
        assert "FormatVersionError" in o["bases"], f"rank {rank}: {o['cls']}: {o['msg']}"
        assert names_both(o["msg"]), f"rank {rank}: {o['msg']}"


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
def test_byte_order_is_recorded_and_converted_on_read(tmp_path: Path, backend: str) -> None:
    require_backend(backend)
    result = run_job(["bigendian", str(tmp_path), backend], tmp_path, timeout=120)
    assert result.returncode == 0, result.describe()
    cases = result.by_case()
    for case in ("write", "read"):
        assert sorted(cases[case]) == list(range(NPROCS)), result.describe()
        assert all(o["ok"] for o in cases[case].values()), result.describe()
    native = "<" if sys.byteorder == "little" else ">"
    for o in cases["read"].values():
        assert o["value"] == {"bef8": {"declared": ">f8", "read": f"{native}f8"},
                              "bei4": {"declared": ">i4", "read": f"{native}i4"},
                              "lef8": {"declared": "<f8", "read": f"{native}f8"}}, o
    cli = subprocess.run([sys.executable, "-m", "ckptio.tools.cli", "inspect", "--json",
                          str(tmp_path / f"be_{backend}")],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    report = json.loads(cli.stdout)
    assert report["byteorder"] == sys.byteorder
