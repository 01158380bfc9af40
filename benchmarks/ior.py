"""The storage ceiling: IOR's MPI-IO shared-file pattern, with IOR itself when the machine has it, else a built-in
MPI-IO reference of the same pattern (mpi4py).

IOR is not in Debian's or PyPI's registries, so the project neither downloads nor builds it: the benchmark uses
``--ior PATH`` (``make bench IOR=PATH``), ``$IOR``, or ``ior`` on PATH (HPC sites have it as a module), and says
in one line when there is none. The pattern (IOR's ``-s`` segments, each holding every task's ``-b`` block in
rank order) is exactly the layout of a checkpoint of equal per-rank shares: one segment per variable, each
rank's contiguous piece of that variable at ``segment * segment_bytes + rank * block``. So IOR runs with
``-s`` = the variables, ``-b`` = one rank's piece of one variable (``-t`` the same unless ``--ior-transfer``
caps it), on the same rank count, with ``-e`` (``MPI_File_sync`` before close: the write ends durable, as
ckptio's does) and ``-k`` (the file stays for the read). Each round is one IOR process per operation (``-i 1``):
write; then the runner evicts the file from the page cache (benchmarks/pagecache.py) and runs the cold read, then
the hot read, on the restart's rank count (``-b`` = the segment over that count); the mean over rounds is
computed like IOR's own ``Mean(s)`` over ``-i`` repetitions, which could not evict between them. The reported
time is IOR's own (``Mean(s)``: open, transfers, fsync, close; not mpirun's start-up).
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from typing import Any

from .cases import Case, Context, ReadResult, _path
from .common import BLOCK_VAR_BYTES, BenchError, aligned_empty
from .external import run_job

GROUP = "reference"


@dataclass(frozen=True)
class Pattern:
    """IOR's shared-file pattern for one data set: ``segments`` (variables) of ``segment_bytes`` each."""

    segments: int
    segment_bytes: int  # divisible by every task count that writes or reads it (whole 32 KiB block-variables)
    transfer_cap: int | None = None  # -t at most this (None: one transfer per block)

    @property
    def total_bytes(self) -> int:
        return self.segments * self.segment_bytes

    def block(self, tasks: int) -> int:
        """IOR's ``-b`` on ``tasks`` tasks."""
        if self.segment_bytes % tasks:
            raise BenchError(f"IOR pattern: {self.segment_bytes} bytes per segment do not split over {tasks} tasks")
        return self.segment_bytes // tasks

    def transfer(self, tasks: int) -> int:
        """IOR's ``-t`` on ``tasks`` tasks: the whole block, or the largest divisor of it within the cap."""
        b = self.block(tasks)
        return b if not self.transfer_cap or self.transfer_cap >= b else math.gcd(b, self.transfer_cap)


