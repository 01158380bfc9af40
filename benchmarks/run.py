"""ckptio benchmarks (issue #7). Run under MPI::

    mpirun -n 4 python -m benchmarks.run [--size 2G] [--repeats 3] [--plot] [--results bench_results]
    mpirun -n 2 python -m benchmarks.run --quick            # seconds: the smoke test's run

In one run it measures raw storage speed, the storage reference (IOR's MPIIO independent and collective runs
when the machine has IOR, else a built-in MPI-IO reference of the same pattern), the peer libraries used
directly (h5py, PnetCDF, np.save, ADIOS2), every ckptio backend (with and without compression; async/staged
modes when ckptio offers them) with the time the application is blocked per mode; PnetCDF's FLASH-IO benchmark
against every backend writing its checkpoint shape (``--flash-ranks``); the restart on several reader counts,
allocating and into ``out=`` (``--restart-ranks``); ``ckptio inspect --verify`` against a cold sequential read;
the compression break-even, a small-variable benchmark, checksum cost, and the ``ckptio plan`` per-OST model
of the FLASH case. It writes ``results.json`` and ``results.md`` (and PNGs with ``--plot``) into ``--results``
and ends with issue 29's goal table (benchmarks/goals.py). See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from .common import readers_comm, size_arg

SECTIONS = ("bandwidth", "writes", "flash", "restart", "verify", "compression", "small", "checksum", "plan")
QUICK_FLASH_MAXBLOCKS = 10  # --quick without --flash-io: 8-10 blocks per rank instead of FLASH-IO's 80-82

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = {"size": 16 << 20, "repeats": 1, "small_vars": 500}
FLASH_PLAN = {"ranks": 7620, "bytes": "189G"}
QUICK_PLAN = {"ranks": 762, "bytes": "19G"}  # the full FLASH case takes ~15 s of planning: too slow for --quick


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=size_arg, default=None, help="total checkpoint size (default 2G; --quick 16M)")
    p.add_argument("--variables", type=int, default=8, help="FLASH-like variables per block (default 8)")
    p.add_argument("--repeats", type=int, default=None, help="rounds per case (default 4; --quick 1; an even number: "
                                                                "benchmarks/common.py round_order)")
    p.add_argument("--outdir", default=None,
                   help="scratch directory for the checkpoint files (default: $TMPDIR, else bench_results/scratch "
                        "in the repository); a private subdirectory is created and removed")
    p.add_argument("--fast-dir", default=None,
                   help="fast tier for the staged mode's stage_dir and the compression break-even's high-bandwidth "
                        "regime (default /dev/shm when writable, else the scratch directory); a private "
                        "subdirectory is created and removed")
    p.add_argument("--results", default="bench_results", help="where results.json/.md and PNGs go")
    p.add_argument("--plot", action="store_true", help="also write PNG plots into --results")
    p.add_argument("--quick", action="store_true", help="tiny sizes, 1 repeat (the smoke test)")
    p.add_argument("--small-vars", type=int, default=None, help="small-variable count (default 10000; quick 500)")
    p.add_argument("--small-repeats", type=int, default=None,
                   help="rounds of the small-variable benchmark (default: --repeats; netCDF4 alone takes minutes per "
                        "round at 10,000 variables)")
    p.add_argument("--small-var-bytes", type=size_arg, default=1024, help="bytes per small variable (default 1K)")
    p.add_argument("--compression", default="zstd+shuffle", help="codec of the compressed ckptio case")
    p.add_argument("--readers", type=int, default=None, help="restart ranks (default N-1; N when N=1)")
    p.add_argument("--only", default=None, help="comma-separated case keys to run (default all), e.g. raw,ckptio-mpiio")
    p.add_argument("--skip", default="", help="comma-separated sections to skip: " + ",".join(SECTIONS))
    p.add_argument("--ior", default=None,
                   help="IOR binary, the storage ceiling (default $IOR, else `ior` on PATH; 'none': the built-in "
                        "MPI-IO reference of the same pattern)")
    p.add_argument("--ior-transfer", type=size_arg, default=None,
                   help="cap IOR's -t (default: one rank's whole piece of one variable per transfer)")
    p.add_argument("--flash-io", default=None,
                   help="PnetCDF's FLASH-IO binary (make bench builds it: ci/build_flash_io.sh); without it the "
                        "FLASH-IO case is reported skipped and every backend still writes its shape")
    p.add_argument("--flash-ranks", default=None,
                   help="rank counts of the FLASH-IO-shaped write (default 2,N; at most N)")
    p.add_argument("--write-ranks", default=None,
                   help="fewer writer ranks at which the --size write is measured too (default 2 when N > 2)")
    p.add_argument("--restart-ranks", default=None,
                   help="reader counts of the restart section (default N/2,N-1, e.g. 2,3 for 4 writers)")
    args = p.parse_args(argv)
    args.size = args.size or (QUICK["size"] if args.quick else 2 << 30)
    args.repeats = args.repeats or (QUICK["repeats"] if args.quick else 4)
    args.small_vars = args.small_vars or (QUICK["small_vars"] if args.quick else 10_000)
    args.small_repeats = args.small_repeats or args.repeats
    return args


def rank_list(text: str | None, default: list[int], nprocs: int) -> list[int]:
    """Sorted distinct counts from ``text`` ("2,4") or ``default``, each within 1..nprocs."""
    values = [int(x) for x in text.split(",") if x] if text else default
    return sorted({min(max(1, v), nprocs) for v in values})


def scratch_dir(args: argparse.Namespace, comm) -> str:
    """Rank 0 makes a private scratch directory; every rank gets its name."""
    name = None
    if comm.Get_rank() == 0:
        base = args.outdir or os.environ.get("TMPDIR") or os.path.join(REPO, "bench_results", "scratch")
        os.makedirs(base, exist_ok=True)
        name = tempfile.mkdtemp(prefix="ckptio-bench-", dir=base)
    return comm.bcast(name, root=0)


def fast_dir(args: argparse.Namespace, comm, fallback: str) -> str:
    """Rank 0 makes a private directory on the fast tier (tmpfs); every rank gets its name."""
    name = None
    if comm.Get_rank() == 0:
        base = args.fast_dir or ("/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
        name = tempfile.mkdtemp(prefix="ckptio-bench-fast-", dir=base) if base else os.path.join(fallback, "fast")
        os.makedirs(name, exist_ok=True)
    return comm.bcast(name, root=0)


def environment(comm) -> dict[str, Any]:
    """What ran: MPI library, Python packages, ckptio backends, machine."""
    import ckptio.backends as cb
    import numpy as np
    from mpi4py import MPI

    versions = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("mpi4py", "h5py", "pnetcdf", "netCDF4", "adios2", "zstandard", "xxhash"):
        try:
            versions[mod] = getattr(__import__(mod), "__version__", "?")
        except Exception as exc:
            versions[mod] = f"unavailable ({type(exc).__name__})"
    libs = {}
    for lib, get in (("hdf5", lambda: __import__("h5py").version.hdf5_version),
                     ("pnetcdf", lambda: __import__("pnetcdf").inq_clibvers()),
                     ("netcdf-c", lambda: __import__("netCDF4").__netcdf4libversion__)):
        try:
            libs[lib] = get()
        except Exception as exc:
            libs[lib] = f"unavailable ({type(exc).__name__})"
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"mpi": MPI.Get_library_version().replace("\x00", "").split("\n")[0].strip().rstrip(","),
            "io_component": os.environ.get("OMPI_MCA_io", "default (OMPIO in Open MPI 4.x)"),
            "machine": f"{os.cpu_count()} cores, {total / 2**30:.0f} GiB, {platform.machine()}",
            "cpu": cpu_model(), "kernel": f"{platform.system()} {platform.release()}",
            "loadavg_start": os.getloadavg(), "libraries": libs,
            "hostname": platform.node(), "versions": versions,
            "ckptio_backends": cb.available_backends(), "ckptio_backends_missing": dict(cb.MISSING)}


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def plan_section(quick: bool) -> dict[str, Any]:
    """``ckptio plan`` for the FLASH case (rank 0 only): the model's result and its text summary."""
    from ckptio.tools.simulate import PlanScenario, format_comparison, parse_size, simulate

    sc = QUICK_PLAN if quick else FLASH_PLAN
    ranks = sc["ranks"]
    scenario = PlanScenario(ranks=ranks, nbytes=parse_size(sc["bytes"]), stripe_count=min(ranks, 80),
                            stripe_size=1 << 20)
    t0 = time.perf_counter()
    result = simulate(scenario)
    note = "" if not quick else "--quick: a 1/10 scale FLASH case (the full one takes ~15 s to plan)"
    return {"ranks": ranks, "bytes": sc["bytes"], "seconds": time.perf_counter() - t0, "note": note,
            "text": format_comparison(result), "result": result}


