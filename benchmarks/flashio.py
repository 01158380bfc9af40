"""PnetCDF's FLASH-IO benchmark on its own checkpoint shape, and ckptio (every backend) and the peers writing
exactly that shape, at each rank count of ``--flash-ranks``, in the same run.

FLASH-IO (``benchmarks/FLASH-IO`` of PnetCDF's source, built from Debian's source package by
``ci/build_flash_io.sh`` for ``make bench`` only) writes one CDF-5 checkpoint per run: on rank ``r``,
``80 + r % 3`` blocks (``0.8 * MAXBLOCKS``, MAXBLOCKS = 100 as its Makefile sets it; the uneven counts mimic a
real run), 24 unknowns (``dens velx vely velz pres ener temp gamc game enuc gpot`` and the 13 fluids
``f1__``..``f13_``), each a float64 array ``(total blocks, 16, 16, 16)`` (the build sets its
``nxb = nyb = nzb`` "USER EDIT" constants to 16, as in FLASH and in the figures of its README; Debian's source
has 8), and the tree: ``lrefine``, ``nodetype`` (int32, one per block), ``gid`` (int32, 15 per block),
``coordinates``, ``blocksize`` (float64, 3 per block), ``bndbox`` (float64, 3 x 2 per block). The data set
here (:func:`flash_dataset`) is that: the same variables, block size, per-rank block counts and types, so every
case writes the same bytes in the same global arrays. The first round checks the header of FLASH-IO's own file
against it (variables, shapes, types): a FLASH-IO of another shape fails the case instead of being compared.

FLASH-IO's time is its own "checkpoint time" (create, define, ``iput`` + ``wait_all``, close: max over ranks)
plus the ``fsync`` of its checkpoint file right after it exits: PnetCDF's close does not sync, every other case's
write ends durable. (It also writes two plot files after the checkpoint, ~18% of the checkpoint's bytes, which
are not part of the comparison; at these sizes the kernel does not write the checkpoint's dirty pages back before
the fsync, so the fsync pays for all of them.) ckptio and the peers write from per-variable contiguous arrays;
FLASH-IO writes from its guard-celled ``unk(nvar, 24, 24, 24, maxblocks)`` through a derived datatype.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import numpy as np

from .cases import Case, Context, _path
from .common import NXB, Dataset, dataset_of
from .external import run_job
from .pagecache import fsync_paths

UNKNOWNS = ("dens", "velx", "vely", "velz", "pres", "ener", "temp", "gamc", "game", "enuc", "gpot",
            *(f"f{i}".ljust(4, "_") for i in range(1, 14)))
MAXBLOCKS = 100  # FLASH-IO's Makefile: -DMAXBLOCKS=100
NGID = 15  # 3-d: 6 faces + parent + 8 children
NDIM = 3


def block_counts(nprocs: int, maxblocks: int = MAXBLOCKS) -> list[int]:
    """FLASH-IO's blocks per rank: ``int(0.8 * maxblocks) + rank % 3``."""
    return [int(0.8 * maxblocks) + r % 3 for r in range(nprocs)]


def flash_dataset(nprocs: int, rank: int, maxblocks: int = MAXBLOCKS) -> Dataset:
    """This rank's part of FLASH-IO's checkpoint (module docstring); ``maxblocks`` smaller only for --quick."""
    counts = block_counts(nprocs, maxblocks)
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
    data = dataset_of(UNKNOWNS, list(zip(firsts, counts, strict=True)), rank)
    n = data.count
    data.extras = {"lrefine": np.ones(n, np.int32), "nodetype": np.ones(n, np.int32),
                   "gid": np.full((n, NGID), -1, np.int32), "coordinates": np.full((n, NDIM), 0.25),
                   "blocksize": np.full((n, NDIM), 0.5), "bndbox": np.zeros((n, NDIM, 2))}
    return data


def expected_header(data: Dataset) -> dict[str, tuple[tuple[int, ...], str]]:
    """{variable: (global shape, dtype)} of the checkpoint ``data`` describes."""
    out = {name: (data.global_shape, "float64") for name in data.names}
    out.update({name: (data.extra_global_shape(name), str(a.dtype)) for name, a in data.extras.items()})
    return out


