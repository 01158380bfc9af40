"""The commit's last check before the rename (``ckptio.engine.commit.check_written``): the document as the file
system has it must be the one written. Where a backend gives the stored bytes (``Backend.stored_document``: the
native format; HDF5, which still checks every dataset; PnetCDF's CDF-5) the check compares them with the bytes
written instead of decoding the document again; every other backend's document is decoded (``read_document``).
Either way a file whose tail was lost, or whose document differs, is refused with the lost-writes error. One
process, no mpirun (``MPI.COMM_SELF``)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from ckptio.backends import get_backend
from mpi_helpers import BACKENDS

import ckptio
from ckptio.engine.commit import check_written
from ckptio.errors import CheckpointIOError


def _written(path: str, backend: str) -> None:
    from ckptio.coord.mpi import MPI

    with ckptio.create(path, MPI.COMM_SELF, backend=backend) as ck:
        for i in range(20):
            ck.write(f"v{i:02d}", np.arange(32, dtype=np.float64) + i, offset=(0,), global_shape=(32,))


def _encoded(backend, path: str) -> bytes:
    from ckptio.model import meta as metamod

    return metamod.dumps(backend.read_document(path))


def _stored_exactly(path: str, backend_name: str):
    """Write a checkpoint with ``backend_name``; its stored_document must be the encoded document byte for byte and
    the commit's check must pass. -> (backend, encoded)."""
    _written(path, backend_name)
    backend = get_backend(backend_name)
    encoded = _encoded(backend, path)
    assert backend.stored_document(path) == encoded  # the bytes exactly: nothing decoded
    check_written(backend, path, encoded)
    return backend, encoded


def _refuses_another_document(backend, path: str, encoded: bytes) -> None:
    """A document of the same length that differs from the stored one is refused at the commit."""
    other = encoded.replace(b"v19", b"v91", 1)
    assert other != encoded and len(other) == len(encoded)
    with pytest.raises(CheckpointIOError, match=r"differ from the \d+ bytes written .*not committed"):
        check_written(backend, path, other)


def test_the_native_format_gives_its_stored_document_and_the_check_compares_it(tmp_path):
    path = str(tmp_path / "c.ckpt")
    backend, encoded = _stored_exactly(path, "mpiio")
    _refuses_another_document(backend, path, encoded)


def test_hdf5_gives_its_stored_document_and_still_checks_every_dataset(tmp_path):
    """HDF5's stored_document skips the typed decode but keeps read_document's check of the datasets (each variable
    a dataset of its shape at its recorded offset): a file whose document is intact but one of whose datasets is
    gone (an object header a full file system lost) is refused at the commit."""
    if "hdf5" not in BACKENDS:
        pytest.skip("the hdf5 backend is not available")
    import h5py

    path = str(tmp_path / "c.ckpt")
    backend, encoded = _stored_exactly(path, "hdf5")
    with h5py.File(path, "r+") as f:
        del f["v07"]  # the document still lists it
    with pytest.raises(CheckpointIOError, match=r"lost writes.*no dataset /v07 of shape \[32\]"):
        check_written(backend, path, encoded)


def test_pnetcdf_gives_its_stored_document_and_the_check_compares_it(tmp_path):
    """The CDF format's stored_document checks the framing (header, completion mark, the document's checksum) and
    returns the document's bytes undecoded; a document that differs from the one written, or whose mark is not
    set, is refused at the commit."""
    if "pnetcdf" not in BACKENDS:
        pytest.skip("the pnetcdf backend is not available")
    from ckptio.backends.cdf import read_header

    path = str(tmp_path / "c.ckpt")
    backend, encoded = _stored_exactly(path, "pnetcdf")
    _refuses_another_document(backend, path, encoded)
    mark = read_header(path).vars["ckptio_complete"].begin
    with open(path, "r+b") as f:  # the completion mark never landed
        f.seek(mark)
        f.write(b"\0\0\0\0")
    with pytest.raises(CheckpointIOError, match=r"lost writes.*no completion mark"):
        check_written(backend, path, encoded)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_a_file_that_lost_its_tail_is_refused_before_the_rename(backend_name, tmp_path):
    path = str(tmp_path / "c.ckpt")
    _written(path, backend_name)
    backend = get_backend(backend_name)
    encoded = _encoded(backend, path)
    check_written(backend, path, encoded)
    os.truncate(path, os.path.getsize(path) - 8)  # the completion mark's tail, or the document's, never landed
    with pytest.raises(CheckpointIOError, match="not a complete checkpoint, so the file system lost writes"):
        check_written(backend, path, encoded)


def test_a_backend_without_stored_document_is_checked_by_decoding(tmp_path):
    """A third-party backend need not have ``stored_document`` (it is not required by the registry): the check
    decodes its document instead, and still refuses a damaged file."""
    path = str(tmp_path / "c.ckpt")
    _written(path, "mpiio")
    native = get_backend("mpiio")
    encoded = _encoded(native, path)

    class DecodesOnly:
        def read_document(self, p):
            return native.read_document(p)

    check_written(DecodesOnly(), path, b"not compared: this backend decodes")
    with open(path, "r+b") as f:  # one byte of the index changed: its checksum no longer matches
        f.seek(os.path.getsize(path) - 100)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x20]))
    with pytest.raises(CheckpointIOError, match="lost writes"):
        check_written(DecodesOnly(), path, encoded)


def test_the_contract_suite_accepts_a_backend_that_opts_out_of_stored_document(tmp_path):
    """``stored_document = None`` on a backend class means "decode instead", at the commit and in the suite."""
    from ckptio.testing.contract import CASES, run_case
    from ckptio.testing.harness import Environment
    from ckptio.testing.memory import MemoryBackend, MemoryFiles

    class OptsOut(MemoryBackend):
        stored_document = None

    for name in ("write_protocol_commits_the_document_it_was_given", "a_truncated_file_is_refused"):
        assert run_case(Environment(OptsOut, None, str(tmp_path / name), 3, MemoryFiles()), name,
                        dict(CASES)[name]) is None


def test_the_data_check_merges_ranges_as_coalesce_does():
    """The landed-data check merges the extents' byte ranges with numpy (``space.touching_runs``, 10,000 small
    variables) before asking the file system for holes: the same runs as :func:`space.coalesce` with no limit,
    for random overlapping, touching, empty and unordered ranges."""
    import random

    from ckptio.engine.space import coalesce, touching_runs

    rng = random.Random(29)
    for _ in range(2000):
        ranges = [(a, a + rng.randint(0, 10)) for a in (rng.randint(0, 60) for _ in range(rng.randint(0, 12)))]
        starts = np.array([a for a, _ in ranges], np.int64)
        ends = np.array([b for _, b in ranges], np.int64)
        assert touching_runs(starts, ends) == coalesce(ranges, merge_gap=1, max_ranges=1 << 62), ranges
