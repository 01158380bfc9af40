"""Small-variable benchmark: many 1 KiB variables (metadata cost per variable), ckptio versus h5py and netCDF4.

Variable ``i`` (128 float64 = 1 KiB by default) belongs to writer rank ``i % N``; the restart reader ``i % R``
reads it back (``R`` = the restart communicator's size). The time per variable is the whole collective
operation (create/open, every variable, close/commit, fsync) divided by the number of variables, so it includes
the fixed cost of one checkpoint spread over its variables -- what a code with thousands of small arrays pays.

* ckptio: every backend available; ``write`` per variable on its owner, one ``close``; restart with one
  ``read_many`` per reader holding all of its variables.
* h5py (``driver="mpio"``): every rank creates every dataset (HDF5 metadata operations are collective), the
  owner writes its data independently; readers open collectively and read their datasets independently.
* netCDF4 (netCDF-4/HDF5 format): parallel when the installed netCDF4-python has parallel support (define mode is
  collective, data writes independent); otherwise serial, one file per rank (reported as such).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from .common import BenchError, collective, summary, timed
from .pagecache import evict, fsync_paths, remove


def values(i: int, n: int) -> np.ndarray:
    """Variable ``i``'s contents."""
    return np.arange(n, dtype=np.float64) + i * 0.5


def _mine(nvars: int, size: int, rank: int) -> list[int]:
    return list(range(rank, nvars, size))


def _name(i: int) -> str:
    return f"v{i:05d}"


# ---------------------------------------------------------------------------------------------- ckptio
def ckptio_write(comm, path: str, nvars: int, n: int, backend: str) -> None:
    import ckptio

    with ckptio.create(path, comm, backend=backend) as ck:
        for i in _mine(nvars, comm.Get_size(), comm.Get_rank()):
            ck.write(_name(i), values(i, n), offset=(0,), global_shape=(n,))


def ckptio_read(readers, path: str, nvars: int, n: int) -> list[np.ndarray]:
    import ckptio

    with ckptio.open(path, readers) as ck:
        mine = _mine(nvars, readers.Get_size(), readers.Get_rank())
        return ck.read_many([(_name(i), (0,), (n,)) for i in mine])


# ------------------------------------------------------------------------------------------------ h5py
def h5py_write(comm, path: str, nvars: int, n: int) -> None:
    import h5py

    mine = set(_mine(nvars, comm.Get_size(), comm.Get_rank()))
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        for i in range(nvars):
            dset = f.create_dataset(_name(i), shape=(n,), dtype=np.float64)
            if i in mine:
                dset[...] = values(i, n)
    if comm.Get_rank() == 0:
        fsync_paths([path])


def h5py_read(readers, path: str, nvars: int, n: int) -> list[np.ndarray]:
    import h5py

    with h5py.File(path, "r", driver="mpio", comm=readers) as f:
        return [f[_name(i)][...] for i in _mine(nvars, readers.Get_size(), readers.Get_rank())]


# --------------------------------------------------------------------------------------------- netCDF4
def netcdf4_parallel() -> bool:
    """Whether the installed netCDF4-python can open files in parallel (MPI-IO)."""
    import netCDF4

    return bool(getattr(netCDF4, "__has_parallel4_support__", False) or
                getattr(netCDF4, "__has_parallel_support__", False))


def _nc_file(path: str, comm) -> str:
    """Parallel: one shared file; serial fallback: one file per rank."""
    return path if netcdf4_parallel() else f"{path}.rank{comm.Get_rank()}"


def netcdf4_write(comm, path: str, nvars: int, n: int) -> None:
    import netCDF4

    parallel = netcdf4_parallel()
    mine = _mine(nvars, comm.Get_size(), comm.Get_rank())
    kwargs = {"parallel": True, "comm": comm} if parallel else {}
    with netCDF4.Dataset(_nc_file(path, comm), "w", format="NETCDF4", **kwargs) as nc:
        variables = {}
        for i in range(nvars) if parallel else mine:
            # one dimension per variable: with one shared dimension, netCDF-C attaches 10,000 variables to one
            # HDF5 dimension scale and close() fails in parallel ("Problem with HDF5 dimscales") on some ranks
            nc.createDimension(f"n_{_name(i)}", n)
            variables[i] = nc.createVariable(_name(i), "f8", (f"n_{_name(i)}",))
        for i in mine:
            variables[i][:] = values(i, n)
    if not parallel or comm.Get_rank() == 0:
        fsync_paths([_nc_file(path, comm)])


