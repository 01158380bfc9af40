"""What ckptio's files show to xarray's own engines and to h5py, and ``ckptio.tools.xarray_helpers`` (issue 27, item 9).

A 2-rank job writes, per backend, a checkpoint through a :class:`ckptio.Series` and one like older ckptio versions
wrote (the checkpoint attribute ``ckptio_series_seq``, through ``ckptio.create``). Then, in a plain ``python``
process (no mpirun):

* netCDF through ``engine="netcdf4"`` shows exactly the user's variables plus :data:`BOOKKEEPING` (so the list
  is complete) and ``ckptio_*`` globals; :func:`open_dataset` shows neither;
* HDF5 through ``netcdf4`` and ``h5netcdf`` shows only the user's variables (the ``/ckptio`` group is not a
  netCDF variable); h5py sees the group, whose two tables describe themselves each;
* the attributes seen through :func:`open_dataset` and ``engine="ckptio"`` are the same for every format, without
  ``ckptio_series_seq``; ``ckptio.open(...).attrs`` still has it (the files are read as before).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import BACKENDS, mpi_env, run_mpi

HERE = Path(__file__).resolve()
USER_VARS = ["dens", "plain", "x"]
ATTRS = {"step": 2, "run": "demo"}


def write_job(root: str) -> None:
    """Under mpirun (2 ranks): per backend, ``chk_000002`` by a Series and ``old_000001`` as older ckptio wrote."""
    from mpi4py import MPI

    import ckptio

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()

    def fill(ck: ckptio.Writer) -> None:
        ck.write("dens", np.full((1, 3), 1.0 + rank), offset=(rank, 0), global_shape=(2, 3), dims=("block", "x"),
                 attrs={"units": "g/cm**3"})
        if rank == 0:
            ck.write("x", np.arange(3.0), offset=(0,), global_shape=(3,), dims=("x",))
        ck.write("plain", np.arange(2, dtype=np.int32) + 2 * rank, offset=(2 * rank,), global_shape=(4,),
                 dims=("cell",))

    for backend in BACKENDS:
        series = ckptio.Series(f"{root}/{backend}", comm, backend=backend)
        with series.create(2, attrs=ATTRS) as ck:
            fill(ck)
        series.wait()
        with ckptio.create(f"{root}/{backend}/old_000001", comm, backend=backend,
                           attrs={**ATTRS, "ckptio_series_seq": 4}) as ck:
            fill(ck)


CHECK = r"""
import json, sys, warnings
import xarray as xr
import ckptio
from ckptio.tools import xarray_helpers
path, backend = sys.argv[1], sys.argv[2]
out = {}
def plain(attrs):
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in attrs.items()}
engines = {"mpiio": [], "hdf5": ["netcdf4", "h5netcdf"], "pnetcdf": ["netcdf4"]}[backend]
for engine in engines:
    kw = {"phony_dims": "sort"} if engine == "h5netcdf" else {}
    with xr.open_dataset(path, engine=engine, **kw) as ds:
        out["raw " + engine] = [sorted(map(str, ds.variables)), sorted(ds.attrs)]
    with xarray_helpers.open_dataset(path, engine=engine, **kw) as ds:
        out["helper " + engine] = [sorted(map(str, ds.variables)), plain(ds.attrs), sorted(map(str, ds.dims)),
                                   ds.dens.values.tolist()]
    with xarray_helpers.open_dataset(path, engine=engine, drop_variables="plain", **kw) as ds:
        out["helper drop " + engine] = sorted(map(str, ds.variables))
with xr.open_dataset(path, engine="ckptio") as ds:
    out["ckptio"] = [sorted(map(str, ds.variables)), plain(ds.attrs)]
with ckptio.open(path) as ck:
    out["reader attrs"] = plain(ck.attrs)
if backend == "hdf5":
    import h5py
    with h5py.File(path, "r") as f:
        out["h5py"] = sorted(f)
        group = f["ckptio"]
        out["h5py tables"] = {k: {a: str(v) for a, v in group[k].attrs.items() if a != "variables"}
                              for k in ("block_table", "block_checksums")}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("files")
    run_mpi(2, [str(HERE), str(out)], timeout=400)
    return out


def _check(path: Path, backend: str) -> dict:
    env = {k: v for k, v in mpi_env().items() if not k.startswith(("OMPI_COMM_WORLD", "PMI_", "PMIX_RANK"))}
    proc = subprocess.run([sys.executable, "-c", CHECK, str(path), backend], env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout)


@pytest.mark.mpi
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", ["chk_000002", "old_000001"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_xarray_sees_only_the_users_variables_and_attributes(root: Path, backend: str, name: str) -> None:
    pytest.importorskip("xarray")
    pytest.importorskip("netCDF4")
    pytest.importorskip("h5netcdf")
    from ckptio.tools.xarray_helpers import BOOKKEEPING

    got = _check(root / backend / name, backend)
    old = name.startswith("old")
    # ckptio's reader reads the files as before: an older file's counter is still among ck.attrs
    assert got["reader attrs"] == ({**ATTRS, "ckptio_series_seq": 4} if old else ATTRS)
    assert got["ckptio"] == [USER_VARS, ATTRS]
    if backend == "pnetcdf":
        raw_vars, raw_attrs = got["raw netcdf4"]
        assert raw_vars == sorted([*USER_VARS, *BOOKKEEPING])  # BOOKKEEPING is the complete list
        assert raw_attrs == sorted(["ckptio_format_version", "ckptio_version", "ckptio_note", *ATTRS])
    if backend == "hdf5":
        for engine in ("netcdf4", "h5netcdf"):
            raw_vars, raw_attrs = got[f"raw {engine}"]
            assert raw_vars == USER_VARS  # the /ckptio group is no netCDF variable
            assert raw_attrs == sorted([*ATTRS, *(["ckptio_series_seq"] if old else [])])
        assert got["h5py"] == ["block", "cell", "ckptio", "dens", "plain", "x"]  # the group, beside the data
        tables = got["h5py tables"]
        assert tables["block_checksums"]["description"] != tables["block_table"]["description"]
        assert "xxh3_64 of each block" in tables["block_checksums"]["description"]
        assert tables["block_checksums"]["algorithm"] == "xxh3_64"
    for engine in {"hdf5": ("netcdf4", "h5netcdf"), "pnetcdf": ("netcdf4",), "mpiio": ()}[backend]:
        variables, attrs, dims, values = got[f"helper {engine}"]
        assert variables == USER_VARS
        assert attrs == ATTRS  # the same in every format: no ckptio_* attribute
        assert dims == ["block", "cell", "x"]  # the ckptio_* dimensions went with their variables
        assert values == [[1.0] * 3, [2.0] * 3]
        assert got[f"helper drop {engine}"] == ["dens", "x"]


if __name__ == "__main__":
    write_job(sys.argv[1])
