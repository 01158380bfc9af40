"""A file system without ``fallocate`` that drops writes: the commit must never accept data that did not land.

Where space cannot be reserved (simulated with ``CKPTIO_FAULT_NO_FALLOCATE=1``, see ``ckptio/engine/space.py``), a
full file system during the data write loses data without an error: Open MPI's OMPIO reports the short writes
as complete. If space comes back before the index is written (another job deletes files), the metadata reads
back fine; before the fix, the native and PnetCDF backends committed such a file with holes (``inspect`` exit 0,
``latest()`` chose it). The engine's commit (one for every backend) now starts by checking that the data landed
(``ckptio.engine.space.missing_data``): rank 0 looks for holes in the data extents (``SEEK_HOLE``) and reads back
the blocks that cross one.

* ``test_commit_refuses_lost_data`` (1 and 2 ranks, every backend): a 2 MiB tmpfs, 1.2 MB taken by a filler that
  rank 0 deletes once the data is written, before the commit, a 3 MB checkpoint: every rank gets a
  CheckpointIOError naming the checkpoint and saying the space ran out; nothing is left at the final name.
* ``test_holes_of_zeros_are_data``: a block of zeros stored as a hole (as ZFS with compression does) is not
  lost data; a hole in non-zero data is, and the message names the block.
"""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path

import numpy as np
import pytest
from ckptio.backends import detect_backend
from conftest import needs_root, require_backend, tmpfs
from mpi4py import MPI
from mpi_helpers import BACKENDS, PROGRAMS, run_mpi

import ckptio
from ckptio.engine.space import NO_FALLOCATE_ENV, holes, missing_data

PROGRAM = str(PROGRAMS / "lost_writes.py")  # the MPI program of test_commit_refuses_lost_data


@needs_root
@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", (1, 2))
@pytest.mark.parametrize("backend", BACKENDS)
def test_commit_refuses_lost_data(backend, nprocs, tmp_path):
    require_backend(backend)
    with tmpfs(tmp_path / "fs", "2m") as fs:
        (fs / "filler").write_bytes(bytes(1_200_000))
        out = tmp_path / "outcomes"
        out.mkdir()
        proc = run_mpi(nprocs, [PROGRAM, "commit", str(fs), backend, str(out)], timeout=120,
                       env={NO_FALLOCATE_ENV: "1"})
        lines = {p.name[4:]: p.read_text() for p in out.iterdir()}
        assert sorted(map(int, lines)) == list(range(nprocs)), proc.stdout + proc.stderr
        for rank, line in lines.items():
            assert line.startswith("ERR ") and "CheckpointIOError" in line.split("|")[0], f"rank {rank}: {line}"
            assert str(fs / "chk_000020") in line and re.search(r"space|lost", line), f"rank {rank}: {line}"
        assert not (fs / "chk_000020").exists(), "a checkpoint with lost data was committed"
        assert ckptio.latest(fs) is None
        # (HDF5 itself sees the failed write, before the commit: the filler is then still there)
        assert sorted(p.name for p in fs.iterdir()) in ([], ["filler"]), "the temporary file was left behind"


_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 1, 2


def _punch(path: Path, offset: int, length: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_WRONLY)
    try:
        if libc.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, ctypes.c_int64(offset),
                          ctypes.c_int64(length)) != 0:
            pytest.skip(f"cannot punch holes here: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def test_holes_of_zeros_are_data(tmp_path):
    path = tmp_path / "chk_000001"
    with ckptio.create(str(path), MPI.COMM_SELF, backend="mpiio") as ck:
        ck.write("zeros", np.zeros(1 << 16), offset=(0,), global_shape=(1 << 16,))
        ck.write("ones", np.ones(1 << 16), offset=(0,), global_shape=(1 << 16,))
    backend = detect_backend(str(path))
    meta = backend.read_document(str(path))
    where = {e.var: e for e in backend.extents(meta)}
    assert missing_data(str(path), backend, meta) is None
    z, o = where["zeros"], where["ones"]
    _punch(path, z.file_offset + 4096 - z.file_offset % 4096, 8 * 4096)
    assert holes(str(path), [(z.file_offset, z.file_offset + z.nbytes)]), "the punched hole is not seen"
    assert missing_data(str(path), backend, meta) is None, "zeros stored as a hole are data"
    _punch(path, o.file_offset + 4096 - o.file_offset % 4096, 8 * 4096)
    why = missing_data(str(path), backend, meta)
    assert why is not None and "'ones'" in why and "checksum mismatch" in why, why