def file_header(path: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Rank 0 (Local): {variable: (shape, dtype)} of a CDF-5 file, read with pnetcdf-python on one process."""
    import pnetcdf
    from mpi4py import MPI

    f = pnetcdf.File(path, mode="r", comm=MPI.COMM_SELF)
    try:
        return {name: (tuple(int(n) for n in var.shape), str(np.dtype(var.dtype))) for name, var in f.variables.items()}
    finally:
        f.close()


def check_shape(path: str, data: Dataset) -> str:
    """Rank 0: '' when FLASH-IO's file holds exactly ``data``'s variables, shapes and types, else what differs
    (or why it could not be read: then the comparison is reported unchecked, not failed)."""
    try:
        got = file_header(path)
    except ImportError:
        return ""
    want = expected_header(data)
    diff = [f"{k}: FLASH-IO {got.get(k)} vs ckptio {want.get(k)}" for k in sorted(set(got) | set(want))
            if got.get(k) != want.get(k)]
    return "; ".join(diff[:5])


_CHECKPOINT = re.compile(r"checkpoint time\s*:\s*([0-9.]+)")


def parse_checkpoint_seconds(stdout: str) -> float:
    """FLASH-IO's "checkpoint time : X sec" (max over ranks)."""
    m = _CHECKPOINT.search(stdout)
    if not m:
        from .common import BenchError

        raise BenchError("FLASH-IO's output has no 'checkpoint time': " + stdout[-800:])
    return float(m.group(1))


def find_flash_io(option: str | None) -> tuple[str | None, str]:
    """(binary, '') or (None, why not)."""
    if not option:
        return None, "FLASH-IO not built (make bench builds it: ci/build_flash_io.sh; or --flash-io PATH)"
    if not os.access(option, os.X_OK):
        return None, f"FLASH-IO binary {option!r} is not there (ci/build_flash_io.sh builds it)"
    return option, ""


def flash_io_case(binary: str | None, reason: str) -> Case:
    """PnetCDF's FLASH-IO on the case's communicator's rank count (write-only)."""
    key = "flash-io"

    def prefix(ctx: Context) -> str:
        return _path(ctx, "flashio_")

    def checkpoint(ctx: Context) -> str:
        return prefix(ctx) + "ncmpi_chk_0000.nc"

    def write(ctx: Context) -> dict[str, Any]:
        assert binary is not None
        res = run_job(ctx.comm, ctx.nprocs, [binary, prefix(ctx)])
        if res is None:
            return {}
        seconds = parse_checkpoint_seconds(res.stdout)
        t0 = time.perf_counter()
        fsync_paths([checkpoint(ctx)])
        synced = time.perf_counter() - t0
        info: dict[str, Any] = {"seconds": seconds + synced, "flash_io_checkpoint_seconds": seconds,
                                "fsync_seconds": synced}
        if not ctx.cache.get("flash-io/shape-checked"):
            ctx.cache["flash-io/shape-checked"] = True
            problem = check_shape(checkpoint(ctx), ctx.data)
            if problem:
                from .common import BenchError

                raise BenchError(f"FLASH-IO's checkpoint is not the shape ckptio writes: {problem}")
        return info

    def cleanup(ctx: Context) -> list[str]:
        return [prefix(ctx) + f"ncmpi_plt_{kind}_0000.nc" for kind in ("cnt", "crn")]

    note = ("PnetCDF's FLASH-IO (Debian's source, 16^3 blocks): its own 'checkpoint time' (iput + wait_all into "
            "a CDF-5 file) + fsync of the file after it exits; its plot files are not counted")
    return Case(key, "PnetCDF FLASH-IO benchmark (Fortran)", "peer", note, write, None, lambda ctx: [checkpoint(ctx)],
                binary is not None, reason, {"reference": "flash-io"}, cleanup)


def header_bytes_note(data: Dataset) -> str:
    return (f"{data.nblocks} blocks ({', '.join(str(c) for _f, c in data.splits)} per rank) of {NXB}^3 float64 x "
            f"{len(data.names)} unknowns + the tree (lrefine, nodetype, gid, coordinates, blocksize, bndbox)")


def run(world, rank_counts: list[int], repeats: int, outdir: str, log, flash_binary: str | None, flash_reason: str,
        ior_binary: str | None, ior_transfer: int | None, maxblocks: int = MAXBLOCKS) -> dict[str, Any]:
    """Collective over ``world``: the FLASH-IO-shaped write at each rank count (benchmarks/writes.py: world ranks
    0..n-1, the others wait; reads only in the first round, every checkpoint library's data verified element by
    element). Returns {"maxblocks", "flash_io", "by_ranks": {n: {..., "cases": {case key: entry}}}}."""
    from . import writes

    def cases(data: Dataset, n: int, nreaders: int) -> list[Case]:
        return writes.write_cases(data, n, nreaders, ior_binary, ior_transfer,
                                  first=[flash_io_case(flash_binary, flash_reason)])

    by_ranks = writes.run(world, rank_counts, repeats, outdir, log, lambda n, rank: flash_dataset(n, rank, maxblocks),
                          cases, header_bytes_note)
    return {"maxblocks": maxblocks, "flash_io": flash_binary or flash_reason, "by_ranks": by_ranks}
