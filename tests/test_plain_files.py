"""Restart reads of HDF5 and netCDF files ckptio did not write (issue 17, item 4): an existing code keeps its
file format and moves its restart reads to the aggregated two-phase read; such files are read unchecked
(``reader.checksummed`` is False) and what cannot be read as raw bytes is named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import PROGRAMS, mpi_env, run_mpi

import ckptio

DENS = np.arange(7 * 10, dtype=np.float64).reshape(7, 10)
IDS = np.arange(12, dtype=">i4").reshape(3, 4)  # big-endian in the file
PROGRAM = str(PROGRAMS / "plain_files.py")  # the MPI program of these tests


def _write_hdf5(path: Path) -> None:
    import h5py

    with h5py.File(path, "w") as f:
        f["dens"] = DENS
        f["dens"].attrs["units"] = "g/cm**3"
        f.create_dataset("ids", data=IDS)
        f.create_dataset("zipped", data=np.ones((4, 4)), compression="gzip", chunks=(2, 2))
        f.create_group("sub")["deep"] = np.ones(3)
        f.attrs["time"] = 1.5


def _write_netcdf(path: Path, fmt: str) -> None:
    import netCDF4

    with netCDF4.Dataset(path, "w", format=fmt) as ds:
        for name, n in (("y", 7), ("x", 10), ("t", None), ("r", 3), ("c", 4)):
            ds.createDimension(name, n)
        kw = {"contiguous": True} if fmt == "NETCDF4" else {}
        dens = ds.createVariable("dens", "f8", ("y", "x"), **kw)
        dens[:] = DENS
        dens.units = "g/cm**3"
        ds.createVariable("ids", "i4", ("r", "c"), **kw)[:] = IDS
        ds.createVariable("rec", "f4", ("t",))[:] = np.arange(3)
        ds.time = 1.5


@pytest.fixture(scope="module")
def plain_files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("plain")
    files = {"hdf5": d / "plain.h5"}
    _write_hdf5(files["hdf5"])
    for fmt in ("NETCDF3_CLASSIC", "NETCDF3_64BIT_OFFSET", "NETCDF3_64BIT_DATA", "NETCDF4"):
        files[fmt] = d / f"plain_{fmt}.nc"
        _write_netcdf(files[fmt], fmt)
    return files


SKIPPED = {"hdf5": {"zipped": "chunked or filtered", "sub": "a group"},
           "NETCDF4": {"rec": "chunked or filtered", "t": None}, "NETCDF3_CLASSIC": {"rec": "a record variable"},
           "NETCDF3_64BIT_OFFSET": {"rec": "a record variable"}, "NETCDF3_64BIT_DATA": {"rec": "a record variable"}}


@pytest.mark.parametrize("kind", sorted(SKIPPED))
def test_plain_file_reads_serially_unchecked(plain_files, kind: str) -> None:
    with ckptio.open(plain_files[kind]) as ck:
        assert ck.checksummed is False
        np.testing.assert_array_equal(ck.read("dens"), DENS)
        np.testing.assert_array_equal(ck["dens"][2:5, 3], DENS[2:5, 3])
        got = ck.read("ids")
        np.testing.assert_array_equal(got, IDS)
        assert got.dtype == np.dtype("=i4")  # native order, whatever the file's
        assert ck.variables["dens"].attrs["units"] == "g/cm**3" and ck.attrs["time"] == 1.5
        if kind.startswith("NETCDF3"):
            assert ck.variables["dens"].dims == ("y", "x")
        for name, why in SKIPPED[kind].items():
            if why is None:
                continue
            with pytest.raises(ckptio.ReadRequestError, match=f"'{name}' .*cannot be read by ckptio: it is {why}"):
                ck.read(name)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_plain_files_restart_through_the_aggregators(plain_files, tmp_path: Path, nprocs: int) -> None:
    proc = run_mpi(nprocs, [PROGRAM, "read", *(str(p) for p in plain_files.values())])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("OK") == nprocs


def test_plain_files_are_still_not_checkpoints_to_inspect_and_latest(plain_files, tmp_path: Path) -> None:
    """Only the restart reads them: ``inspect`` still says "not a ckptio checkpoint" (exit 2) and ``latest()``
    never takes one for a checkpoint."""
    proc = subprocess.run([sys.executable, "-m", "ckptio", "inspect", str(plain_files["hdf5"])],
                          capture_output=True, text=True, timeout=120, env=mpi_env())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    run = tmp_path / "run"
    run.mkdir()
    (run / "chk_000001").write_bytes(plain_files["hdf5"].read_bytes())
    assert ckptio.latest(str(run)) is None


def _write_hdf5_storage_kinds(path: Path) -> None:
    """Datasets whose bytes are not one contiguous run in the file: external, compact, virtual (and a packed one,
    as netCDF-4 or a CF-minded HDF5 code writes it)."""
    import h5py

    external = path.with_suffix(".raw")
    with h5py.File(path, "w") as f:
        f["dens"] = DENS
        f.create_dataset("ext", shape=(4,), dtype="f8", external=[(str(external), 0, 32)])[...] = np.arange(4.0)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple((4,))
        h5py.h5d.create(f.id, b"compact", h5py.h5t.NATIVE_DOUBLE, space, dcpl=dcpl)
        f["compact"][...] = np.arange(4.0)
        layout = h5py.VirtualLayout(shape=(7, 10), dtype="f8")
        layout[...] = h5py.VirtualSource(f["dens"])
        f.create_virtual_dataset("virtual", layout)
        f["packed"] = (DENS * 10).astype("i2")
        f["packed"].attrs["scale_factor"] = 0.1


@pytest.mark.parametrize("name, why", [("ext", "external storage: its data is in another file"),
                                       ("compact", "compact layout"), ("virtual", "a virtual dataset"),
                                       ("packed", "packed \\(scale_factor set\\)")])
def test_foreign_hdf5_storage_is_refused_for_its_real_reason(tmp_path: Path, name: str, why: str) -> None:
    """Issue 23: external, compact and virtual datasets were all refused as "chunked or filtered"."""
    path = tmp_path / "kinds.h5"
    _write_hdf5_storage_kinds(path)
    with ckptio.open(path) as ck:
        np.testing.assert_array_equal(ck.read("dens"), DENS)
        assert "chunked" not in ck.meta["plain_skipped"][name], ck.meta["plain_skipped"]
        with pytest.raises(ckptio.ReadRequestError, match=f"'{name}' .*cannot be read by ckptio: it is {why}"):
            ck.read(name)


@pytest.mark.parametrize("fmt", ["NETCDF3_CLASSIC", "NETCDF3_64BIT_DATA", "NETCDF4"])
@pytest.mark.parametrize("attrs", [{"scale_factor": 0.5}, {"add_offset": 100.0},
                                   {"scale_factor": 0.5, "add_offset": 100.0}])
def test_packed_netcdf_variables_are_refused_not_read_unscaled(tmp_path: Path, fmt: str, attrs: dict) -> None:
    """Issue 23: ``scale_factor``/``add_offset`` were ignored, so ckptio returned the stored integers as if they
    were the physical values. Decision: refuse (``plain_skipped``, ReadRequestError naming both the variable and
    the attribute); the unpacked variables of the same file still read."""
    import netCDF4

    path = tmp_path / f"packed_{fmt}.nc"
    with netCDF4.Dataset(path, "w", format=fmt) as ds:
        ds.createDimension("y", 7)
        ds.createDimension("x", 10)
        kw = {"contiguous": True} if fmt == "NETCDF4" else {}
        ds.createVariable("dens", "f8", ("y", "x"), **kw)[:] = DENS
        temp = ds.createVariable("temp", "i2", ("y", "x"), **kw)
        temp.setncatts(attrs)
        temp[:] = DENS * 2 + 100  # netCDF4 packs on write: stored = (value - add_offset) / scale_factor
    with ckptio.open(path) as ck:
        np.testing.assert_array_equal(ck.read("dens"), DENS)
        with pytest.raises(ckptio.ReadRequestError, match=f"'temp' .*packed \\(.*{next(iter(attrs))}"):
            ck.read("temp")
