"""The HDF5 and PnetCDF backends, checked with the real external tools and readers.

Checkpoints are written through the public API under ``mpirun`` (2 and 4 ranks, plus 1 and 8 oversubscribed
for the restart round trips), into pytest's tmp directories. Then:

* HDF5: ``h5ls -r`` and ``h5dump -H`` show every variable as a dataset of its global shape and the
  ``/ckptio`` group; plain h5py (no MPI driver) reads the exact global arrays, the block tables, the
  attributes and the completion mark; datasets are contiguous with fill time "never";
* PnetCDF: ``ncmpidump -h`` / ``ncdump -h`` list the variables and say CDF-5; netCDF4-python reads the exact
  global arrays, the metadata document and the completion mark;
* both: ``ckptio.open(...).read(...)`` at another rank count with another decomposition (segments too);
  ``ckptio inspect --verify`` exits 0, then 1 naming the variable after one flipped byte in a dataset's data,
  1 ("corrupt") after one flipped byte in the metadata document, and 1 ("incomplete") when the completion
  mark is missing or the file is truncated.

This file is also the program the MPI jobs run (``python test_backend_formats.py write|read|...``), so the
expected arrays are defined once. The pytest process itself never initializes MPI: every check that imports
h5py, netCDF4 or ckptio's backends runs in a subprocess.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import mpi_env, run_mpi

from ckptio.model import meta as metamod

HERE = Path(__file__).resolve()
BACKENDS = ("hdf5", "pnetcdf")
ATTRS = {"step": 100, "time": 1.25, "name": "sedov", "flags": [1, 2, 3], "ok": True}

# ----------------------------------------------------------------------------------- the checkpoint's data
SHAPES = {"dens": (13, 4, 5), "tile": (9, 11), "ids": (6, 10)}
DTYPES = {"dens": "<f8", "tile": "<f4", "ids": "<u2"}
ENERGY = 2.5  # a 0-d variable


def expected(name: str) -> np.ndarray:
    """The global array of an N-d variable (the same whatever the number of writers)."""
    shape = SHAPES[name]
    base = np.arange(math.prod(shape), dtype=np.int64)
    values = {"dens": base * 0.5 - 7, "tile": base % 97 - 40, "ids": base * 3 + 1}[name]
    return values.astype(DTYPES[name]).reshape(shape)


def segment(rank: int) -> np.ndarray:
    """Writer ``rank``'s 1-D per-rank segment of "particles" (some are empty)."""
    return np.arange((rank * 3) % 5, dtype=np.float64) + 100.0 * rank


def tracers(rank: int) -> np.ndarray:
    """Writer ``rank``'s N-d per-rank segment of "tracers": (n, 4) rows (some ranks have none)."""
    n = (rank * 2 + 1) % 4
    return (np.arange(n * 4, dtype=np.float32).reshape(n, 4) + 10 * rank).astype("<f4")