def pattern_for(nblocks: int, nvars: int, task_counts: list[int], transfer_cap: int | None = None) -> Pattern:
    """The pattern closest to a data set of ``nvars`` variables of ``nblocks`` blocks (32 KiB per block and
    variable) that every count in ``task_counts`` can split evenly: the blocks rounded down to a multiple of
    their least common multiple (IOR gives every task the same ``-b``; the data set's own per-rank counts may
    differ by a block, FLASH-IO's by two)."""
    unit = math.lcm(*task_counts)
    blocks = max(unit, nblocks // unit * unit)
    return Pattern(nvars, blocks * BLOCK_VAR_BYTES, transfer_cap)


def find_ior(option: str | None) -> tuple[str | None, str]:
    """(IOR binary, '') or (None, why not): ``option`` ('none' disables), else ``$IOR``, else ``ior`` on PATH."""
    if option == "none":
        return None, "IOR disabled (--ior none)"
    given = option or os.environ.get("IOR")
    if given:
        path = shutil.which(given) or (given if os.access(given, os.X_OK) else None)
        return (path, "") if path else (None, f"IOR binary {given!r} is not an executable")
    path = shutil.which("ior")
    return (path, "") if path else (None, "no IOR on this machine (give IOR=/path/to/ior or put ior on PATH)")


def parse_summary(text: str) -> dict[str, dict[str, float]]:
    """IOR's "Summary of all tests" table (every IOR since 3.0): {operation: {"mean_s", "mean_mib_s"}}, by the
    header's column names (``Mean(s)``, ``Mean(MiB)``), so columns added by later versions do not matter."""
    lines = text.splitlines()
    out: dict[str, dict[str, float]] = {}
    for i, line in enumerate(lines):
        if not line.startswith("Summary of all tests"):
            continue
        header = next((h.split() for h in lines[i + 1:i + 3] if h.startswith("Operation")), None)
        if not header or "Mean(s)" not in header or "Mean(MiB)" not in header:
            raise BenchError("IOR output: the summary has no Operation/Mean(s)/Mean(MiB) header")
        for row in lines[i + 2:]:
            parts = row.split()
            if not parts or parts[0] not in ("write", "read"):
                break
            cells = dict(zip(header, parts, strict=False))
            out[parts[0]] = {"mean_s": float(cells["Mean(s)"]), "mean_mib_s": float(cells["Mean(MiB)"])}
    if not out:
        raise BenchError("IOR output has no 'Summary of all tests' rows: " + text[-800:])
    return out


def _readers_count(ctx: Context) -> int:
    """Collective over ctx.comm: how many ranks the restart reads on."""
    return ctx.comm.allreduce(1 if ctx.is_reader else 0)


def ior_argv(binary: str, operation: str, pattern: Pattern, tasks: int, path: str, collective: bool) -> list[str]:
    """One IOR run of ``operation`` ('write' or 'read') on ``tasks`` tasks (see the module docstring)."""
    argv = [binary, "-a", "MPIIO", "-w" if operation == "write" else "-r", "-k", "-i", "1",
            "-b", str(pattern.block(tasks)), "-t", str(pattern.transfer(tasks)), "-s", str(pattern.segments),
            "-o", path]
    if operation == "write":
        argv.append("-e")
    if collective:
        argv.append("-c")
    return argv


def ior_case(binary: str | None, reason: str, pattern: Pattern, collective: bool, reads: bool = True) -> Case:
    """IOR MPIIO on the case's communicator (write on all its ranks, reads on the restart's count); the time of
    each round is IOR's own. ``reads=False``: a write-only case."""
    kind = "collective" if collective else "independent"
    key = f"ior-{kind}"

    def path(ctx: Context) -> str:
        return _path(ctx, key, ".ior")

    def run(ctx: Context, operation: str, tasks: int) -> dict[str, Any]:
        assert binary is not None
        res = run_job(ctx.comm, tasks, ior_argv(binary, operation, pattern, tasks, path(ctx), collective))
        if res is None:
            return {}
        return {"seconds": parse_summary(res.stdout)[operation]["mean_s"], "bytes": pattern.total_bytes}

    def write(ctx: Context) -> dict[str, Any]:
        return run(ctx, "write", ctx.nprocs)

    def read(ctx: Context) -> ReadResult:
        return None, run(ctx, "read", _readers_count(ctx))

    label = f"IOR MPIIO {kind}" + (" (-c)" if collective else "")
    note = (f"IOR -a MPIIO{' -c' if collective else ''} -e -k, -s {pattern.segments} segments (variables) of "
            f"{pattern.segment_bytes / 2**20:.2f} MiB; -b/-t one rank's piece per variable; IOR's own Mean(s); "
            "cold read after eviction, on the restart's rank count")
    return Case(key, label, GROUP, note, write, read if reads else None, lambda ctx: [path(ctx)],
                binary is not None, reason, {"reference": "ior", "collective": collective,
                                             "bytes": pattern.total_bytes})


def mpiio_reference_case(pattern: Pattern, collective: bool, reads: bool = True) -> Case:
    """Without IOR: the same pattern with mpi4py (``File.Write_at``/``Write_at_all`` of each transfer from one
    reused 4096-aligned buffer, ``Sync``, ``Close``; reads into the same buffer on the restart's ranks), timed by
    the runner from open to close."""
    kind = "collective" if collective else "independent"
    key = f"mpiio-ref-{kind}"

    def path(ctx: Context) -> str:
        return _path(ctx, key, ".bin")

    def buffer(ctx: Context, nbytes: int):
        name = f"{key}/buffer/{nbytes}"
        if name not in ctx.cache:
            buf = aligned_empty(nbytes)
            buf[:] = 7
            ctx.cache[name] = buf
        return ctx.cache[name]

    def transfers(comm, fh, operation: str, buf) -> None:
        tasks, me = comm.Get_size(), comm.Get_rank()
        b, t = pattern.block(tasks), pattern.transfer(tasks)
        call = {("write", False): fh.Write_at, ("write", True): fh.Write_at_all,
                ("read", False): fh.Read_at, ("read", True): fh.Read_at_all}[(operation, collective)]
        for seg in range(pattern.segments):
            base = seg * pattern.segment_bytes + me * b
            for k in range(b // t):
                call(base + k * t, buf)

    def write(ctx: Context) -> dict[str, Any]:
        from mpi4py import MPI

        buf = buffer(ctx, pattern.transfer(ctx.nprocs))
        fh = MPI.File.Open(ctx.comm, path(ctx), MPI.MODE_WRONLY | MPI.MODE_CREATE)
        try:
            transfers(ctx.comm, fh, "write", buf)
            fh.Sync()
        finally:
            fh.Close()
        return {"bytes": pattern.total_bytes}

    def read(ctx: Context) -> ReadResult:
        from mpi4py import MPI

        if not ctx.is_reader:
            return None, {"bytes": pattern.total_bytes}
        buf = buffer(ctx, pattern.transfer(ctx.readers.Get_size()))
        fh = MPI.File.Open(ctx.readers, path(ctx), MPI.MODE_RDONLY)
        try:
            transfers(ctx.readers, fh, "read", buf)
        finally:
            fh.Close()
        return None, {"bytes": pattern.total_bytes}

    label = f"MPI-IO reference (mpi4py, IOR's pattern), {kind}"
    note = (f"no IOR: File.{'Write_at_all' if collective else 'Write_at'} of IOR's pattern ({pattern.segments} "
            f"segments of {pattern.segment_bytes / 2**20:.2f} MiB), Sync, Close; reads on the restart's ranks")
    return Case(key, label, GROUP, note, write, read if reads else None, lambda ctx: [path(ctx)], True, "",
                {"reference": "mpi4py", "collective": collective, "bytes": pattern.total_bytes})


def reference_cases(binary: str | None, pattern: Pattern, reads: bool = True) -> list[Case]:
    """IOR independent and collective when there is an IOR binary, else the built-in MPI-IO reference."""
    if binary:
        return [ior_case(binary, "", pattern, collective, reads) for collective in (False, True)]
    return [mpiio_reference_case(pattern, collective, reads) for collective in (False, True)]
