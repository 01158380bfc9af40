"""A band of several blocks read in parts (a variable cut along a later axis, HDF5 or PnetCDF, larger than the read
buffer) has every block checked: each block's rows, part after part, continue its running checksum
(``PartChecker._stream``). Until this was found, such parts were not checked at all: a damaged byte in a 2-D
tiled variable larger than 64 MiB reached the caller. One process (``MPI.COMM_SELF``); the buffer is made small
so a 64 x 64 variable splits into parts of 8 rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ckptio.backends import detect_backend

import ckptio

BACKENDS = [b for b in ("hdf5", "pnetcdf") if b in ckptio.backends.available_backends()]
if not BACKENDS:
    pytest.skip("neither the hdf5 nor the pnetcdf backend is available", allow_module_level=True)

SHAPE = (64, 64)  # float64 rows of 512 bytes: a 4 KiB buffer reads 8 rows per part


def _tiles(path: Path, backend: str) -> np.ndarray:
    """Two tiles side by side (columns 0:32 and 32:64): one band of two blocks."""
    from mpi4py import MPI

    data = np.arange(SHAPE[0] * SHAPE[1], dtype=np.float64).reshape(SHAPE)
    with ckptio.create(path, MPI.COMM_SELF, backend=backend) as ck:
        ck.write("b", data[:, :32], offset=(0, 0), global_shape=SHAPE)
        ck.write("b", data[:, 32:], offset=(0, 32), global_shape=SHAPE)
    return data


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_split_band_restarts_whole(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "chk"
    data = _tiles(path, backend)
    for buffer in (4096, 4096 * 3, 1 << 20):
        with ckptio.open(path, buffer_bytes=buffer) as ck:
            np.testing.assert_array_equal(ck.read("b"), data)
            np.testing.assert_array_equal(ck.read("b", (5, 30), (40, 10)), data[5:45, 30:40])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("where", ["first part, left tile", "middle part, right tile", "last row, right tile"])
def test_a_damaged_byte_in_any_part_of_a_split_band_is_refused(tmp_path: Path, backend: str, where: str) -> None:
    path = tmp_path / "chk"
    _tiles(path, backend)
    start = detect_backend(str(path)).read_document(str(path)).variables["b"].file_offset
    row, col = {"first part, left tile": (1, 3), "middle part, right tile": (29, 40),
                "last row, right tile": (63, 63)}[where]
    stored = np.memmap(path, np.uint8, "r+")
    stored[start + (row * SHAPE[1] + col) * 8 + 2] ^= 0x10  # one bit of one element of the stored data
    stored.flush()
    del stored
    with ckptio.open(path, buffer_bytes=4096) as ck, pytest.raises(ckptio.CorruptCheckpointError,
                                                                   match="checksum mismatch"):
        ck.read("b")