def cuts(n: int, parts: int, shift: int = 0) -> list[int]:
    """Bounds of ``parts`` uneven pieces of ``n`` (``shift`` changes where the cuts fall)."""
    weights = [(i + shift) % 3 + 1 for i in range(parts)]
    acc = np.concatenate(([0], np.cumsum(weights)))
    return [int(a) * n // int(acc[-1]) for a in acc]


def writer_blocks(name: str, rank: int, size: int) -> list[tuple[tuple[int, ...], np.ndarray]]:
    """This writer's blocks of an N-d variable as (offset, C-contiguous array).

    dens: the leading axis in 2*size uneven pieces, rank r owning pieces r and 2*size-1-r, except that the
    last rank (when size > 1) hands its pieces to rank 0: several blocks on one rank, none on another.
    tile: a 3x3 tiling, tile t on rank t % size (tiles side by side on one rank). ids: split along axis 1.
    """
    g = expected(name)
    out: list[tuple[tuple[int, ...], np.ndarray]] = []
    if name == "dens":
        b = cuts(g.shape[0], 2 * size)
        owners = {p: min(p, 2 * size - 1 - p) for p in range(2 * size)}
        if size > 1:
            owners = {p: 0 if o == size - 1 else o for p, o in owners.items()}
        out = [((b[p], 0, 0), g[b[p]:b[p + 1]]) for p in range(2 * size) if owners[p] == rank]
    elif name == "tile":
        rows, cols = cuts(9, 3), cuts(11, 3, shift=1)
        for t in range(9):
            if t % size == rank:
                r, c = t // 3, t % 3
                out.append(((rows[r], cols[c]), g[rows[r]:rows[r + 1], cols[c]:cols[c + 1]]))
    elif name == "ids":
        c0, c1 = rank * g.shape[1] // size, (rank + 1) * g.shape[1] // size
        out = [((0, c0), g[:, c0:c1])]
    return [(off, np.ascontiguousarray(a)) for off, a in out]


# --------------------------------------------------------------------------- programs run as subprocesses
def write_job(backend: str, path: str) -> None:
    """Under mpirun: write the test checkpoint through the public API."""
    from mpi4py import MPI

    import ckptio

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    with ckptio.create(path, comm, backend=backend, attrs=ATTRS) as ck:
        for name in SHAPES:
            for offset, block in writer_blocks(name, rank, size):
                ck.write(name, block, offset=offset, global_shape=SHAPES[name])
        ck.write("particles", segment(rank))
        ck.write("tracers", tracers(rank), dims=("tracer", "field"), attrs={"units": "cm"})
        if rank == size - 1:
            ck.write("energy", np.array(ENERGY), offset=(), global_shape=())
        ck.write("empty", np.zeros((0, 3)), offset=(0, 0), global_shape=(0, 3))


def read_job(path: str, writers: int) -> None:
    """Under mpirun, any rank count: read with another decomposition (leading axis, uneven) and compare."""
    from mpi4py import MPI

    import ckptio

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    got: dict[str, np.ndarray] = {}
    want: dict[str, np.ndarray] = {}
    with ckptio.open(path, comm) as ck:
        attrs = ck.attrs
        for name, shape in SHAPES.items():
            b = cuts(shape[0], size, shift=1)
            got[name] = ck.read(name, offset=(b[rank], *[0] * (len(shape) - 1)), shape=(b[rank + 1] - b[rank],
                                                                                       *shape[1:]))
            want[name] = expected(name)[b[rank]:b[rank + 1]]
        got["tile_columns"] = ck.read("tile", offset=(0, 2), shape=(9, 7))  # spans several writer tiles
        want["tile_columns"] = expected("tile")[:, 2:9]
        got["particles"] = ck.read("particles")  # writers [rank*W//P, (rank+1)*W//P), concatenated
        first, last = rank * writers // size, (rank + 1) * writers // size
        want["particles"] = np.concatenate([segment(w) for w in range(first, last)] or [np.zeros(0)])
        got["tracers"] = ck.read("tracers")  # N-d segments: the same writers' rows
        want["tracers"] = np.concatenate([tracers(w) for w in range(first, last)] or [np.zeros((0, 4), "<f4")])
        every = np.concatenate([tracers(w) for w in range(writers)])
        assert ck.variables["tracers"].shape == every.shape and ck.variables["tracers"].dims == ("tracer", "field")
        got["tracer_cols"] = ck.read("tracers", offset=(0, 1), shape=(len(every), 2))  # across writers' rows
        want["tracer_cols"] = every[:, 1:3]
        got["energy"], want["energy"] = ck.read("energy"), np.array(ENERGY)
        got["empty"], want["empty"] = ck.read("empty"), np.zeros((0, 3))
    problems = [f"attrs {attrs} != {ATTRS}"] if attrs != ATTRS else []
    for key in want:
        if got[key].dtype != want[key].dtype or not np.array_equal(got[key], want[key]):
            problems.append(f"rank {rank}: {key}: got {got[key]!r}, want {want[key]!r}")
    problems = [p for ps in comm.allgather(problems) for p in ps]
    if rank == 0:
        print("\n".join(problems) if problems else f"READ OK on {size} ranks")
    if problems:
        sys.exit(1)


def check_h5py(path: str) -> None:
    """Serial, plain h5py (default driver): the file as any HDF5 user sees it."""
    import h5py

    with h5py.File(path, "r") as f:
        for name in SHAPES:
            dset = f[name]
            assert dset.shape == SHAPES[name] and dset.dtype == np.dtype(DTYPES[name]), (name, dset)
            np.testing.assert_array_equal(dset[...], expected(name), err_msg=name)
            dcpl = dset.id.get_create_plist()
            assert dcpl.get_layout() == h5py.h5d.CONTIGUOUS and dcpl.get_fill_time() == h5py.h5d.FILL_TIME_NEVER
        assert f["ckptio"].attrs["complete"] == 1
        meta = metamod.loads(f["ckptio/metadata"][()])
        assert json.loads(f["ckptio/metadata"][()])["schema"] == 2
        assert meta["backend"] == "hdf5" and meta["attrs"] == ATTRS
        np.testing.assert_array_equal(f["particles"][...],
                                      np.concatenate([segment(r) for r in range(meta["nprocs"])]))
        np.testing.assert_array_equal(f["tracers"][...],
                                      np.concatenate([tracers(r) for r in range(meta["nprocs"])]))
        assert f["tracers"].attrs["units"] == "cm"
        assert f["energy"].shape == () and f["energy"][()] == ENERGY
        assert f["empty"].shape == (0, 3)
        for name in SHAPES:
            assert meta["variables"][name]["storage"]["file_offset"] == f[name].id.get_offset()
        check_user_table(meta, f["ckptio/block_table"][...], f["ckptio/block_checksums"][...],
                         f["ckptio/block_table"].attrs["variables"])
        assert f.attrs["step"] == 100 and f.attrs["name"] == "sedov" and list(f.attrs["flags"]) == [1, 2, 3]
    print("H5PY OK")


def check_user_table(meta: dict, table: np.ndarray, sums: np.ndarray, variables: str) -> None:
    """The integer block table kept for HDF5/netCDF users holds every block of the document, in its order."""
    assert table.dtype == np.int64 and sums.dtype == np.uint64, (table.dtype, sums.dtype)
    order = variables.split()
    assert sorted(order) == sorted(meta["variables"])
    width = (table.shape[1] - 2) // 2
    for name, var in meta["variables"].items():
        blocks = var["blocks"]
        nd = len(var["shape"])
        mine = table[:, 0] == order.index(name)
        assert table[mine, 1].tolist() == [b["rank"] for b in blocks], name
        assert table[mine, 2:2 + nd].tolist() == [b["offset"] for b in blocks], name
        assert table[mine, 2 + width:2 + width + nd].tolist() == [b["shape"] for b in blocks], name
        assert [f"{int(c):016x}" for c in sums[mine]] == [b["checksum"] for b in blocks], name


def check_netcdf4_reads_hdf5_tables(path: str) -> None:
    """netCDF-C (through netCDF4-python) sees the HDF5 file's block tables: plain integer datasets (version 1's
    compound table with a string member was hidden by netCDF-C 4.9 and crashed 4.10)."""
    import netCDF4
    from ckptio.backends import detect_backend

    meta = detect_backend(path).read_document(path)  # before: HDF5 refuses a second open with other locking
    with netCDF4.Dataset(path) as ds:
        group = ds.groups["ckptio"]
        table, sums = group["block_table"][...], group["block_checksums"][...]
        check_user_table(meta, np.asarray(table), np.asarray(sums), group["block_table"].getncattr("variables"))
    print("NETCDF4 READS HDF5 TABLES OK")


def check_netcdf4(path: str) -> None:
    """Serial netCDF4-python: the file as any netCDF user sees it."""
    import netCDF4

    with netCDF4.Dataset(path) as ds:
        assert ds.data_model == "NETCDF3_64BIT_DATA", ds.data_model
        ds.set_auto_mask(False)
        for name in SHAPES:
            var = ds[name]
            assert var.shape == SHAPES[name] and var.dtype == np.dtype(DTYPES[name]).newbyteorder("="), name
            np.testing.assert_array_equal(var[...], expected(name), err_msg=name)
        assert ds["energy"].shape == () and ds["energy"][...] == ENERGY
        assert "empty" not in ds.variables  # CDF has no zero-length fixed dimensions
        assert int(ds["ckptio_complete"][...]) == 1
        meta = metamod.loads(ds["ckptio_metadata"][:].tobytes())
        assert meta["backend"] == "pnetcdf" and meta["attrs"] == ATTRS
        np.testing.assert_array_equal(ds["particles"][...],
                                      np.concatenate([segment(r) for r in range(meta["nprocs"])]))
        np.testing.assert_array_equal(ds["tracers"][...],
                                      np.concatenate([tracers(r) for r in range(meta["nprocs"])]))
        assert ds["tracers"].dimensions == ("tracer", "field") and ds["tracers"].getncattr("units") == "cm"
        # one block table for every variable (bookkeeping: a few named items, not two per variable)
        check_user_table(meta, ds["ckptio_blocks"][...], ds["ckptio_block_checksums"][...],
                         ds["ckptio_blocks"].getncattr("variables"))
        assert not [v for v in ds.variables if v.startswith("ckptio_") and v not in (
            "ckptio_blocks", "ckptio_block_checksums", "ckptio_metadata", "ckptio_metadata_checksum",
            "ckptio_complete")]
        assert ds.getncattr("step") == 100 and ds.getncattr("name") == "sedov"
    print("NETCDF4 OK")


def _flip(path: str, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ 0x10]))


