"""The document a restart opens an HDF5 checkpoint with (``HDF5Backend.restart_document``): where the reads check
every block against its checksum (the default), one dataset is checked, not each one. A restart reads every
variable's bytes at the offsets the document records and checks each block there; opening each of 10,000
datasets on rank 0 only diagnosed, at a fifth of the whole restart's time. What stays: a file another tool
rewrote (every dataset moved) is ``RewrittenCheckpointError`` at open (tests/faults/test_rewritten_by_tools.py), a
truncated one ``IncompleteCheckpointError`` (from HDF5 itself), a damaged FIRST dataset is diagnosed by the full
check; with ``verify=False``, and for ``inspect``/``verify`` and ``read_document``, every dataset is checked. One
process (``MPI.COMM_SELF``), no mpirun."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from ckptio.backends import hdf5 as hdf5_backend
from ckptio.backends import hdf5_checks

import ckptio
from ckptio.tools.cli import inspect_report

h5py = pytest.importorskip("h5py")
if "hdf5" not in ckptio.backends.available_backends():
    pytest.skip("the hdf5 backend is not available (h5py without MPI)", allow_module_level=True)

NVARS = 40


def _write(path: Path) -> None:
    from mpi4py import MPI

    with ckptio.create(path, MPI.COMM_SELF, backend="hdf5") as ck:
        for v in range(NVARS):
            ck.write(f"v{v:02d}", np.arange(32.0) + v, offset=(0,), global_shape=(32,))


def test_restart_opens_one_dataset_and_reads_every_variable(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "chk.h5"
    _write(path)
    looked_up: list[list[str]] = []
    real = hdf5_checks.found_datasets

    def recording(f, names):
        names = list(names)
        looked_up.append(names)
        return real(f, names)

    monkeypatch.setattr(hdf5_checks, "found_datasets", recording)
    backend = hdf5_backend.HDF5Backend()
    assert backend.restart_document(str(path), reads_checked=True) == backend.read_document(str(path))
    assert looked_up == [["v00"], [f"v{v:02d}" for v in range(NVARS)]]  # restart: one; read_document: each
    looked_up.clear()
    backend.restart_document(str(path), reads_checked=False)  # verify=False: nothing else checks the data
    assert looked_up == [[f"v{v:02d}" for v in range(NVARS)]]
    looked_up.clear()
    with ckptio.open(path) as ck:
        assert looked_up == [["v00"]]
        for v in range(NVARS):
            np.testing.assert_array_equal(ck.read(f"v{v:02d}"), np.arange(32.0) + v)


def test_a_deleted_dataset_restarts_its_verified_bytes_and_inspect_reports_it(tmp_path: Path) -> None:
    """Another program unlinked one dataset (not the probed one): the bytes ckptio committed are still where the
    document says and pass their checksums, so the restart returns them; ``inspect --verify`` names the damage."""
    path = tmp_path / "chk.h5"
    _write(path)
    with h5py.File(path, "r+", locking=False) as f:
        del f["v07"]
    with ckptio.open(path) as ck:
        np.testing.assert_array_equal(ck.read("v07"), np.arange(32.0) + 7)
    code, report = inspect_report(str(path), verify=True)
    assert code == 1 and "no dataset /v07" in report["error"], report
    with pytest.raises(ckptio.CorruptCheckpointError, match=r"no dataset /v07 of shape \[32\]"):
        ckptio.open(path, verify=False)  # no checksums at the reads: the datasets are checked at open, each


def test_a_damaged_first_dataset_is_refused_with_the_full_diagnosis(tmp_path: Path) -> None:
    path = tmp_path / "chk.h5"
    _write(path)
    with h5py.File(path, "r+", locking=False) as f:
        del f["v00"]
    with pytest.raises(ckptio.CorruptCheckpointError, match=r"no dataset /v00 of shape \[32\]"):
        ckptio.open(path)


def test_a_truncated_file_is_incomplete_at_open(tmp_path: Path) -> None:
    """Cut inside the LAST variable's data (the probe, the first, is whole): HDF5 itself refuses the file (its
    superblock records the end of its data), so the restart needs no check of its own (a regression guard)."""
    path = tmp_path / "chk.h5"
    _write(path)
    meta = hdf5_backend.HDF5Backend().read_document(str(path))
    last = meta.variables[f"v{NVARS - 1:02d}"]
    os.truncate(path, max(v.file_offset + v.nbytes for v in meta.variables.values()) - 8)
    assert last.file_offset + last.nbytes > os.path.getsize(path)
    with pytest.raises(ckptio.IncompleteCheckpointError):
        ckptio.open(path)
