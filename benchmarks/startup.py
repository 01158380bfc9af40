"""Startup cost of ckptio per rank (issue 16, item 8): what an MPI job pays before its first checkpoint.

Per rank, at each rank count, under ``mpirun``:

* **time**: ``import ckptio``, then the first calls (``ckptio.latest`` of an empty directory and a tiny
  ``create``/``write``/``close`` with the mpiio backend), wall seconds (max over ranks, median over repeats);
* **RSS delta**: ``VmRSS`` after the first call minus before ``import ckptio`` (mpi4py and MPI are already loaded);
* **metadata syscalls**: ``openat``/``open`` and the stat family (``stat``, ``lstat``, ``fstat``, ``newfstatat``,
  ``statx``, ``access``...) counted by ``strace -f -c`` per rank, for the whole process with ckptio and without it
  (``python`` + ``from mpi4py import MPI`` + the same barrier), and the difference (ckptio's share). Without
  ``strace`` on the PATH (``apt-get install strace``) these columns are skipped with a message. strace runs in
  separate jobs, so it does not slow the timed ones.

Usage (the Open MPI variables of the Makefile exported, see ``benchmarks/README.md``)::

    python -m benchmarks.startup --ranks 1,4 --repeats 5          # prints a Markdown table and one JSON line
    python -m benchmarks.startup --ranks 1,4 --json out.json

The same figures for a C program with the embedded interpreter (the C/Fortran bindings) when
``build/fortran/ckptio_test_c`` is built (``--c-program``): its ``startup`` mode times ``ckptio_initialize``
(interpreter, numpy, mpi4py, ckptio) as "import" and the same first calls through the C API; its baseline is the
program with MPI only, so "ckptio" there includes the interpreter itself.

Which libraries ``import ckptio`` loaded is printed too (h5py, pnetcdf, netCDF4, matplotlib, tqdm, xarray).
The child (``--child``) uses only the standard library before it imports mpi4py, so it measures ckptio, not the
harness.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HEAVY = ("h5py", "pnetcdf", "netCDF4", "matplotlib", "tqdm", "xarray")
OPEN_CALLS = ("open", "openat", "openat2", "creat")
STAT_CALLS = ("stat", "lstat", "fstat", "newfstatat", "fstatat64", "statx", "stat64", "lstat64", "fstat64",
              "access", "faccessat", "faccessat2", "readlink", "readlinkat")
RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def child(mode: str, workdir: str, out: str) -> None:
    """One rank of the measured job (every rank runs it; collective over COMM_WORLD)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    comm.Barrier()
    rss0 = _rss_kib()
    t0 = time.perf_counter()
    record: dict = {"rank": comm.rank}
    if mode == "ckptio":
        import ckptio

        t1 = time.perf_counter()
        empty = os.path.join(workdir, f"empty{comm.size}")
        ckptio.latest(empty)
        import numpy as np

        with ckptio.create(os.path.join(workdir, f"tiny{comm.size}"), comm, backend="mpiio") as ck:
            ck.write("x", np.full(4, comm.rank, dtype="f8"), offset=(4 * comm.rank,), global_shape=(4 * comm.size,))
        t2 = time.perf_counter()
        record.update(import_s=t1 - t0, first_call_s=t2 - t1, total_s=t2 - t0, rss_delta_kib=_rss_kib() - rss0,
                      heavy_loaded=[m for m in HEAVY if m in sys.modules])
    rows = comm.gather(record, root=0)
    comm.Barrier()
    if comm.rank == 0 and out:
        with open(out, "w") as f:
            json.dump(rows, f)


def _mpirun(nprocs: int) -> list[str]:
    return ["mpirun", "-n", str(nprocs)]


def _child_cmd(mode: str, workdir: str, out: str) -> list[str]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, "--workdir", workdir]
    return [*cmd, "--out", out] if out else cmd


def _remove_tiny(workdir: str) -> None:
    """The tiny checkpoints of a previous job (``create`` does not overwrite a checkpoint by default)."""
    for name in os.listdir(workdir):
        path = os.path.join(workdir, name)
        if name.startswith("tiny"):
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)


