"""The native format's checks of a block table read from a file (``backends.mpiio.check_block_table``): the
checks over all variables at once prove a sound table, and a block outside the data region, or one storing other
than its bytes, is still named with its variable. One process, no mpirun."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from ckptio.backends.mpiio import HEADER_SIZE, NativeBackend, _all_blocks_in_data_region, check_block_table

import ckptio
from ckptio.errors import CorruptCheckpointError
from ckptio.model.block_table import BlockTable


def _write(path: str, compression: str | None):
    from ckptio.coord.mpi import MPI

    with ckptio.create(path, MPI.COMM_SELF, backend="mpiio", compression=compression) as ck:
        for i in range(50):
            ck.write(f"v{i:03d}", np.arange(16, dtype=np.float64) + i, offset=(0,), global_shape=(16,))
        ck.write("scalar", np.float32(2.5), offset=(), global_shape=())
        ck.write("grid", np.ones((4, 6), np.int32), offset=(0, 0), global_shape=(4, 6))
        ck.write("empty", np.zeros((0, 3)), offset=(0, 0), global_shape=(0, 3))  # a block of no bytes
    return NativeBackend().read_document(path)


@pytest.fixture
def written(tmp_path):
    path = str(tmp_path / "small.ckpt")
    return path, _write(path, None)


def _data_end(doc) -> int:
    j = doc.joined_blocks()
    return int((j.file_offset + j.stored_nbytes).max())


def _with_block(doc, name: str, **columns):
    """The document with one column of ``name``'s block table replaced."""
    t = doc.variables[name].block_table()
    cols = {k: getattr(t, k) for k in ("rank", "offset", "shape", "checksum", "file_offset", "stored_nbytes",
                                        "codec")}
    cols.update(columns)
    var = dataclasses.replace(doc.variables[name], blocks=BlockTable(**cols, codecs=t.codecs))
    return dataclasses.replace(doc, variables={**doc.variables, name: var})


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_sound_table_is_proven_by_the_joined_check(tmp_path, compression):
    """The check over all variables at once proves a sound table itself (the per-variable walk is only for naming
    a problem): compressed blocks (stored bytes other than their raw size), a block of no bytes, a scalar."""
    path = str(tmp_path / "small.ckpt")
    doc = _write(path, compression)
    codecs = {c for v in doc.variables.values() for c in v.block_table().codecs}
    assert bool(codecs) == (compression is not None)
    assert _all_blocks_in_data_region(doc, HEADER_SIZE, _data_end(doc))
    check_block_table(path, doc, HEADER_SIZE, _data_end(doc))


def test_a_block_beyond_the_data_region_is_named(written):
    path, doc = written
    j = doc.joined_blocks()
    ends = np.where(j.stored_nbytes > 0, j.file_offset + j.stored_nbytes, -1)  # (a block of no bytes has no place)
    last = list(doc.variables)[int(j.var[np.argmax(ends)])]
    with pytest.raises(CorruptCheckpointError, match=rf"variable '{last}': block 0 lies outside the data region"):
        check_block_table(path, doc, HEADER_SIZE, _data_end(doc) - 1)


def test_a_block_storing_other_than_its_bytes_is_named(written):
    path, doc = written
    t = doc.variables["grid"].block_table()
    bad = _with_block(doc, "grid", stored_nbytes=t.stored_nbytes - 4)
    with pytest.raises(CorruptCheckpointError, match=r"variable 'grid': block 0 stores 92 bytes for 96 bytes"):
        check_block_table(path, bad, HEADER_SIZE, _data_end(doc))


def test_a_scalar_block_is_checked_like_any_other(written):
    path, doc = written
    t = doc.variables["scalar"].block_table()
    bad = _with_block(doc, "scalar", file_offset=np.array([HEADER_SIZE - 8], np.int64))
    assert int(t.stored_nbytes[0]) == 4
    with pytest.raises(CorruptCheckpointError, match=r"variable 'scalar': block 0 lies outside the data region"):
        check_block_table(path, bad, HEADER_SIZE, _data_end(doc))