def damage(path: str, how: str) -> None:
    """Serial: ``flip`` one byte in the middle of dens' data, ``document``: one in the metadata document,
    ``unmark``: clear the completion mark, ``truncate``: cut the last 40 bytes."""
    from ckptio.backends import detect_backend

    backend = detect_backend(path)
    meta = backend.read_document(path)
    var = meta["variables"]["dens"]
    if how == "flip":
        _flip(path, var["storage"]["file_offset"] + math.prod(var["shape"]) * 8 // 2 + 3)
    elif how == "document" and backend.name == "hdf5":
        import h5py

        with h5py.File(path, "r") as f:
            document = f["ckptio/metadata"]
            pos = document.id.get_offset() + document.dtype.itemsize // 2
        _flip(path, pos)
    elif how == "document":
        from ckptio.backends.pnetcdf import read_header

        header = read_header(path)
        _flip(path, header.vars["ckptio_metadata"].begin + header.numrecs // 2)
    elif how == "unmark" and backend.name == "hdf5":
        import h5py

        with h5py.File(path, "r+") as f:
            del f["ckptio"].attrs["complete"]
    elif how == "unmark":
        from ckptio.backends.pnetcdf import read_header

        with open(path, "r+b") as f:
            f.seek(read_header(path).vars["ckptio_complete"].begin)
            f.write(np.array(0, ">i4").tobytes())
    elif how == "truncate":
        os.truncate(path, os.path.getsize(path) - 40)


# ------------------------------------------------------------------------------------------------ helpers
def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (apt-get install hdf5-tools netcdf-bin pnetcdf-bin)")
    return path


def _run(cmd: list[str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    """A serial command (tool, checker, CLI) with the MPI environment (singleton MPI init as root)."""
    return subprocess.run(cmd, cwd=cwd, env=mpi_env(), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def run_this_file(nprocs: int, args: list[str]) -> str:
    """This file as an MPI program (``write`` / ``read`` jobs) on ``nprocs`` ranks; its stdout."""
    _tool("mpirun")
    return run_mpi(nprocs, [str(HERE), *args], timeout=180).stdout


def run_serial(args: list[str], cwd: Path) -> str:
    proc = _run([sys.executable, str(HERE), *args], cwd)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def inspect(path: Path, *extra: str) -> subprocess.CompletedProcess:
    """``ckptio inspect`` (the console script of this venv)."""
    exe = shutil.which("ckptio", path=str(Path(sys.executable).parent)) or shutil.which("ckptio")
    assert exe is not None, "the ckptio console script is not installed"
    return _run([exe, "inspect", str(path), *extra], path.parent)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Callable[[str, int], Path]:
    """``written(backend, nprocs)``: the test checkpoint written by nprocs ranks (once per module)."""
    cache: dict[tuple[str, int], Path] = {}

    def get(backend: str, nprocs: int) -> Path:
        if (backend, nprocs) not in cache:
            directory = tmp_path_factory.mktemp(f"{backend}_w{nprocs}")
            path = directory / "chk_000100"
            run_this_file(nprocs, ["write", backend, str(path)])
            assert not [p for p in os.listdir(directory) if "ckptio-tmp" in p]
            cache[(backend, nprocs)] = path
        return cache[(backend, nprocs)]

    return get


def _copy(path: Path, tmp_path: Path) -> Path:
    out = tmp_path / "chk_copy"
    shutil.copyfile(path, out)
    return out


# -------------------------------------------------------------------------------------------------- tests
@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("nprocs", [2, 4])
def test_hdf5_file_as_seen_by_h5ls_h5dump_and_h5py(written, nprocs: int) -> None:
    path = written("hdf5", nprocs)
    listing = _run([_tool("h5ls"), "-r", str(path)], path.parent).stdout
    expected_lines = [(name, "Dataset {" + ", ".join(map(str, shape)) + "}") for name, shape in SHAPES.items()]
    expected_lines += [("energy", "Dataset {SCALAR}"), ("empty", "Dataset {0, 3}"), ("ckptio", "Group"),
                       ("ckptio/metadata", "Dataset {SCALAR}")]
    for name, what in expected_lines:
        assert re.search(rf"^/{re.escape(name)}\s+{re.escape(what)}$", listing, re.M), (name, what, listing)
    assert re.search(r"^/ckptio/block_table\s+Dataset \{\d+, 8\}$", listing, re.M), listing  # 3-D at most: 2+2*3
    assert re.search(r"^/ckptio/block_checksums\s+Dataset \{\d+\}$", listing, re.M), listing
    header = _run([_tool("h5dump"), "-H", str(path)], path.parent)
    assert header.returncode == 0, header.stderr
    assert 'GROUP "ckptio"' in header.stdout and 'ATTRIBUTE "complete"' in header.stdout
    assert 'DATASET "metadata"' in header.stdout and 'ATTRIBUTE "metadata_checksum"' in header.stdout
    assert "DATASPACE  SIMPLE { ( 13, 4, 5 ) / ( 13, 4, 5 ) }" in header.stdout
    mark = _run([_tool("h5dump"), "-a", "/ckptio/complete", str(path)], path.parent).stdout
    assert "(0): 1" in mark, mark
    data = _run([_tool("h5dump"), "-d", "/ids", str(path)], path.parent).stdout
    assert "(0,0): 1, 4, 7," in data, data
    assert "H5PY OK" in run_serial(["check-h5py", str(path)], path.parent)
    assert "NETCDF4 READS HDF5 TABLES OK" in run_serial(["check-netcdf4-h5", str(path)], path.parent)


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("nprocs", [2, 4])
def test_pnetcdf_file_as_seen_by_ncmpidump_ncdump_and_netcdf4(written, nprocs: int) -> None:
    path = written("pnetcdf", nprocs)
    header = _run([_tool("ncmpidump"), "-h", str(path)], path.parent)
    assert header.returncode == 0, header.stderr
    assert "file format: CDF-5" in header.stdout, header.stdout
    for line in ("double dens(dens_d0, dens_d1, dens_d2) ;", "float tile(tile_d0, tile_d1) ;",
                 "ushort ids(ids_d0, ids_d1) ;", "double particles(particles_d0) ;", "double energy ;",
                 "int64 ckptio_blocks(ckptio_nblocks, ckptio_blockcols) ;",
                 "uint64 ckptio_block_checksums(ckptio_nblocks) ;", "int ckptio_complete ;",
                 "char ckptio_metadata(ckptio_metadata_len) ;", "dens_d0 = 13 ;", ':name = "sedov" ;'):
        assert line in header.stdout, (line, header.stdout)
    assert _run([_tool("ncdump"), "-k", str(path)], path.parent).stdout.strip() == "cdf5"
    assert "double dens(dens_d0, dens_d1, dens_d2)" in _run([_tool("ncdump"), "-h", str(path)], path.parent).stdout
    values = _run([_tool("ncdump"), "-v", "ckptio_complete,ids", str(path)], path.parent).stdout
    assert "ckptio_complete = 1 ;" in values and "ids =\n  1, 4, 7," in values, values
    assert "NETCDF4 OK" in run_serial(["check-netcdf4", str(path)], path.parent)


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("writers", "readers"), [(4, 3), (2, 2), (1, 2), (8, 5)])
def test_restart_at_other_rank_count(written, backend: str, writers: int, readers: int) -> None:
    path = written(backend, writers)
    out = run_this_file(readers, ["read", str(path), str(writers)])
    assert f"READ OK on {readers} ranks" in out


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
def test_inspect_verify_detects_flipped_byte(written, tmp_path: Path, backend: str) -> None:
    path = written(backend, 4)
    ok = inspect(path, "--verify")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"format      {backend}" in ok.stdout and "complete and verified" in ok.stdout
    bad = _copy(path, tmp_path)
    run_serial(["damage", "flip", str(bad)], tmp_path)
    assert inspect(bad).returncode == 0  # metadata alone is intact
    result = inspect(bad, "--verify")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "'dens'" in result.stdout and "checksum mismatch" in result.stdout, result.stdout
    report = json.loads(inspect(bad, "--verify", "--json").stdout)
    assert report["status"] == "corrupt" and {p["variable"] for p in report["problems"]} == {"dens"}


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["unmark", "truncate"])
def test_incomplete_checkpoint_is_refused(written, tmp_path: Path, backend: str, how: str) -> None:
    bad = _copy(written(backend, 2), tmp_path)
    run_serial(["damage", how, str(bad)], tmp_path)
    result = inspect(bad, "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "incomplete", report


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
def test_damaged_metadata_document_is_corrupt(written, tmp_path: Path, backend: str) -> None:
    bad = _copy(written(backend, 2), tmp_path)
    run_serial(["damage", "document", str(bad)], tmp_path)
    result = inspect(bad, "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "corrupt" and "checksum mismatch" in report["error"], report


def _run_snippet(code: str, marker: str) -> None:
    """Run ``code`` in a fresh interpreter (no MPI in the pytest process) and expect ``marker`` on stdout."""
    proc = _run([sys.executable, "-c", code], HERE.parent)
    assert proc.returncode == 0 and marker in proc.stdout, proc.stdout + proc.stderr


def test_capabilities_refuse_what_the_formats_cannot_store() -> None:
    """Pure (no MPI): CDF-5 has no bool, complex, float16 or longdouble (an outside trial got PnetCDF's own
    TypeError at define time for float128); neither format compresses."""
    code = ("import numpy as np, ckptio\n"
            "from ckptio.backends import get_backend\n"
            "p, h = get_backend('pnetcdf'), get_backend('hdf5')\n"
            "assert not p.capabilities.compression and not h.capabilities.compression\n"
            "for dt in ('c16', '?', 'f2', np.longdouble):\n"
            "    try:\n"
            "        p.check_dtype('v', np.dtype(dt))\n"
            "    except ckptio.CapabilityError as e:\n"
            "        assert \"'v'\" in str(e)\n"
            "    else:\n"
            "        raise AssertionError(dt)\n"
            "    h.check_dtype('v', np.dtype(dt))\n"
            "p.check_dtype('v', np.dtype('u8'))\n"
            "p.check_dtype('v', np.dtype('f8'))\n"
            "print('CAPS OK')\n")
    _run_snippet(code, "CAPS OK")


def test_leading_axis_bands_group_overlapping_blocks() -> None:
    """Pure: writer blocks sharing leading-axis rows form one band; disjoint rows give separate bands."""
    code = ("from ckptio.backends.rawio import leading_axis_bands\n"
            "blk = lambda r, o, s: {'rank': r, 'offset': o, 'shape': s, 'checksum': f'{r:016x}'}\n"
            "meta = {'variables': {'v': {'dtype': '<f4', 'shape': [6, 4], 'kind': 'array',\n"
            "                            'storage': {'file_offset': 1000},\n"
            "        'blocks': [blk(0, [0, 0], [2, 2]), blk(1, [0, 2], [3, 2]), blk(0, [2, 0], [1, 2]),\n"
            "                   blk(2, [3, 0], [3, 4]), blk(1, [3, 0], [0, 4])]},\n"
            "        'z': {'dtype': '<f8', 'shape': [0, 3], 'kind': 'array', 'storage': {'file_offset': None},\n"
            "              'blocks': [blk(0, [0, 0], [0, 3])]}}}\n"
            "ext = leading_axis_bands(meta)\n"
            "assert [(e.box.offset, e.box.shape, e.file_offset, e.nbytes) for e in ext] == \\\n"
            "    [((0, 0), (3, 4), 1000, 48), ((3, 0), (3, 4), 1048, 48)], ext\n"
            "assert [[i for i, _, _ in e.verify] for e in ext] == [[0, 1, 2], [3]]\n"
            "print('BANDS OK')\n")
    _run_snippet(code, "BANDS OK")


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ("mpiio", *BACKENDS))
def test_thousands_of_small_variables(tmp_path: Path, backend: str) -> None:
    """2,500 variables of 1 KiB: HDF5's metadata cache starts writing while the datasets are created, which
    used to break the end-of-file query behind the space reservation ("driver get_eof request failed")."""
    out = run_mpi(2, [str(HERE), "many", "2500", str(tmp_path / "many"), backend]).stdout
    assert "MANY True" in out, out


def many_variables_job(nvars: int, path: str, backend: str) -> None:
    """Under mpirun: ``nvars`` variables of 128 float64, spread round robin over the ranks, each read back by the
    next rank; prints ``MANY True`` when every rank read every one right."""
    from mpi4py import MPI

    import ckptio

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    with ckptio.create(path, comm, backend=backend) as ck:
        for i in range(rank, nvars, size):
            ck.write(f"v{i:05d}", np.arange(128.0) + i, offset=(0,), global_shape=(128,))
    with ckptio.open(path, comm) as ck:
        got = ck.read_many([(f"v{i:05d}", None, None) for i in range((rank + 1) % size, nvars, size)])
    mine = range((rank + 1) % size, nvars, size)
    ok = all(np.array_equal(g, np.arange(128.0) + i) for g, i in zip(got, mine, strict=True))
    print("MANY", comm.allreduce(int(ok)) == size)


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    {"write": lambda: write_job(rest[0], rest[1]), "read": lambda: read_job(rest[0], int(rest[1])),
     "check-h5py": lambda: check_h5py(rest[0]), "check-netcdf4": lambda: check_netcdf4(rest[0]),
     "check-netcdf4-h5": lambda: check_netcdf4_reads_hdf5_tables(rest[0]),
     "damage": lambda: damage(rest[1], rest[0]),
     "many": lambda: many_variables_job(int(rest[0]), rest[1], rest[2])}[command]()