def _job_cmd(program: str | None, mode: str, workdir: str, out: str) -> list[str]:
    """One rank's command: this file's child (program None), or the C bindings' test program in its
    ``startup`` mode (the embedded interpreter: ckptio_initialize, then the same first calls)."""
    if program is None:
        return _child_cmd(mode, workdir, out)
    return [program, "startup", workdir, *(["baseline"] if mode == "baseline" else [])]


_STARTUP_LINE = re.compile(r"^STARTUP (\d+) init_s ([\d.]+) first_call_s ([\d.]+) total_s ([\d.]+) "
                           r"rss_delta_kib (-?\d+)$", re.M)


def timed_run(nprocs: int, workdir: str, timeout: float, program: str | None = None) -> list[dict]:
    """Per rank: import_s (C: ckptio_initialize), first_call_s, total_s, rss_delta_kib, heavy_loaded."""
    out = os.path.join(workdir, f"time{nprocs}.json")
    _remove_tiny(workdir)
    cmd = [*_mpirun(nprocs), *_job_cmd(program, "ckptio", workdir, out)]
    proc = subprocess.run(cmd, timeout=timeout, capture_output=True, text=True)
    if proc.returncode != 0:  # the job's own output says why (it failed silently in full test runs under load)
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\n"
                           f"stderr:\n{proc.stderr[-3000:]}")
    if program is None:
        with open(out) as f:
            return json.load(f)
    rows = [{"rank": int(m[0]), "import_s": float(m[1]), "first_call_s": float(m[2]), "total_s": float(m[3]),
             "rss_delta_kib": int(m[4]), "heavy_loaded": []} for m in _STARTUP_LINE.findall(proc.stdout)]
    if len(rows) != nprocs:
        raise RuntimeError(f"{program}: expected {nprocs} STARTUP lines\n{proc.stdout}\n{proc.stderr}")
    return rows


def parse_strace_summary(text: str) -> dict[str, int]:
    """``strace -c`` table -> {syscall: calls}."""
    calls: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5 and re.fullmatch(r"[0-9.]+", fields[0]) and fields[-1] != "total":
            try:
                calls[fields[-1]] = calls.get(fields[-1], 0) + int(fields[3])
            except ValueError:
                continue
    return calls


def strace_run(nprocs: int, mode: str, workdir: str, timeout: float, program: str | None = None
               ) -> list[dict[str, int]]:
    """Per rank: {"open": n, "stat": n} for the whole process (strace -f -c, one output file per rank)."""
    sdir = tempfile.mkdtemp(prefix=f"strace-{mode}{nprocs}-", dir=workdir)
    _remove_tiny(workdir)
    rank = "${" + ":-${".join(RANK_VARS) + ":-0" + "}" * len(RANK_VARS)
    inner = shlex.join(_job_cmd(program, mode, workdir, ""))
    script = f'exec strace -f -qq -c -o "{sdir}/rank.{rank}" {inner}'
    subprocess.run([*_mpirun(nprocs), "sh", "-c", script], check=True, timeout=timeout, stdout=subprocess.DEVNULL)
    result = []
    for name in sorted(os.listdir(sdir)):
        with open(os.path.join(sdir, name)) as f:
            calls = parse_strace_summary(f.read())
        result.append({"open": sum(calls.get(c, 0) for c in OPEN_CALLS),
                       "stat": sum(calls.get(c, 0) for c in STAT_CALLS)})
    shutil.rmtree(sdir, ignore_errors=True)
    return result


