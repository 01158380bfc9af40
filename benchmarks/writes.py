"""Write-only sections on the first n ranks of the job, for each n of a list (issue 29's goals hold at 2 ranks,
one per core, and at 4): the data set and the cases are made per rank count, the ranks outside wait in a
sleeping barrier, every case runs ``repeats`` interleaved rounds and reads back (verified) in the first round only.
Used by the FLASH-IO comparison (benchmarks/flashio.py) and by the same-size write at fewer ranks
(benchmarks/run.py, ``--write-ranks``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import Case, Context
from .common import Dataset, on_first, readers_comm


def run(world, rank_counts: list[int], repeats: int, outdir: str, log,
        make_data: Callable[[int, int], Dataset], make_cases: Callable[[Dataset, int, int], list[Case]],
        describe: Callable[[Dataset], str]) -> dict[str, Any]:
    """Collective over ``world``. ``make_data(n, rank)``: the rank's data set; ``make_cases(data, n, readers)``:
    the cases. Returns {str(n): {"ranks", "total_bytes", "nblocks", "blocks_per_rank", "shape", "cases"}}."""
    from mpi4py import MPI

    from . import bandwidth

    def at(n: int, sub) -> dict[str, Any]:
        data = make_data(n, sub.Get_rank())
        readers, nreaders = readers_comm(sub, None)
        try:
            ctx = Context(sub, readers, data, outdir)
            log(f"writes on {n} ranks: {describe(data)}, {data.total_bytes / 2**20:.1f} MiB")
            cases = bandwidth.measure(ctx, make_cases(data, n, nreaders), repeats, log, reads="first")
            return {"ranks": n, "total_bytes": data.total_bytes, "nblocks": data.nblocks,
                    "blocks_per_rank": [c for _f, c in data.splits], "shape": describe(data), "cases": cases}
        finally:
            if readers != MPI.COMM_NULL:
                readers.Free()

    return {str(n): on_first(world, n, lambda sub, n=n: at(n, sub)) for n in rank_counts}


def write_cases(data: Dataset, n: int, nreaders: int, ior_binary: str | None, ior_transfer: int | None,
                first: list[Case] | None = None) -> list[Case]:
    """Every backend, every peer and the storage reference (write-only), after ``first``."""
    from .cases import adios2_case, ckptio_case, h5py_case, numpy_case, pnetcdf_case
    from .ior import pattern_for, reference_cases

    pattern = pattern_for(data.nblocks, len(data.names), [n, nreaders], ior_transfer)
    return [*(first or []), *(ckptio_case(backend) for backend in ("mpiio", "hdf5", "pnetcdf")),
            h5py_case(), pnetcdf_case(), numpy_case(), adios2_case(),
            *reference_cases(ior_binary, pattern, reads=False)]
