"""ckptio's fixed cost per checkpoint against the libraries it wraps (issue 29: hdf5/pnetcdf writes no slower
than direct h5py/PnetCDF), phase by phase.

Every rank of ``mpirun -n N`` writes its part of FLASH-IO's checkpoint shape (:func:`benchmarks.flashio
.flash_dataset`: 24 unknowns of 16^3 blocks and the tree variables) with direct PnetCDF and direct h5py (the cases
of ``make bench``, :mod:`benchmarks.cases`, each ending with an ``fsync``) and with ckptio's pnetcdf, hdf5 and mpiio
backends (``cases.ckptio_case``), the five writers interleaved in every round, a warm-up round first (not counted).
Rank 0 prints, per writer, the mean and median time (the slowest rank's, barrier to barrier), ckptio's ratio to the
direct library (direct time / ckptio time: 1.0 is level, below 1 slower) and ckptio's own phases (``Writer.stats``,
max over ranks, mean over rounds): ``prepare`` (checksums), ``declare`` (including ``prepare``: the plan every rank
agrees on), ``open``, ``write`` and ``commit`` (the index and every commit step). The libraries write at the same
speed under ckptio and directly, so the difference of the totals is ckptio's fixed cost.

Usage (the Open MPI variables of the Makefile exported, see ``benchmarks/README.md``)::

    mpirun -n 2 .venv/bin/python -m benchmarks.fixed_cost --rounds 15 --outdir /var/tmp/fixed_cost
    mpirun -n 2 .venv/bin/python -m benchmarks.fixed_cost --maxblocks 2    # a tiny checkpoint: the cost alone

Collective: every rank runs every writer; only rank 0 prints and removes the writers' files (none other).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict

from benchmarks import cases
from benchmarks.flashio import MAXBLOCKS, flash_dataset

PHASES = ("prepare", "declare", "open", "write", "commit")
DIRECT = {"ckptio-pnetcdf": "direct-pnetcdf", "ckptio-hdf5": "direct-h5py"}  # ckptio writer -> its library


def measure(comm, outdir: str, rounds: int, maxblocks: int) -> dict[str, dict[str, list[float]]]:
    """Collective: ``rounds`` interleaved rounds (after one warm-up) of every writer -> writer -> {"time": [...],
    phase: [...]} (seconds; meaningful on rank 0, which removes each writer's file after it)."""
    data = flash_dataset(comm.Get_size(), comm.Get_rank(), maxblocks)
    ctx = cases.Context(comm, comm, data, outdir)
    writers: dict[str, cases.Case] = {  # the cases of make bench (ckptio's return Writer.stats)
        "direct-pnetcdf": cases.pnetcdf_case(), "ckptio-pnetcdf": cases.ckptio_case("pnetcdf"),
        "direct-h5py": cases.h5py_case(), "ckptio-hdf5": cases.ckptio_case("hdf5"),
        "ckptio-mpiio": cases.ckptio_case("mpiio")}
    samples: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in range(rounds + 1):
        for key, case in writers.items():
            comm.Barrier()
            t = time.perf_counter()
            seconds = case.write(ctx).get("stats", {}).get("seconds", {})
            comm.Barrier()
            if r:  # round 0 warms up
                samples[key]["time"].append(time.perf_counter() - t)
                for phase in PHASES:
                    if phase in seconds:
                        samples[key][phase].append(seconds[phase])
            if comm.Get_rank() == 0:  # the case's own files only: --outdir may hold anything else
                for path in case.paths(ctx) + case.cleanup(ctx):
                    if os.path.exists(path):
                        os.remove(path)
            comm.Barrier()
    return samples


def table(samples: dict[str, dict[str, list[float]]]) -> list[str]:
    """Local: the Markdown table of :func:`measure`'s samples (milliseconds)."""
    ms = 1e3
    lines = ["| writer | mean ms | median ms | direct / ckptio (mean) | ckptio phases, mean ms: "
             + " / ".join(PHASES) + " |", "|---|---|---|---|---|"]
    for key, got in samples.items():
        times = got["time"]
        ratio = ""
        if key in DIRECT:
            ratio = f"{statistics.mean(samples[DIRECT[key]]['time']) / statistics.mean(times):.2f}"
        phases = " / ".join(f"{ms * statistics.mean(got[p]):.1f}" if got.get(p) else "-" for p in PHASES)
        lines.append(f"| {key} | {ms * statistics.mean(times):.1f} | {ms * statistics.median(times):.1f} | {ratio} | "
                     f"{phases if key.startswith('ckptio') else ''} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds after the warm-up (default 15)")
    parser.add_argument("--maxblocks", type=int, default=MAXBLOCKS,
                        help=f"FLASH-IO's MAXBLOCKS ({MAXBLOCKS}: 80-82 blocks per rank); 2: a tiny checkpoint")
    parser.add_argument("--outdir", default=os.path.join(os.environ.get("TMPDIR", "/var/tmp"), "ckptio_fixed_cost"),
                        help="scratch directory (each writer's file removed after every round, nothing else)")
    args = parser.parse_args(argv)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 0:
        os.makedirs(args.outdir, exist_ok=True)
    comm.Barrier()
    samples = measure(comm, args.outdir, args.rounds, args.maxblocks)
    if comm.Get_rank() == 0:
        print(f"FLASH-IO shape, MAXBLOCKS={args.maxblocks}, {comm.Get_size()} ranks, {args.rounds} rounds, "
              f"{args.outdir}")
        print("\n".join(table(samples)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