def netcdf4_read(readers, path: str, nvars: int, n: int, writers: int) -> list[np.ndarray]:
    import netCDF4

    mine = _mine(nvars, readers.Get_size(), readers.Get_rank())
    if netcdf4_parallel():
        with netCDF4.Dataset(path, "r", parallel=True, comm=readers) as nc:
            return [np.asarray(nc.variables[_name(i)][:]) for i in mine]
    out = []
    for i in mine:
        with netCDF4.Dataset(f"{path}.rank{i % writers}", "r") as nc:
            out.append(np.asarray(nc.variables[_name(i)][:]))
    return out


# ---------------------------------------------------------------------------------------------- runner
def _libraries(backends: list[str]) -> dict[str, tuple[str, Callable, Callable, str]]:
    """label -> (file suffix, write(comm, path, nvars, n), read(readers, path, nvars, n, writers), note)."""
    libs: dict[str, tuple[str, Callable, Callable, str]] = {}
    for b in backends:
        libs[f"ckptio {b}"] = (".ckpt", lambda c, p, k, n, b=b: ckptio_write(c, p, k, n, b),
                               lambda r, p, k, n, w: ckptio_read(r, p, k, n), "one close(); read_many")
    try:
        import h5py

        if h5py.get_config().mpi:
            libs["h5py"] = (".h5", h5py_write, lambda r, p, k, n, w: h5py_read(r, p, k, n),
                            "mpio driver; collective create_dataset, independent data writes/reads")
    except ImportError:
        pass
    try:
        import netCDF4  # noqa: F401

        kind = "parallel (MPI-IO, netCDF-4/HDF5)" if netcdf4_parallel() else "serial, one file per rank"
        libs["netCDF4"] = (".nc", netcdf4_write, netcdf4_read, kind)
    except ImportError:
        pass
    return libs


def _paths(outdir: str, label: str, suffix: str, nprocs: int) -> list[str]:
    base = os.path.join(outdir, "small-" + label.replace(" ", "-") + suffix)
    return [base] + [f"{base}.rank{r}" for r in range(nprocs)]


def run(comm, readers, outdir: str, nvars: int, nbytes: int, repeats: int, backends: list[str],
        log: Callable[[str], None] = lambda msg: None) -> dict[str, Any]:
    """Measure every library; returns the JSON section (rank 0's view; every rank gets the same)."""
    from mpi4py import MPI

    n = max(1, nbytes // 8)
    rank, nprocs = comm.Get_rank(), comm.Get_size()
    out: dict[str, Any] = {"nvars": nvars, "bytes_per_var": n * 8, "repeats": repeats,
                           "method": "time of the whole collective write (incl. create, close/commit, fsync) "
                                     "or restart read (incl. open), divided by the number of variables",
                           "libraries": {}}
    for label, (suffix, write, read, note) in _libraries(backends).items():
        paths = _paths(outdir, label, suffix, nprocs)
        entry: dict[str, Any] = {"note": note, "write_us_per_var": [], "read_us_per_var": []}
        try:
            for _ in range(repeats):
                if rank == 0:
                    remove(paths)
                t_w, _ = timed(comm, lambda write=write, p=paths[0]: write(comm, p, nvars, n))
                if rank == 0:
                    evict(paths)

                def do_read(read=read, p=paths[0]) -> list[np.ndarray] | None:
                    return read(readers, p, nvars, n, nprocs) if readers != MPI.COMM_NULL else None

                t_r, got = timed(comm, do_read)
                collective(comm, lambda got=got: _check(got, readers, nvars, n))
                entry["write_us_per_var"].append(t_w / nvars * 1e6)
                entry["read_us_per_var"].append(t_r / nvars * 1e6)
                log(f"  {label}: write {t_w:.2f} s, read {t_r:.2f} s")
            entry["write"] = summary(entry["write_us_per_var"])
            entry["read"] = summary(entry["read_us_per_var"])
            entry["status"] = "ok"
        except BenchError as exc:
            entry.update(status="failed", reason=str(exc))
            log(f"  {label}: FAILED {exc}")
        finally:
            if rank == 0:
                remove(paths)
            comm.Barrier()
        out["libraries"][label] = entry
    return out


def _check(got: list[np.ndarray] | None, readers, nvars: int, n: int) -> None:
    """Raise on a reader that got wrong data (outside the timed region)."""
    if got is None:
        return
    for i, arr in zip(_mine(nvars, readers.Get_size(), readers.Get_rank()), got, strict=True):
        if not np.array_equal(np.asarray(arr).reshape(-1), values(i, n)):
            raise BenchError(f"small variable {_name(i)} read back wrong")
