"""Issue 23: a checkpoint rewritten by another tool (``h5repack``; a netCDF global attribute added, which grows
the header and moves every variable; ``nccopy``) was called "corrupt". Its metadata document is intact, every
variable is there with its shape, only elsewhere: now :class:`ckptio.RewrittenCheckpointError` "rewritten by
another tool" (``inspect``: status ``rewritten``, exit 1, since ckptio cannot read or verify it), and damage that
moves ONE variable (a flipped address bit) is still "corrupt". Serial (the metadata is read by rank 0 alone)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import require_backend
from mpi_helpers import mpi_env

import ckptio


def _write(path: Path, backend: str) -> None:
    from mpi4py import MPI

    with ckptio.create(path, MPI.COMM_SELF, backend=backend, attrs={"step": 3}) as ck:
        ck.write("dens", np.arange(600.0).reshape(20, 30), offset=(0, 0), global_shape=(20, 30))
        ck.write("ids", np.arange(50, dtype=np.int32), offset=(0,), global_shape=(50,))


def _inspect(path: Path) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "ckptio", "inspect", "--json", str(path)], capture_output=True,
                          text=True, timeout=120, env=mpi_env())
    return proc.returncode, json.loads(proc.stdout)


def _assert_rewritten(path: Path, tool: str) -> None:
    code, report = _inspect(path)
    assert code == 1 and report["status"] == "rewritten", report
    assert "rewritten by another tool" in report["error"] and tool in report["error"], report["error"]
    with pytest.raises(ckptio.RewrittenCheckpointError) as info:
        ckptio.open(path)
    assert not isinstance(info.value, ckptio.CorruptCheckpointError), type(info.value).__mro__
    assert "rewritten by another tool" in str(info.value) and "every" in str(info.value)


@pytest.mark.skipif(shutil.which("h5repack") is None, reason="h5repack is not installed")
def test_h5repack_is_rewritten_not_corrupt(tmp_path: Path) -> None:
    require_backend("hdf5")
    original, repacked = tmp_path / "chk.h5", tmp_path / "repacked.h5"
    _write(original, "hdf5")
    subprocess.run(["h5repack", str(original), str(repacked)], check=True, capture_output=True, timeout=120)
    _assert_rewritten(repacked, "h5repack")
    assert _inspect(original)[0] == 0  # the original is still a good checkpoint


@pytest.mark.parametrize("how", ["global attribute", "nccopy"])
def test_netcdf_rewritten_by_another_tool_is_rewritten_not_corrupt(tmp_path: Path, how: str) -> None:
    require_backend("pnetcdf")
    original, changed = tmp_path / "chk.nc", tmp_path / "changed.nc"
    _write(original, "pnetcdf")
    if how == "nccopy":
        if shutil.which("nccopy") is None:
            pytest.skip("nccopy is not installed")
        subprocess.run(["nccopy", "-k", "cdf5", str(original), str(changed)], check=True, capture_output=True,
                       timeout=120)
        tool = "nccopy"
    else:
        import netCDF4

        shutil.copy(original, changed)
        with netCDF4.Dataset(changed, "a") as ds:  # as `ncatted -a history,global,a,c,...` does
            ds.setncattr("history", "reprocessed " * 2000)
        tool = "ncatted"
    _assert_rewritten(changed, tool)
    assert _inspect(original)[0] == 0


def test_one_moved_dataset_is_still_corrupt(tmp_path: Path) -> None:
    """The rule needs EVERY variable moved: a document whose one variable's recorded offset is wrong (what a
    flipped address bit looks like) stays "corrupt"."""
    from ckptio.backends.hdf5_checks import rewritten_by_another_tool

    from ckptio.model.document import CheckpointDocument, StorageRecord, VariableRecord

    def var(offset: int) -> VariableRecord:
        return VariableRecord("<f8", (4,), "array", None, 1, storage=StorageRecord({"file_offset": offset}))

    meta = CheckpointDocument(2, "hdf5", 1, "xxh3_64", {}, {"a": var(1000), "b": var(2000)})
    assert rewritten_by_another_tool(meta, {"a": ([4], 1000), "b": ([4], 3000)}, 10_000) is None
    assert rewritten_by_another_tool(meta, {"a": ([4], 5000), "b": ([4], 3000)}, 10_000) is not None
    assert rewritten_by_another_tool(meta, {"a": ([4], 5000), "b": ([4], 9990)}, 10_000) is None  # outside
    assert rewritten_by_another_tool(meta, {"a": ([4], 5000), "b": ([5], 3000)}, 10_000) is None  # other shape
