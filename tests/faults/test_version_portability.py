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


def _newer_document(text: bytes, version: int) -> bytes:
    """The metadata document of a newer ckptio: ``backend_format_version`` one more (the same length)."""
    was = f'"backend_format_version":{version}'.encode()
    assert text.count(was) == 1 and version < 9
    return text.replace(was, f'"backend_format_version":{version + 1}'.encode())


def _bump_hdf5(path: Path, document: bool = True) -> int:
    """A newer ckptio's file: the mark and (``document``) the checksummed document's version; without the
    document, a damaged mark."""
    import h5py
    import numpy as np
    from ckptio.backends.hdf5 import FORMAT_VERSION

    from ckptio.model import meta

    with h5py.File(path, "r+", locking=False) as f:
        assert int(f["ckptio"].attrs["format_version"]) == FORMAT_VERSION
        f["ckptio"].attrs["format_version"] = np.int64(FORMAT_VERSION + 1)
        if document:
            text = _newer_document(bytes(f["ckptio/metadata"][()]), FORMAT_VERSION)
            f["ckptio/metadata"][()] = np.bytes_(text)
            f["ckptio"].attrs["metadata_checksum"] = np.bytes_(meta.checksum(text))
    return FORMAT_VERSION


def _bump_cdf(path: Path, document: bool = True) -> int:
    """Patch the value of the int32 global attribute in the CDF-5 header in place (same size, so nothing
    moves): name (padded to 4 bytes), nc_type (4 bytes), nelems (8 bytes in CDF-5), then the big-endian value;
    and (``document``) the checksummed document's version, with its checksum."""
    import netCDF4
    from ckptio.backends.cdf import read_header
    from ckptio.backends.pnetcdf import FORMAT_VERSION
    from ckptio.backends.pnetcdf_write import META_SUM_VAR, META_VAR

    from ckptio.model import meta

    raw = bytearray(path.read_bytes())
    if document:
        header = read_header(str(path))
        doc, digest = header.vars[META_VAR], header.vars[META_SUM_VAR]
        text = _newer_document(bytes(raw[doc.begin:doc.begin + header.numrecs]), FORMAT_VERSION)
        raw[doc.begin:doc.begin + header.numrecs] = text
        raw[digest.begin:digest.begin + 16] = meta.checksum(text).encode()
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


@pytest.mark.parametrize("backend", ["hdf5", "pnetcdf"])
def test_a_newer_mark_beside_a_document_of_this_version_is_damage_not_a_newer_format(corpus: Path, tmp_path: Path,
                                                                                     backend: str) -> None:
    """The HDF5/CDF version mark lies outside the document's checksum: a mark alone saying a newer version (a
    flipped byte: an outside trial saw 65282 and 2**63-1) is damage, `inspect` exit 1 naming both, never "newer
    than this ckptio supports" (which would tell the user to upgrade for a damaged file)."""
    import ckptio

    require_backend(backend)
    path = tmp_path / "chk_000010"
    shutil.copyfile(corpus / backend / "chk_000010", path)
    ours = BUMP[backend](path, document=False)
    with pytest.raises(ckptio.CorruptCheckpointError, match=rf"layout version mark says {ours + 1}, but the "
                                                             rf"checkpoint's checksummed metadata says version {ours}"):
        ckptio.open(path)
    cli = subprocess.run([sys.executable, "-m", "ckptio.tools.cli", "inspect", str(path)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 1 and "CORRUPT" in cli.stdout and "newer than" not in cli.stdout, cli.stdout


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
