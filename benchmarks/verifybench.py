"""``ckptio inspect --verify`` against a cold sequential read of the same file in one process (issue 29).

A native checkpoint of the run's data set, written once by every rank; then ``repeats`` rounds, each of these
cold reads, every one after evicting the file, in the round's order (:func:`benchmarks.common.round_order`):
sequential read of the whole file by rank 0 alone (``os.readv`` of 16 MiB pieces into one reused 4096-aligned
buffer: the storage's speed for one reader); ``ckptio inspect --verify --json FILE`` by rank 0 alone (the
command's own code, ``ckptio.tools.cli.main``, in this process: no interpreter start-up; exit status 0 required);
under MPI, when ckptio offers a collective verification (:func:`parallel_verifier`), the same file verified by
1, 2 and N ranks (otherwise reported skipped, with what was looked for). The other ranks wait in a sleeping
barrier. The first version read, then verified, in every round: on a VM whose cold reads alternate between fast
and slow (common.round_order), one of the two got every slow turn.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
from collections.abc import Callable
from typing import Any

from .cases import Context, ckptio_case
from .common import BenchError, aligned_empty, on_first, round_order, time_summary, timed
from .pagecache import evict, remove, resident_fraction

CHUNK = 16 << 20
PARALLEL_NAMES = ("verify_parallel", "verify_collective", "verify_checkpoint")


def parallel_verifier() -> tuple[str, Callable[..., Any] | None]:
    """(name, function) of a collective verification ckptio offers (``ckptio.verify.NAME(path, comm)`` for a
    NAME of PARALLEL_NAMES), else (what was looked for, None)."""
    import ckptio.verify as verify

    for name in PARALLEL_NAMES:
        fn = getattr(verify, name, None)
        if callable(fn) and "comm" in inspect.signature(fn).parameters:
            return f"ckptio.verify.{name}", fn
    return "ckptio.verify." + "/".join(PARALLEL_NAMES) + "(path, comm)", None


def clean(result: Any) -> None:
    """BenchError unless a parallel verification's result (a list of problems, or an object with ``problems``)
    found nothing: the file was just written, so a problem is a bug, not a measurement."""
    problems = getattr(result, "problems", result)
    if problems:
        raise BenchError(f"the parallel verification found {len(problems)} problem(s): {problems[0]}")


def sequential_read(path: str) -> int:
    """Rank 0: read the whole file in CHUNK pieces into one reused aligned buffer; returns the bytes."""
    buf, done = aligned_empty(CHUNK), 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            n = os.readv(fd, [buf])
            if n == 0:
                return done
            done += n
    finally:
        os.close(fd)


def inspect_verify(path: str) -> None:
    """Rank 0: ``ckptio inspect --verify --json PATH`` in this process; BenchError unless it exits 0."""
    from ckptio.tools.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["inspect", "--verify", "--json", path])
    if status != 0:
        raise BenchError(f"ckptio inspect --verify {path} exited with {status}: {out.getvalue()[-500:]}")


def run(world, ctx: Context, repeats: int, log) -> dict[str, Any]:
    """Collective over ``world`` (= ctx.comm). Returns the section's document."""
    case = ckptio_case("mpiio")
    path = case.paths(ctx)[0]
    rank0 = world.Get_rank() == 0
    name, parallel = parallel_verifier()
    out: dict[str, Any] = {"file_bytes": 0, "sequential_read_seconds": [], "inspect_verify_seconds": [],
                           "resident_before": [], "parallel": {"status": "skipped" if parallel is None else "ok",
                                                              "function": name}}
    if parallel is None:
        out["parallel"]["reason"] = f"ckptio offers no collective verification (looked for {name})"
    counts = sorted({1, *((2, world.Get_size()) if world.Get_size() > 1 else ())})
    try:
        timed(world, lambda: case.write(ctx))
        out["file_bytes"] = world.bcast(os.path.getsize(path) if rank0 else None, root=0)
        # every cold read of a round, in the round's order (common.round_order: mirrored in odd rounds, so the VM's
        # alternating slow and fast cold reads fall on each case equally often)
        # (the list each one's seconds go to, whether the file's residency before it is recorded, the measurement)
        cold: list[tuple[list[float], bool, Callable[[], float]]] = [
            (out["sequential_read_seconds"], True,
             lambda: timed(world, lambda: sequential_read(path) if rank0 else 0)[0]),
            (out["inspect_verify_seconds"], True,
             lambda: timed(world, lambda: inspect_verify(path) if rank0 else None)[0])]
        if parallel is not None:
            cold += [(out["parallel"].setdefault(str(n), []), False,
                      lambda n=n: on_first(world, n, lambda sub: timed(sub, lambda: clean(parallel(path, sub)))[0]))
                     for n in counts]
        for rep in range(repeats):
            for seconds, record_resident, measure in round_order(cold, rep):
                if rank0:
                    evict([path])
                if record_resident:
                    out["resident_before"].append(world.bcast(resident_fraction([path]) if rank0 else None, root=0))
                seconds.append(measure())
            log(f"  [{rep + 1}/{repeats}] verify: cold sequential read {out['sequential_read_seconds'][-1]:.2f} s, "
                f"inspect --verify {out['inspect_verify_seconds'][-1]:.2f} s")
    except BenchError as exc:
        out.update(status="failed", reason=str(exc))
        log(f"  verify: FAILED {exc}")
    finally:
        if rank0:
            remove([path])
        world.Barrier()
    out.setdefault("status", "ok")
    nbytes = out["file_bytes"]
    for what in ("sequential_read", "inspect_verify"):
        out[f"{what}_time"] = time_summary(nbytes, out[f"{what}_seconds"])
    if out["parallel"]["status"] == "ok":
        out["parallel"]["time"] = {n: time_summary(nbytes, s) for n, s in out["parallel"].items()
                                   if n.isdigit()}
    return out
