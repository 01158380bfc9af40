"""The bandwidth cases: raw storage, the peer libraries used directly, and every ckptio backend and mode.

Every case has a ``write`` and a ``read`` callable, both entered by every rank of the world communicator (the
runner times them between barriers). Conventions that make the cases comparable:

* write: the same FLASH-like arrays (:class:`benchmarks.common.Dataset`), every rank its own blocks, and the
  time includes making the data durable: ckptio's own sync/commit; for the peers, their close followed by an
  ``fsync`` of every file they wrote (on a file already synced by the library this costs next to nothing);
* read ("restart"): ranks ``0..R-1`` of a sub-communicator (``R = N-1`` by default, ``comm.Split``) read every
  variable for their blocks of the *shifted* decomposition (:func:`benchmarks.common.read_range`), so each
  reader needs parts of several writers' data; the remaining rank waits at the closing barrier;
* raw: rank 0 alone, ``os.write``/``os.readv`` in large chunks from/to 4096-aligned buffers;
* the data set's ``extras`` (FLASH's small tree variables, benchmarks/flashio.py) are written by every case that
  writes a checkpoint, as the global arrays of ``nblocks`` rows they are, and not read back;
* a case without a ``read`` is write-only (FLASH-IO, which has no restart); a write or read may report its own
  time (``seconds``: a reference program's own timer, not mpirun's start-up) and its own size (``bytes``).
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .common import NXB, Dataset, aligned_empty, owners_of, read_range
from .pagecache import fsync_paths

RAW_CHUNK = 16 << 20


@dataclass
class Context:
    """What a case needs: communicators, this rank's data, where files go."""

    comm: Any
    readers: Any  # sub-communicator of the restart readers; MPI.COMM_NULL on the idle rank(s)
    data: Dataset
    outdir: str
    stage_base: str | None = None  # the staged mode's fast tier (default a private directory in /dev/shm)
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    @property
    def nprocs(self) -> int:
        return self.comm.Get_size()

    @property
    def is_reader(self) -> bool:
        from mpi4py import MPI

        return self.readers != MPI.COMM_NULL

    def my_read_range(self) -> tuple[int, int]:
        return read_range(self.data.nblocks, self.readers.Get_size(), self.readers.Get_rank())


ReadResult = tuple[list[np.ndarray] | None, dict[str, Any]]


@dataclass
class Case:
    """One line of the bandwidth table."""

    key: str
    label: str
    group: str  # "raw", "peer" or "ckptio"
    note: str
    write: Callable[[Context], dict[str, Any]]
    read: Callable[[Context], ReadResult] | None  # None: write-only
    paths: Callable[[Context], list[str]]  # the files a restart reads (evicted and checked before a cold read)
    available: bool = True
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    cleanup: Callable[[Context], list[str]] = lambda ctx: []  # more files the case leaves (removed, not evicted)
    prepare: Callable[[Context], None] = lambda ctx: None  # before the timed reads (e.g. allocate out= arrays)


def _path(ctx: Context, key: str, suffix: str = "") -> str:
    return os.path.join(ctx.outdir, f"{key}{suffix}")