def measure(ranks: list[int], repeats: int, workdir: str, timeout: float, program: str | None = None) -> dict:
    """Every figure, Python callers first, then (with ``program``) the C program with the embedded interpreter."""
    results: dict = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "load_before": os.getloadavg(),
                     "python": sys.version.split()[0], "cpus": os.cpu_count(), "by_ranks": {}}
    callers: list[tuple[str, str | None]] = [("python", None)] + ([("C (embedded)", program)] if program else [])
    have_strace = shutil.which("strace") is not None
    if not have_strace:
        print("strace not found (apt-get install strace): skipping the syscall columns", file=sys.stderr)
    for (caller, prog), n in ((c, n) for c in callers for n in ranks):
        os.makedirs(os.path.join(workdir, f"empty{n}"), exist_ok=True)  # what the child's ckptio.latest scans
        runs = [timed_run(n, workdir, timeout, prog) for _ in range(repeats)]
        entry = {key: statistics.median(max(r[key] for r in run) for run in runs)
                 for key in ("import_s", "first_call_s", "total_s")}
        entry["rss_delta_mib"] = statistics.median(max(r["rss_delta_kib"] for r in run) for run in runs) / 1024
        entry["heavy_loaded"] = sorted({m for run in runs for r in run for m in r["heavy_loaded"]})
        entry["caller"], entry["ranks"] = caller, n
        if have_strace:
            full = strace_run(n, "ckptio", workdir, timeout, prog)
            base = strace_run(n, "baseline", workdir, timeout, prog)
            entry["open_per_rank"] = statistics.median(r["open"] for r in full)
            entry["stat_per_rank"] = statistics.median(r["stat"] for r in full)
            entry["open_ckptio_per_rank"] = entry["open_per_rank"] - statistics.median(r["open"] for r in base)
            entry["stat_ckptio_per_rank"] = entry["stat_per_rank"] - statistics.median(r["stat"] for r in base)
        results["by_ranks"][f"{caller}/{n}"] = entry
    results["load_after"] = os.getloadavg()
    return results


def table(results: dict) -> str:
    lines = ["| caller | ranks | import ckptio | first calls | total | RSS delta | openat (all / ckptio) | stat "
             "family (all / ckptio) | heavy modules loaded |", "|---|---|---|---|---|---|---|---|---|"]
    for e in results["by_ranks"].values():
        heavy = "n/a" if e["caller"] != "python" else (", ".join(e["heavy_loaded"]) or "none")
        sys_cols = (f"{e['open_per_rank']:.0f} / {e['open_ckptio_per_rank']:.0f} | "
                    f"{e['stat_per_rank']:.0f} / {e['stat_ckptio_per_rank']:.0f}") if "open_per_rank" in e else "- | -"
        lines.append(f"| {e['caller']} | {e['ranks']} | {e['import_s']:.3f} s | {e['first_call_s']:.3f} s | "
                     f"{e['total_s']:.3f} s | {e['rss_delta_mib']:.1f} MiB | {sys_cols} | {heavy} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", choices=("ckptio", "baseline"), help=argparse.SUPPRESS)
    p.add_argument("--out", default="", help=argparse.SUPPRESS)
    p.add_argument("--workdir", default=None, help="scratch directory (default: a new one under $TMPDIR)")
    p.add_argument("--ranks", default="1,4", help="rank counts, comma-separated (default 1,4)")
    p.add_argument("--repeats", type=int, default=5, help="timed jobs per rank count (median reported)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per mpirun job")
    p.add_argument("--json", default=None, help="also write the results to this file")
    default_c = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "fortran",
                             "ckptio_test_c")
    p.add_argument("--c-program", default=default_c if os.path.exists(default_c) else None,
                   help="the C bindings' test program, measured too (embedded interpreter; default: "
                        "build/fortran/ckptio_test_c if built; 'none' to skip)")
    a = p.parse_args(argv)
    if a.child:
        child(a.child, a.workdir, a.out)
        return
    workdir = a.workdir or tempfile.mkdtemp(prefix="ckptio-startup-")
    os.makedirs(workdir, exist_ok=True)
    program = None if a.c_program in (None, "none") else os.path.abspath(a.c_program)
    results = measure([int(x) for x in a.ranks.split(",")], a.repeats, workdir, a.timeout, program)
    print(table(results))
    print(json.dumps(results))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if a.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
