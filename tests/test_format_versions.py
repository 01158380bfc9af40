"""Format version 2 (metadata schema 2: the block table as integer columns) and the files of version 1.

``tests/data/format1/`` holds checkpoints written by ckptio before format 2 (commit e075aa2, with
``make_fixtures.py`` under ``mpirun -n 2``): they must still be read, serially, under mpirun at other rank
counts, and verified by ``ckptio inspect``. New files say version 2 in every place a reader looks first.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xxhash
from mpi_helpers import PROGRAMS, mpi_env, run_mpi

import ckptio
from ckptio.errors import CorruptCheckpointError, FormatVersionError, IncompleteCheckpointError
from ckptio.model import meta as metamod
from ckptio.model.block_table import BlockTable
from ckptio.tools import scale

FIXTURES = Path(__file__).resolve().parent / "data" / "format1"
FORMAT1 = {"v1_mpiio.ckpt": True, "v1_mpiio_zstd.ckpt": True, "v1_hdf5.h5": False, "v1_pnetcdf.nc": True}
DENS = np.arange(30, dtype=np.float64).reshape(6, 5)  # written as two 3-row blocks by 2 ranks
TRACERS = np.array([0, 1, 10, 11, 12], np.int32)
PROGRAM = str(PROGRAMS / "format_versions.py")  # the MPI programs of these tests


@pytest.mark.parametrize("name", sorted(FORMAT1))
def test_format1_file_reads_serially(name: str) -> None:
    with ckptio.open(FIXTURES / name) as ck:
        assert ck.meta["schema"] == 1 and ck.meta["backend_format_version"] == 1
        np.testing.assert_array_equal(ck.read("dens"), DENS)
        np.testing.assert_array_equal(ck["dens"][2:5, 1], DENS[2:5, 1])
        assert float(ck.read("energy")) == 2.5
        assert ck.attrs["step"] == 7
        assert ck.variables["dens"].dims == ("y", "x") and ck.variables["dens"].attrs == {"units": "g/cm**3"}
        if FORMAT1[name]:
            np.testing.assert_array_equal(ck.read("tracers", (0,), (5,)), TRACERS)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_format1_files_restart_on_any_rank_count(tmp_path: Path, nprocs: int) -> None:
    proc = run_mpi(nprocs, [PROGRAM, "read_any_count", *(str(FIXTURES / n) for n in sorted(FORMAT1))])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("OK") == nprocs


@pytest.mark.parametrize("name", sorted(FORMAT1))
def test_format1_file_passes_inspect_verify(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    shutil.copy(FIXTURES / name, path)  # the fixture stays untouched whatever the command does
    proc = subprocess.run([sys.executable, "-m", "ckptio", "inspect", "--verify", str(path)], capture_output=True,
                          text=True, timeout=120, env=mpi_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verified" in proc.stdout, proc.stdout


@pytest.mark.mpi
def test_new_files_are_format_2_everywhere_a_reader_looks_first(tmp_path: Path) -> None:
    proc = run_mpi(2, [PROGRAM, "write_every_backend", str(tmp_path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    native = (tmp_path / "new_mpiio").read_bytes()
    assert struct.unpack_from("<I", native, 8)[0] == 2  # header
    assert struct.unpack_from("<I", native, len(native) - 64 + 8)[0] == 2  # trailer
    import h5py

    with h5py.File(tmp_path / "new_hdf5", "r") as f:
        assert int(f["ckptio"].attrs["format_version"]) == 2
        assert json.loads(f["ckptio/metadata"][()])["schema"] == 2
    from ckptio.backends.pnetcdf import read_header

    assert int(np.asarray(read_header(str(tmp_path / "new_pnetcdf")).attrs["ckptio_format_version"])[0]) == 2
    for backend in ("mpiio", "hdf5", "pnetcdf"):
        with ckptio.open(tmp_path / f"new_{backend}") as ck:
            assert ck.meta["schema"] == 2 and ck.meta["backend_format_version"] == 2
            np.testing.assert_array_equal(ck.read("dens"), np.repeat([0.0, 1.0], 6).reshape(4, 3))


def test_columnar_document_is_compact_and_equal_to_the_list_form() -> None:
    """The FLASH-like job at 2,000 ranks (48,000 blocks): the schema-2 document is a fraction of schema 1's and
    parses to the same blocks."""
    v1 = scale.flash_like_document(2000, 2000 * 24 * 3 * 32768, schema=1)
    v2 = scale.flash_like_document(2000, 2000 * 24 * 3 * 32768)
    assert len(v2) * 5 < len(v1), (len(v1), len(v2))
    m1, m2 = metamod.loads(v1), metamod.loads(v2)
    assert m1["variables"].keys() == m2["variables"].keys()
    for name, var in m2["variables"].items():
        assert isinstance(var["blocks"], BlockTable) and var["blocks"] == m1["variables"][name]["blocks"]
        assert var["blocks"][7] == m1["variables"][name]["blocks"][7]
    assert metamod.dumps(m2) == v2  # deterministic: a loaded document dumps to the same bytes


def _small_v2() -> bytes:
    doc = {"schema": 2, "backend": "mpiio", "nprocs": 2, "attrs": {}, "checksum": metamod.CHECKSUM_ALGORITHM,
           "variables": {"a": {"dtype": "<f8", "shape": [4, 3], "kind": "array", "blocks": [
               {"rank": 0, "offset": [0, 0], "shape": [2, 3], "checksum": "0123456789abcdef", "file_offset": 4096,
                "stored_nbytes": 48, "codec": None},
               {"rank": 1, "offset": [2, 0], "shape": [2, 3], "checksum": "fedcba9876543210", "file_offset": 8192,
                "stored_nbytes": 20, "codec": "zstd:3"}]}}}
    return metamod.dumps(doc)


def _damage(doc: dict, how: str) -> None:
    cols = doc["variable_blocks"]["columns"]
    if how == "count":
        cols["rank"]["count"] = 3
    elif how == "base64":
        cols["shape"]["data"] = "not base64!"
    elif how == "dtype":
        cols["checksum"]["dtype"] = "<f8"
    elif how == "codec":
        doc["variable_blocks"]["codecs"] = []
    elif how == "variables":
        doc["variable_blocks"]["variables"] = ["b"]
    elif how == "missing":
        del doc["variable_blocks"]
    elif how == "inline":
        doc["variables"]["a"]["blocks"] = []
    elif how == "overlap":  # well-formed columns, blocks that overlap: the tiling check names them
        import base64
        import zlib

        offsets = np.array([0, 0, 1, 0], "<i8")
        cols["offset"].update(dtype="<i8", data=base64.b64encode(zlib.compress(offsets.tobytes())).decode())


@pytest.mark.parametrize("how,words", [
    ("count", "column 'rank' holds 3 values"), ("base64", "column 'shape' cannot be decoded"),
    ("dtype", "column 'checksum' has an unknown encoding"), ("codec", "names a codec that is not listed"),
    ("variables", "does not list the document's variables"), ("missing", "'variable_blocks' is missing"),
    ("inline", "is not a schema-2 variable"), ("overlap", "blocks 0 and 1 overlap")])
def test_damaged_block_columns_are_named(how: str, words: str) -> None:
    doc = json.loads(_small_v2())
    _damage(doc, how)
    with pytest.raises(ValueError, match=words):
        metamod.loads(json.dumps(doc))


def test_damaged_columns_in_a_file_are_a_corrupt_checkpoint(tmp_path: Path) -> None:
    """A native file whose index checksum was recomputed over damaged columns (a broken tool): corrupt, named."""
    from ckptio.backends import mpiio

    path = tmp_path / "chk"
    shutil.copy(FIXTURES / "v1_mpiio.ckpt", path)
    raw = bytearray(path.read_bytes())
    t = len(raw) - mpiio.TRAILER_SIZE
    magic, _tver, flags, ioff, _ilen, _ihash, data_end, reserved = mpiio._TRAILER.unpack(raw[t:])
    doc = json.loads(bytes(raw[ioff:t]))
    meta = dataclasses.replace(metamod.loads(json.dumps(doc)), schema=2)  # as format 2 writes it, then damaged
    doc2 = json.loads(metamod.dumps(meta))
    doc2["variable_blocks"]["columns"]["file_offset"]["count"] = 1
    index = json.dumps(doc2, sort_keys=True, separators=(",", ":")).encode()
    raw = raw[:ioff] + index
    raw[8:12] = struct.pack("<I", 2)
    raw[16:24] = bytes(8)
    raw[16:24] = struct.pack("<Q", mpiio.header_checksum(bytes(raw[:mpiio.HEADER_SIZE])))
    raw += mpiio._TRAILER.pack(magic, 2, flags, ioff, len(index), xxhash.xxh3_64_intdigest(index), data_end, reserved)
    path.write_bytes(raw)
    with pytest.raises(CorruptCheckpointError, match="column 'file_offset' holds 1 values"):
        ckptio.open(path)


def test_a_newer_schema_is_refused_as_newer() -> None:
    doc = json.loads(_small_v2())
    doc["schema"] = 3
    with pytest.raises(FormatVersionError, match="schema version 3"):
        metamod.loads(json.dumps(doc))


def test_schema_1_documents_still_dump_as_schema_1() -> None:
    """Tests of old files write schema 1 on purpose: one JSON object per block, and they load to tables."""
    meta = metamod.loads(_small_v2())
    old = dataclasses.replace(meta, schema=1)
    text = json.loads(metamod.dumps(old))
    assert "variable_blocks" not in text and isinstance(text["variables"]["a"]["blocks"], list)
    again = metamod.loads(json.dumps(text))
    assert again["variables"]["a"]["blocks"] == meta["variables"]["a"]["blocks"]


def test_a_cdf_dimension_that_disagrees_with_the_document_is_damage(tmp_path: Path) -> None:
    """A flipped dimension length in the CDF header: ckptio reads the document's shape and would read the data
    right, but netCDF tools see another shape (or cannot open the file): inspect --verify called it verified."""
    from mpi4py import MPI

    path = tmp_path / "chk"
    with ckptio.create(path, MPI.COMM_SELF, backend="pnetcdf") as w:
        w.write("y", np.arange(6.0), offset=(0,), global_shape=(6,))
    raw = bytearray(path.read_bytes())
    at = raw.find(b"y_d0") + 4  # CDF-5: the dimension's name (padded to 4 bytes), then its length, 8 bytes
    assert raw[at:at + 8] == (6).to_bytes(8, "big")
    raw[at + 7] ^= 1
    path.write_bytes(raw)
    with pytest.raises(CorruptCheckpointError, match=r"dimensions \[7\] in the CDF header but shape \[6\]"):
        ckptio.open(path)


def test_a_cdf_header_is_read_only_up_to_the_size_taken_at_open(tmp_path: Path) -> None:
    """The header reader buffers 64 KiB at a time, but every field must lie within the size the file had when it
    was opened: a header longer than that (the file grew, or the size is what a truncated copy reported) is
    incomplete, even where the buffer already holds the bytes (an outside review found the buffer served them)."""
    import os

    from ckptio.backends.cdf import _Cursor

    path = tmp_path / "grown"
    path.write_bytes(b"CDF\x05" + bytes(551))
    fd = os.open(path, os.O_RDONLY)
    try:
        cursor = _Cursor(str(path), fd, 8)  # the size taken before the file grew
        assert cursor.take(4) == b"CDF\x05"
        with pytest.raises(IncompleteCheckpointError, match="ends inside its netCDF header"):
            cursor.take(8)
    finally:
        os.close(fd)


@pytest.mark.mpi
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_checkpoint_without_variables_commits_and_reads(tmp_path: Path) -> None:
    """Format 2 wrote no block table for a checkpoint without variables, and then refused its own document."""
    proc = run_mpi(2, [PROGRAM, "empty", str(tmp_path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("OK") == 2