# ----------------------------------------------------------------------------------------------------- raw
def raw_case(fill: bool = False) -> Case:
    """One process, ``os.write`` of RAW_CHUNK pieces of a 4096-aligned buffer, then ``fsync``; read back with
    ``os.readv`` into a 4096-aligned buffer of the same size (reused, so the read is not slowed by page faults).

    ``fill``: read back into consecutive stretches of one array of the whole file's size instead (allocated and
    touched once, outside the timed reads), as a restart must: every byte lands in its own place in memory, so
    the read writes the whole size to memory, where the reused 16 MiB buffer of the raw reference can stay in the
    processor's cache. The restart's own floor on this machine (1 process)."""
    key = "raw-fill" if fill else "raw"

    def path(ctx: Context) -> str:
        return _path(ctx, key, ".bin")

    def buffer(ctx: Context) -> np.ndarray:
        if "raw_buffer" not in ctx.cache:
            buf = aligned_empty(RAW_CHUNK)
            src = ctx.data.data.reshape(-1).view(np.uint8)
            buf[:] = np.resize(src, RAW_CHUNK) if src.size < RAW_CHUNK else src[:RAW_CHUNK]
            ctx.cache["raw_buffer"] = buf
        return ctx.cache["raw_buffer"]

    def write(ctx: Context) -> dict[str, Any]:
        if ctx.rank != 0:
            return {}
        buf, total = buffer(ctx), ctx.data.total_bytes
        fd = os.open(path(ctx), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            done = 0
            while done < total:
                done += os.write(fd, memoryview(buf)[: min(RAW_CHUNK, total - done)])
            os.fsync(fd)
        finally:
            os.close(fd)
        return {"bytes": done}

    def read(ctx: Context) -> ReadResult:
        if ctx.rank != 0:
            return None, {}
        buf, total, done = buffer(ctx), ctx.data.total_bytes, 0
        fd = os.open(path(ctx), os.O_RDONLY)
        try:
            while done < total:
                dest = memoryview(ctx.cache["raw_fill"])[done:] if fill else memoryview(buf)
                n = os.readv(fd, [dest[: min(RAW_CHUNK, total - done)]])
                if n == 0:
                    raise OSError(f"{path(ctx)}: short read at {done} of {total} bytes")
                done += n
        finally:
            os.close(fd)
        return None, {"bytes": done}

    def prepare(ctx: Context) -> None:
        if fill and ctx.rank == 0 and ctx.cache.get("raw_fill") is None:
            ctx.cache["raw_fill"] = aligned_empty(ctx.data.total_bytes)
            ctx.cache["raw_fill"][:] = 1  # the pages exist before the timed reads, like a restart's out= arrays

    if fill:
        return Case(key, "raw storage, read into a whole-size array (1 process, readv 16 MiB pieces)", "raw",
                    "one process; as raw, but the read fills one preallocated array of the file's size (a restart's "
                    "memory traffic)", write, read, lambda ctx: [path(ctx)], prepare=prepare)
    return Case(key, "raw storage (1 process, os.write/readv 16 MiB aligned)", "raw",
                "one process; buffered os.write + fsync, os.readv into a reused 4096-aligned buffer",
                write, read, lambda ctx: [path(ctx)])


# --------------------------------------------------------------------------------------------------- peers
def _have(module: str) -> str:
    """'' when ``module`` imports, else why not."""
    try:
        if importlib.util.find_spec(module) is None:
            return f"python module {module} is not installed"
        importlib.import_module(module)
    except Exception as exc:
        return f"python module {module} cannot be imported: {exc}"
    return ""


def h5py_case() -> Case:
    """h5py with ``driver="mpio"``: one dataset per variable in its global shape, collective writes/reads."""
    reason = _have("h5py")
    if not reason:
        import h5py

        if not h5py.get_config().mpi:
            reason = "h5py is built without MPI (parallel HDF5)"

    def path(ctx: Context) -> str:
        return _path(ctx, "h5py", ".h5")

    def write(ctx: Context) -> dict[str, Any]:
        import h5py

        d = ctx.data
        with h5py.File(path(ctx), "w", driver="mpio", comm=ctx.comm) as f:
            for v, name in enumerate(d.names):
                dset = f.create_dataset(name, shape=d.global_shape, dtype=np.float64)
                with dset.collective:
                    dset[d.first:d.first + d.count] = d.local(v)
            for name, arr in d.extras.items():
                dset = f.create_dataset(name, shape=d.extra_global_shape(name), dtype=arr.dtype)
                with dset.collective:
                    dset[d.first:d.first + d.count] = arr
        if ctx.rank == 0:
            fsync_paths([path(ctx)])
        return {}

    def read(ctx: Context) -> ReadResult:
        import h5py

        if not ctx.is_reader:
            return None, {}
        first, count = ctx.my_read_range()
        out = []
        with h5py.File(path(ctx), "r", driver="mpio", comm=ctx.readers) as f:
            for name in ctx.data.names:
                dset = f[name]
                with dset.collective:
                    out.append(dset[first:first + count])
        return out, {}

    return Case("h5py", "h5py mpio, collective (direct)", "peer",
                "h5py driver='mpio', create_dataset per variable, `with dset.collective:` hyperslab write/read",
                write, read, lambda ctx: [path(ctx)], not reason, reason)


def pnetcdf_case() -> Case:
    """pnetcdf-python: CDF-5, one variable per FLASH variable, ``put_var_all``/``get_var_all``."""
    reason = _have("pnetcdf")

    def path(ctx: Context) -> str:
        return _path(ctx, "pnetcdf", ".nc")

    def write(ctx: Context) -> dict[str, Any]:
        import pnetcdf

        d = ctx.data
        f = pnetcdf.File(path(ctx), mode="w", format="NC_64BIT_DATA", comm=ctx.comm)
        try:
            for dim, n in zip(("blocks", "z", "y", "x"), d.global_shape, strict=True):
                f.def_dim(dim, n)
            variables = [f.def_var(name, np.dtype(np.float64), ("blocks", "z", "y", "x")) for name in d.names]
            extras = {}
            for name, arr in d.extras.items():
                dims = ["blocks"]
                for n in arr.shape[1:]:
                    if f"n{n}" not in f.dimensions:
                        f.def_dim(f"n{n}", n)
                    dims.append(f"n{n}")
                extras[name] = f.def_var(name, arr.dtype, tuple(dims))
            f.enddef()
            start, count = [d.first, 0, 0, 0], [d.count, NXB, NXB, NXB]
            for v, var in enumerate(variables):
                var.put_var_all(d.local(v), start=start, count=count)
            for name, var in extras.items():
                arr = d.extras[name]
                var.put_var_all(arr, start=[d.first] + [0] * (arr.ndim - 1), count=list(arr.shape))
        finally:
            f.close()
        if ctx.rank == 0:
            fsync_paths([path(ctx)])
        return {}

    def read(ctx: Context) -> ReadResult:
        import pnetcdf

        if not ctx.is_reader:
            return None, {}
        first, count = ctx.my_read_range()
        out = []
        f = pnetcdf.File(path(ctx), mode="r", comm=ctx.readers)
        try:
            for name in ctx.data.names:
                buf = np.empty((count, NXB, NXB, NXB), dtype=np.float64)
                f.variables[name].get_var_all(buf, start=[first, 0, 0, 0], count=[count, NXB, NXB, NXB])
                out.append(buf)
        finally:
            f.close()
        return out, {}

    return Case("pnetcdf", "PnetCDF put_var_all (direct)", "peer",
                "pnetcdf-python, CDF-5, default hints, put_var_all/get_var_all per variable",
                write, read, lambda ctx: [path(ctx)], not reason, reason)


def numpy_case() -> Case:
    """``np.save`` file per process: each rank one .npy of its (nvars, count, 16, 16, 16) array."""

    def directory(ctx: Context) -> str:
        return _path(ctx, "numpy")

    def write(ctx: Context) -> dict[str, Any]:
        if ctx.rank == 0:
            os.makedirs(directory(ctx), exist_ok=True)
        ctx.comm.Barrier()
        name = os.path.join(directory(ctx), f"rank{ctx.rank:05d}.npy")
        with open(name, "wb") as fh:
            np.save(fh, ctx.data.data)
            fh.flush()
            os.fsync(fh.fileno())
        if ctx.data.extras:  # FLASH's tree variables: one more small file per rank
            with open(os.path.join(directory(ctx), f"rank{ctx.rank:05d}.tree.npz"), "wb") as fh:
                np.savez(fh, **ctx.data.extras)
                fh.flush()
                os.fsync(fh.fileno())
        return {}

    def read(ctx: Context) -> ReadResult:
        """Each reader opens the writers' files that overlap its blocks (np.load with mmap) and copies out."""
        if not ctx.is_reader:
            return None, {}
        d = ctx.data
        first, count = ctx.my_read_range()
        out = [np.empty((count, NXB, NXB, NXB)) for _ in d.names]
        for w, lo, n in owners_of(d.splits, first, count):
            arr = np.load(os.path.join(directory(ctx), f"rank{w:05d}.npy"), mmap_mode="r")
            wfirst = lo - d.splits[w][0]
            for v in range(len(d.names)):
                out[v][lo - first:lo - first + n] = arr[v, wfirst:wfirst + n]
            del arr
        return out, {}

    return Case("numpy", "numpy np.save, file per process", "peer",
                "np.save of each rank's array + fsync; restart: np.load(mmap_mode='r') of the overlapping files",
                write, read, lambda ctx: [directory(ctx)])


def adios2_case() -> Case:
    """ADIOS2 BP5 from PyPI: serial (no MPI), so one BP5 file (directory) per rank, as a global array selection."""
    reason = _have("adios2")

    def directory(ctx: Context) -> str:
        return _path(ctx, "adios2")

    def write(ctx: Context) -> dict[str, Any]:
        import adios2

        if ctx.rank == 0:
            os.makedirs(directory(ctx), exist_ok=True)
        ctx.comm.Barrier()
        d = ctx.data
        name = os.path.join(directory(ctx), f"rank{ctx.rank:05d}.bp")
        with adios2.Stream(name, "w") as s:
            for v, var in enumerate(d.names):
                s.write(var, d.local(v), list(d.global_shape), [d.first, 0, 0, 0], [d.count, NXB, NXB, NXB])
            for var, arr in d.extras.items():
                s.write(var, arr, list(d.extra_global_shape(var)), [d.first] + [0] * (arr.ndim - 1), list(arr.shape))
        fsync_paths([name])
        return {}

    def read(ctx: Context) -> ReadResult:
        import adios2

        if not ctx.is_reader:
            return None, {}
        d = ctx.data
        first, count = ctx.my_read_range()
        out = [np.empty((count, NXB, NXB, NXB)) for _ in d.names]
        for w, lo, n in owners_of(d.splits, first, count):
            with adios2.FileReader(os.path.join(directory(ctx), f"rank{w:05d}.bp")) as f:
                for v, var in enumerate(d.names):
                    out[v][lo - first:lo - first + n] = f.read(var, [lo, 0, 0, 0], [n, NXB, NXB, NXB])
        return out, {}

    label = "ADIOS2 BP5 (PyPI, serial), file per rank"
    if not reason:
        import adios2

        if adios2.is_built_with_mpi:
            label = "ADIOS2 BP5, file per rank"
    return Case("adios2", label, "peer",
                "adios2 from PyPI is built without MPI: each rank writes its own BP5 directory (global-array "
                "selection); restart readers open the overlapping ranks' files",
                write, read, lambda ctx: [directory(ctx)], not reason, reason)


# -------------------------------------------------------------------------------------------------- ckptio
def async_support() -> dict[str, str]:
    """Which optional write modes ``ckptio.create`` offers (by its signature): 'available' or 'not available'."""
    import ckptio

    params = inspect.signature(ckptio.create).parameters
    return {"async": "available" if "mode" in params else "not available",
            "staged": "available" if "stage_dir" in params else "not available"}


def ckptio_case(backend: str, compression: str | None = None, mode: str = "sync", out: str | None = None) -> Case:
    """ckptio ``create``/``write``/``close`` and ``open``/``read_many``, one backend and mode.

    ``out``: the restart passes ``read_many(out=)`` arrays this rank already has (allocated and filled with -1
    once, outside the timed reads, then reused like a simulation's own arrays; the raw reference reads into a
    reused buffer too), so the read pays no page faults of fresh output memory; without it, every read allocates
    its arrays (the kernel maps and zeroes every page during the read). ``"numpy"``: arrays from ``numpy.full``
    (16 bytes past a page, like any large numpy or malloc'ed array); ``"aligned"``: page-aligned arrays, as
    ``ckptio.empty`` makes (allocated here by the benchmark's own helper, so older ckptio runs the case too)."""
    import ckptio.backends as cb

    reason = ""
    if backend not in cb.available_backends():
        reason = f"backend {backend!r} is not available: {cb.MISSING.get(backend, 'not registered')}"
    elif mode != "sync" and async_support()[mode] != "available":
        reason = f"ckptio.create has no {mode} mode (not available)"
    key = f"ckptio-{backend}" + (f"-{compression.split(':')[0]}" if compression else "") + \
          ("" if mode == "sync" else f"-{mode}") + {None: "", "numpy": "-out", "aligned": "-out-aligned"}[out]

    def path(ctx: Context) -> str:
        return _path(ctx, key, ".ckpt")

    def stage_dir(ctx: Context) -> str:
        # the "fast tier", a directory every rank sees: tmpfs (/dev/shm) unless --stage-dir says otherwise
        return os.path.join(ctx.stage_base or ctx.outdir, f"{key}.stage")

    def create_kwargs(ctx: Context) -> dict[str, Any]:
        kw: dict[str, Any] = {"backend": backend, "compression": compression, "attrs": {"step": 100}}
        if mode == "async":
            kw["mode"] = "async"
        if mode == "staged":
            kw["stage_dir"] = stage_dir(ctx)
            if ctx.rank == 0:
                os.makedirs(kw["stage_dir"], exist_ok=True)
            ctx.comm.Barrier()
        return kw

    def write(ctx: Context) -> dict[str, Any]:
        import time

        import ckptio

        d = ctx.data
        t0 = time.perf_counter()
        ck = ckptio.create(path(ctx), ctx.comm, **create_kwargs(ctx))
        for v, name in enumerate(d.names):
            ck.write(name, d.local(v), offset=(d.first, 0, 0, 0), global_shape=d.global_shape)
        for name, arr in d.extras.items():
            ck.write(name, arr, offset=(d.first,) + (0,) * (arr.ndim - 1), global_shape=d.extra_global_shape(name))
        ck.close()
        blocked = time.perf_counter() - t0
        waiter = getattr(ck, "wait", None)
        if mode != "sync" and callable(waiter):
            waiter()
        return {"blocked_seconds": blocked, "stats": ck.stats.to_json()}

    def read(ctx: Context) -> ReadResult:
        import ckptio

        if not ctx.is_reader:
            return None, {}
        first, count = ctx.my_read_range()
        shape = (count, NXB, NXB, NXB)
        given = ctx.cache[f"{key}/out"] if out else None
        with ckptio.open(path(ctx), ctx.readers) as ck:
            requests = [(name, (first, 0, 0, 0), shape) for name in ctx.data.names]
            # out= only when given: the same benchmark then also measures readers that predate out= (old vs new)
            arrays = ck.read_many(requests, out=given) if given is not None else ck.read_many(requests)
            stats = ck.stats.to_json()
        return arrays, {"stats": stats}

    label = (f"ckptio {backend}" + (f" + {compression}" if compression else "") +
             ("" if mode == "sync" else f" ({mode})") +
             {None: "", "numpy": " restart into out=", "aligned": " restart into page-aligned out="}[out])
    note = {"mpiio": "native format, ckptio's own write aggregators (pwritev of stripe-aligned domains); "
                     "two-phase aggregated restart",
            "hdf5": "parallel HDF5 file, collective H5Dwrite per variable; restart reads raw extents",
            "pnetcdf": "CDF-5 file, iput_var + one wait_all per group of variables; restart reads raw extents"}[backend]
    if compression:
        note += f"; per-block {compression} (bandwidth counts the uncompressed bytes)"
    if mode == "async":
        note += "; async: close() returns after copying to staging buffers, an I/O thread writes and commits"
    if out:
        note += "; the restart fills arrays the readers already have (read_many(out=), allocated once" + \
            (", page-aligned as ckptio.empty makes them)" if out == "aligned" else ", numpy.full)")
    if mode == "staged":
        note += ("; staged: close() writes to stage_dir (a tmpfs, /dev/shm, as a node-local fast tier), "
                 "the I/O thread drains it to the target (checksums verified)")

    def cleanup(ctx: Context) -> list[str]:
        return [stage_dir(ctx)] if mode == "staged" else []

    def prepare(ctx: Context) -> None:
        if out and ctx.is_reader and f"{key}/out" not in ctx.cache:  # the simulation's arrays, pages touched
            shape = (ctx.my_read_range()[1], NXB, NXB, NXB)
            if out == "aligned":
                arrays = [aligned_empty(math.prod(shape) * 8).view(np.float64).reshape(shape) for _ in ctx.data.names]
                for a in arrays:
                    a[...] = -1.0
            else:
                arrays = [np.full(shape, -1.0) for _ in ctx.data.names]
            ctx.cache[f"{key}/out"] = arrays

    return Case(key, label, "ckptio", note, write, read, lambda ctx: [path(ctx)], not reason, reason,
                {"backend": backend, "compression": compression, "mode": mode, "out": out}, cleanup, prepare)


def all_cases(compression: str) -> list[Case]:
    """The bandwidth table's rows, in display order."""
    cases = [raw_case(), raw_case(fill=True), h5py_case(), pnetcdf_case(), numpy_case(), adios2_case()]
    for backend in ("mpiio", "hdf5", "pnetcdf"):
        cases.append(ckptio_case(backend))
        if backend == "mpiio":
            cases.append(ckptio_case(backend, out="numpy"))
            cases.append(ckptio_case(backend, out="aligned"))
    cases.append(ckptio_case("mpiio", compression))
    for mode in ("async", "staged"):
        cases.append(ckptio_case("mpiio", None, mode))
    return cases
