"""A file at the checkpoint's name that ckptio did not create is never replaced (outside trial, 2026-12-06: a text
file and a symbolic link at the name were silently replaced by the commit's rename).

``ckptio.create`` refuses, on every rank, before any file is touched: a text file, a plain HDF5 file other software
wrote, an empty file, a symbolic link (to a checkpoint or anything else) and a FIFO; each stays as it was and no
temporary file is left. A checkpoint of ckptio's at the name, complete or damaged, is replaced as before (a Series
rerun writes the same step again).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import run_mpi

import ckptio
from ckptio.coord.mpi import MPI

REFUSED = "ckptio never replaces a file it did not create"


def write(path, value: float = 1.0) -> None:
    with ckptio.create(str(path), MPI.COMM_SELF) as ck:
        ck.write("u", np.full(4, value), offset=(0,), global_shape=(4,))


def refused(path) -> str:
    with pytest.raises(ckptio.CheckpointError) as info:
        write(path)
    assert REFUSED in str(info.value) and str(path) in str(info.value), str(info.value)
    assert not [n for n in os.listdir(path.parent) if "ckptio-tmp" in n], os.listdir(path.parent)
    return str(info.value)


def test_a_text_file_an_empty_file_and_a_plain_hdf5_file_are_not_replaced(tmp_path) -> None:
    text = tmp_path / "chk_000001"
    text.write_text("precious\n")
    assert "not a ckptio checkpoint" in refused(text)
    assert text.read_text() == "precious\n"
    empty = tmp_path / "chk_000002"
    empty.touch()
    refused(empty)
    assert empty.stat().st_size == 0
    h5py = pytest.importorskip("h5py")
    plain = tmp_path / "chk_000003"
    with h5py.File(plain, "w") as f:
        f["x"] = np.arange(3.0)
    refused(plain)
    with h5py.File(plain, "r") as f:
        assert list(f["x"][...]) == [0.0, 1.0, 2.0]


def test_a_symbolic_link_and_a_fifo_are_not_replaced(tmp_path) -> None:
    target = tmp_path / "real"
    write(target, 7.0)
    link = tmp_path / "chk_000001"
    link.symlink_to(target)
    assert "symbolic link" in refused(link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    fifo = tmp_path / "chk_000002"
    os.mkfifo(fifo)
    assert "not a regular file" in refused(fifo)
    with ckptio.open(str(target), MPI.COMM_SELF) as ck:
        assert list(ck.read("u")) == [7.0] * 4


def test_a_checkpoint_complete_or_damaged_is_replaced_as_before(tmp_path) -> None:
    path = tmp_path / "chk_000001"
    write(path, 1.0)
    write(path, 2.0)
    with ckptio.open(str(path), MPI.COMM_SELF) as ck:
        assert list(ck.read("u")) == [2.0] * 4
    data = bytearray(path.read_bytes())
    data[:8] = bytes(8)  # the header zeroed: a damaged checkpoint, still recognised as ckptio's
    path.write_bytes(bytes(data))
    with pytest.raises(ckptio.CorruptCheckpointError):
        ckptio.open(str(path), MPI.COMM_SELF)
    write(path, 3.0)
    with ckptio.open(str(path), MPI.COMM_SELF) as ck:
        assert list(ck.read("u")) == [3.0] * 4


PROGRAM = str(Path(__file__).resolve().parent.parent / "programs" / "existing_file.py")


@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_every_rank_gets_the_refusal(tmp_path) -> None:
    path = tmp_path / "chk_000001"
    path.write_text("precious\n")
    out = run_mpi(3, [PROGRAM, str(path)], timeout=120).stdout
    raised = [line for line in out.splitlines() if line.startswith("RAISED ")]
    assert len(raised) == 3 and all(REFUSED in line for line in raised), out
    assert path.read_text() == "precious\n"
    assert sorted(os.listdir(tmp_path)) == ["chk_000001"]