def main(argv: Sequence[str] | None = None) -> int:
    from mpi4py import MPI

    from . import (
        bandwidth,
        cases,
        checksum,
        compression,
        flashio,
        goals,
        report,
        restart,
        smallvars,
        verifybench,
        writes,
    )
    from .common import make_dataset
    from .ior import find_ior, pattern_for, reference_cases

    args = parse_args(argv)
    comm = MPI.COMM_WORLD
    rank, nprocs = comm.Get_rank(), comm.Get_size()

    def log(msg: str) -> None:
        if rank == 0:
            print(msg, flush=True)

    skip = {s for s in args.skip.split(",") if s}
    outdir = scratch_dir(args, comm)
    fastdir = fast_dir(args, comm, outdir)
    readers, nreaders = readers_comm(comm, args.readers)
    flash_ranks = rank_list(args.flash_ranks, [2, nprocs], nprocs)
    write_ranks = [n for n in rank_list(args.write_ranks, [2], nprocs) if n < nprocs]  # N: the bandwidth section
    restart_ranks = rank_list(args.restart_ranks, [max(1, nprocs // 2), max(1, nprocs - 1)], nprocs)
    ior_binary, ior_reason = find_ior(args.ior)
    flash_binary, flash_reason = flashio.find_flash_io(args.flash_io)
    reference = (f"IOR ({ior_binary})" if ior_binary else
                 f"{ior_reason}: built-in MPI-IO reference (mpi4py, IOR's pattern)")
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    try:
        t0 = time.perf_counter()
        data = make_dataset(args.size, args.variables, nprocs, rank)
        comm.Barrier()
        log(f"ckptio benchmarks: {nprocs} ranks, restart on {nreaders}, {data.total_bytes / 2**30:.3f} GiB "
            f"({data.nblocks} blocks x {args.variables} vars), {args.repeats} repeat(s), scratch {outdir} "
            f"(data generated in {time.perf_counter() - t0:.1f} s)")
        log(f"storage reference: {reference}")
        ctx = cases.Context(comm, readers, data, outdir, stage_base=fastdir)
        pattern = pattern_for(data.nblocks, args.variables, [nprocs, nreaders, *restart_ranks], args.ior_transfer)
        doc: dict[str, Any] = {
            "started": started, "argv": sys.argv[1:],
            "config": {"nprocs": nprocs, "readers": nreaders, "total_bytes": data.total_bytes,
                       "nblocks": data.nblocks, "nvars": args.variables, "block": "16^3 float64 (32 KiB/var)",
                       "repeats": args.repeats, "quick": args.quick, "outdir": outdir,
                       "read_decomposition": "ckptio.tools.simulate.split_shifted (3/4, 5/4 of the mean share)",
                       "compression": args.compression, "fast_dir": fastdir,
                       "fast_dir_fs": fs_type(fastdir), "outdir_fs": fs_type(outdir),
                       "reference": reference, "ior": ior_binary, "flash_io": flash_binary or flash_reason,
                       "flash_ranks": flash_ranks, "restart_ranks": restart_ranks, "write_ranks": write_ranks,
                       "ior_pattern": {"segments": pattern.segments, "segment_bytes": pattern.segment_bytes,
                                       "transfer_cap": pattern.transfer_cap}},
            "environment": environment(comm), "modes": cases.async_support(),
        }
        case_list = cases.all_cases(args.compression)
        case_list[2:2] = reference_cases(ior_binary, pattern)  # after raw and raw-fill
        if args.only:
            keep = set(args.only.split(","))
            case_list = [c for c in case_list if c.key in keep]
        bw = {} if "bandwidth" in skip else bandwidth.measure(ctx, case_list, args.repeats, log)
        # the section's buffers and out= arrays (rank 0's raw-fill one alone is --size) go before the next ones:
        # kept, they left only 1-4 GiB for the page cache on the 24 GiB VM, and "hot" restart reads found their
        # file 17-54% resident (every later user of a buffer makes it again)
        ctx.cache.clear()
        report.add_ratios(bw)
        doc["bandwidth"] = bw
        doc["page_cache"] = page_cache_doc(bw)
        doc["overhead"] = report.overhead(bw)
        if "writes" not in skip and write_ranks:
            log(f"writes of the same {data.total_bytes / 2**30:.2f} GiB on {write_ranks} ranks")
            doc["writes"] = writes.run(
                comm, write_ranks, args.repeats, outdir, log,
                lambda n, r: make_dataset(args.size, args.variables, n, r),
                lambda d, n, nr: writes.write_cases(d, n, nr, ior_binary, args.ior_transfer),
                lambda d: f"{d.nblocks} blocks of 16^3 float64 x {len(d.names)} variables")
        if "flash" not in skip:
            log(f"FLASH-IO shape: ranks {flash_ranks}; FLASH-IO binary: {flash_binary or flash_reason}")
            doc["flash"] = flashio.run(comm, flash_ranks, args.repeats, outdir, log, flash_binary, flash_reason,
                                       ior_binary, args.ior_transfer,
                                       # --quick scales the shape down, unless FLASH-IO runs: its shape is built in
                                       QUICK_FLASH_MAXBLOCKS if args.quick and not flash_binary else flashio.MAXBLOCKS)
        if "restart" not in skip:
            log(f"restart: {nprocs} -> {restart_ranks} ranks, allocating and into out=, h5py, reference read")
            ref_case = reference_cases(ior_binary, pattern)[0]  # the independent one
            doc["restart"] = restart.run_counts(comm, data, outdir, restart_ranks, ref_case, args.repeats, log)
        if "verify" not in skip:
            log("verify: ckptio inspect --verify against a cold sequential read, one process")
            doc["verify"] = verifybench.run(comm, ctx, args.repeats, log)
        if "compression" not in skip:
            log(f"compression break-even: {args.compression} throughput; ckptio mpiio writes on {fastdir}")
            plain, comp = cases.ckptio_case("mpiio"), cases.ckptio_case("mpiio", args.compression)
            doc["compression"] = {"cases": [plain.key, comp.key],
                                  "throughput": compression.throughput(comm, data, args.compression, args.repeats)}
            if plain.available and comp.available:
                doc["compression"]["tmpfs"] = compression.fast_tier_writes(ctx, [plain, comp], args.repeats,
                                                                           fastdir, log)
            doc["compression"].update(compression.analyse(doc["compression"], bw, nprocs))
        if "small" not in skip:
            log(f"small variables: {args.small_vars} x {args.small_var_bytes} B")
            doc["small_variables"] = smallvars.run(comm, readers, outdir, args.small_vars, args.small_var_bytes,
                                                   args.small_repeats, doc["environment"]["ckptio_backends"], log)
        if "checksum" not in skip:
            doc["checksum"] = checksum.run(comm, data, args.repeats)
        del data, ctx
        if rank == 0:
            if "plan" not in skip:
                log(f"ckptio plan: {FLASH_PLAN if not args.quick else QUICK_PLAN}")
                doc["plan"] = plan_section(args.quick)
            doc["environment"]["loadavg_end"] = os.getloadavg()
            doc["environment"]["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
            doc["targets"] = report.targets(doc)
            doc["goals"] = goals.goals(doc)
            paths = report.write_results(doc, args.results, args.plot)
            print(report.markdown(doc))
            print(goals.console(doc["goals"]))
            log(f"results: {paths['json']}, {paths['markdown']}" +
                (f", plots: {', '.join(doc.get('plots', []))}" if args.plot else ""))
        comm.Barrier()
    finally:
        if readers != MPI.COMM_NULL:
            readers.Free()
        if rank == 0:
            shutil.rmtree(outdir, ignore_errors=True)
            shutil.rmtree(fastdir, ignore_errors=True)
    return 0


def fs_type(path: str) -> str:
    """File system type and device of the mount holding ``path`` (from /proc/mounts), e.g. 'ext4 on /dev/vda'."""
    best, found = "", "unknown"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, kind = line.split()[:3]
                real = os.path.realpath(path)
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, found = mnt, f"{kind} on {dev} (mounted at {mnt})"
    except OSError:
        pass
    return found


def page_cache_doc(bw: dict[str, Any]) -> dict[str, Any]:
    """How the page cache was controlled and what mincore saw."""
    before = [x for e in bw.values() for x in e.get("resident_before_cold_read", [])]
    after = [x for e in bw.values() for x in e.get("resident_after_write", [])]
    return {"method": "writes end with fsync (ckptio: its own sync + commit; peers: close, then fsync of every "
                      "file); before each cold read every file of the case gets fdatasync + "
                      "posix_fadvise(POSIX_FADV_DONTNEED), checked with mmap+mincore; the hot read follows "
                      "the cold one without eviction.",
            "max_resident_before_cold_read": max(before) if before else None,
            "min_resident_after_write": min(after) if after else None}


if __name__ == "__main__":
    sys.exit(main())
