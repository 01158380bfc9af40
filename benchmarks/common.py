"""Shared pieces of the benchmarks: the FLASH-like data set, decompositions, collective timing and statistics.

The data set: ``nvars`` cell-centred float64 variables on ``nblocks`` blocks of 16^3 cells (32 KiB per variable
per block), each a global array ``(nblocks, 16, 16, 16)``. Writers own contiguous block ranges (even split, as
FLASH's Morton order gives); restart readers use another, uneven decomposition (``ckptio.tools.simulate.split_shifted``:
alternately 3/4 and 5/4 of the mean share), so every reader needs pieces of several writers' ranges.

Values are a smooth field plus a small deterministic hash "noise" in the low mantissa bits, like real simulation
data: the smooth part makes the exponent/high bytes compressible, the noise keeps zstd honest (it is a function of
the global element index, so any decomposition can regenerate and verify what it reads).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from ckptio.tools.simulate import parse_size, split_even, split_shifted

NXB = 16
CELLS = NXB**3
BLOCK_VAR_BYTES = CELLS * 8
GIB = float(1 << 30)
VAR_NAMES = ("dens", "pres", "temp", "velx", "vely", "velz", "ener", "gamc", "game", "eint", "magx", "magy",
             "magz", "divb", "pden", "shok")
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_CHUNK = 1 << 22  # elements generated at once (32 MiB of float64)


def var_names(nvars: int) -> list[str]:
    """Names of the first ``nvars`` FLASH-like variables (``var16``... past the named ones)."""
    return [VAR_NAMES[i] if i < len(VAR_NAMES) else f"var{i:02d}" for i in range(nvars)]


def fill_values(out: np.ndarray, var: int, first_elem: int) -> None:
    """Fill the flat float64 array ``out`` with variable ``var``'s values from global element ``first_elem``."""
    for lo in range(0, out.size, _CHUNK):
        hi = min(out.size, lo + _CHUNK)
        idx = np.arange(first_elem + lo, first_elem + hi, dtype=np.uint64)
        noise = ((idx * _GOLDEN) >> np.uint64(40)).astype(np.float64) * (1.0 / (1 << 24)) - 0.5
        phase = idx.astype(np.float64) * (2.0 * math.pi / (7.0 * CELLS))
        out[lo:hi] = 1.0 + var + 0.5 * np.sin(phase) + 1e-4 * noise


@dataclass
class Dataset:
    """One rank's part of the FLASH-like checkpoint: ``data[v]`` is variable ``v`` of blocks [first, first+count)."""

    names: list[str]
    nblocks: int
    first: int
    count: int
    data: np.ndarray  # (nvars, count, 16, 16, 16) float64, C-contiguous: data[v] is contiguous
    splits: list[tuple[int, int]] = field(default_factory=list)  # every writer's (first, count), in rank order
    # small per-block variables besides the unknowns (FLASH's tree: lrefine, gid, ...): name -> this rank's
    # array of ``count`` rows (global shape: ``nblocks`` rows); written by every case, not read back
    extras: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def global_shape(self) -> tuple[int, int, int, int]:
        return (self.nblocks, NXB, NXB, NXB)

    @property
    def total_bytes(self) -> int:
        """Bytes of the whole checkpoint (every rank's blocks, the extras included)."""
        extra = sum(a.dtype.itemsize * math.prod(a.shape[1:]) for a in self.extras.values())
        return self.nblocks * (len(self.names) * BLOCK_VAR_BYTES + extra)

    def extra_global_shape(self, name: str) -> tuple[int, ...]:
        return (self.nblocks, *self.extras[name].shape[1:])

    def local(self, v: int) -> np.ndarray:
        return self.data[v]


def make_dataset(nbytes: int, nvars: int, nprocs: int, rank: int) -> Dataset:
    """This rank's part of a checkpoint of about ``nbytes`` (at least one block per rank)."""
    nblocks = max(nprocs, nbytes // (nvars * BLOCK_VAR_BYTES))
    return dataset_of(var_names(nvars), split_even(nblocks, nprocs), rank)


def dataset_of(names: Sequence[str], splits: Sequence[tuple[int, int]], rank: int) -> Dataset:
    """This rank's part of the variables ``names`` on the writers' block ranges ``splits`` (first, count)."""
    first, count = splits[rank]
    data = np.empty((len(names), count, NXB, NXB, NXB), dtype=np.float64)
    for v in range(len(names)):
        fill_values(data[v].reshape(-1), v, first * CELLS)
    nblocks = sum(c for _f, c in splits)
    return Dataset(list(names), nblocks, first, count, data, [tuple(s) for s in splits])


def expected_block_range(v: int, first: int, count: int) -> np.ndarray:
    """What a reader of blocks [first, first+count) of variable ``v`` must get back."""
    out = np.empty((count, NXB, NXB, NXB), dtype=np.float64)
    fill_values(out.reshape(-1), v, first * CELLS)
    return out


def read_range(nblocks: int, nreaders: int, reader: int) -> tuple[int, int]:
    """(first block, count) of restart reader ``reader``: the uneven 'shifted' decomposition."""
    return split_shifted(nblocks, nreaders)[reader]


def owners_of(splits: Sequence[tuple[int, int]], first: int, count: int) -> list[tuple[int, int, int]]:
    """Writer ranks holding blocks [first, first+count) of the writers' ranges ``splits``: (writer rank, first
    block, count) of each overlap."""
    out = []
    for w, (wf, wc) in enumerate(splits):
        lo, hi = max(first, wf), min(first + count, wf + wc)
        if hi > lo:
            out.append((w, lo, hi - lo))
    return out


# ------------------------------------------------------------------------------------------ timing, stats
class BenchError(RuntimeError):
    """A benchmark case failed on some rank (raised on every rank)."""


def collective(comm, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on every rank; if it raised anywhere, raise :class:`BenchError` everywhere (no hang)."""
    result, error = None, None
    try:
        result = fn()
    except Exception as exc:  # reported on every rank below
        error = f"rank {comm.Get_rank()}: {type(exc).__name__}: {exc}"
    errors = [e for e in comm.allgather(error) if e]
    if errors:
        raise BenchError("; ".join(errors))
    return result


def on_first(world, n: int, fn: Callable[[Any], Any]) -> Any:
    """Collective over ``world``: ``fn(sub)`` on the sub-communicator of world ranks 0..n-1 while the others wait
    in a sleeping barrier; returns world rank 0's result on every rank (an error raised in ``fn`` on any rank
    of ``sub`` is raised on every rank of ``world`` as BenchError)."""
    from mpi4py import MPI

    sub = world.Split(0 if world.Get_rank() < n else MPI.UNDEFINED, world.Get_rank())
    result, error = None, None
    if sub != MPI.COMM_NULL:
        try:
            result = fn(sub)
        except BenchError as exc:
            error = str(exc)
        finally:
            sub.Free()
    sleeping_barrier(world)
    result, error = world.bcast((result, error), root=0)
    if error:
        raise BenchError(error)
    return result


T = TypeVar("T")


def round_order(items: Sequence[T], rep: int) -> list[T]:
    """Round ``rep``'s order of ``items`` (the same in every run and on every rank): in an even round a
    permutation drawn from a generator seeded with ``rep``, so no case always runs first, last, or right after the
    same other case; in an odd round the previous round's order reversed, so over each pair of rounds every case
    stands once at an even and once at an odd place of the sequence of cases (see below). Use an even number of
    rounds.

    Why not a fixed order: what a case pays can depend on what ran just before it. On the development VM the
    first cold reads after the restart's files were written took 2.5-3.6 s for any reader, later ones 1.0-1.5 s
    (benchmarks/restart.py ``warm_up``), and a write right after an external MPI job (IOR, FLASH-IO, even one
    ``mpirun -n 2 /bin/true`` from rank 0) spent 0.15 s more in the kernel. A fixed order hands such a cost to
    the same case in every round; a rotation keeps each case after the same neighbour.

    Why mirrored: on the development VM (2026-12-06) consecutive cold reads of a 2 GiB file, each after evicting
    it, alternated between ~1.0 and ~2.9 s whatever the reader (``readv`` or ``preadv``, 4-32 MiB pieces): the
    page cache of every other read came from guest memory the host had taken back (free page reporting), and
    after a 3 s pause every read was slow. A case at place p of n in round 2j is at place 2jn + p of the whole
    sequence and at 2jn + 2n - 1 - p in round 2j+1: an odd distance apart, whatever n, so such an alternation
    falls on every case equally often (with shuffled orders alone, one case could get the slow turn in three of
    five rounds)."""
    order = list(items)
    random.Random(rep - rep % 2).shuffle(order)
    return order[::-1] if rep % 2 else order


def sleeping_barrier(comm, poll: float = 2e-4) -> None:
    """A barrier whose early ranks sleep instead of spinning: Open MPI's blocking collectives poll a core at
    100%, so a rank with nothing to do in a case (the idle writer rank of an N -> N-1 restart, rank 1 during the
    one-process raw read) would take a core from the ranks that work (2 cores here). Collective."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(poll)


def timed(comm, fn: Callable[[], Any]) -> tuple[float, Any]:
    """Barrier, ``fn`` on every rank, a sleeping barrier (:func:`sleeping_barrier`): (wall seconds as every rank
    agrees, this rank's result). If ``fn`` raised anywhere, :class:`BenchError` everywhere (no hang)."""
    comm.Barrier()
    t0 = time.perf_counter()
    result, error = None, None
    try:
        result = fn()
    except Exception as exc:  # reported on every rank below
        error = f"rank {comm.Get_rank()}: {type(exc).__name__}: {exc}"
    sleeping_barrier(comm)
    elapsed = time.perf_counter() - t0
    errors = [e for e in comm.allgather(error) if e]
    if errors:
        raise BenchError("; ".join(errors))
    return comm.allreduce(elapsed, op=_max_op()), result


def _max_op():
    from mpi4py import MPI

    return MPI.MAX


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of a series (empty series: zeros)."""
    if not values:
        return {"median": 0.0, "min": 0.0, "max": 0.0}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def readers_comm(comm, nreaders: int | None):
    """Collective: the sub-communicator of ranks 0..R-1 (the restart job; R = N-1 by default), COMM_NULL
    elsewhere, and R."""
    from mpi4py import MPI

    size = comm.Get_size()
    r = nreaders or (size - 1 if size > 1 else 1)
    r = max(1, min(r, size))
    return comm.Split(0 if comm.Get_rank() < r else MPI.UNDEFINED, comm.Get_rank()), r


def time_summary(nbytes: int, seconds: Sequence[float]) -> dict[str, float]:
    """The statistics the goals use, as IOR reports its repetitions: mean time (so an erratic slow round counts),
    its spread (min, max, standard deviation, coefficient of variation) and the bandwidth at the mean time."""
    if not seconds:
        return {}
    mean = statistics.fmean(seconds)
    stdev = statistics.stdev(seconds) if len(seconds) > 1 else 0.0
    return {"n": len(seconds), "mean_s": mean, "min_s": min(seconds), "max_s": max(seconds), "stdev_s": stdev,
            "cv": stdev / mean if mean else 0.0, "gib_s_at_mean": nbytes / GIB / mean if mean else 0.0}


def bandwidths(nbytes: int, seconds: Sequence[float]) -> list[float]:
    """GiB/s of moving ``nbytes`` in each of ``seconds``."""
    return [nbytes / GIB / s for s in seconds if s > 0]


def size_arg(text: str) -> int:
    """argparse type for sizes like 2G, 256M."""
    return parse_size(text)


def aligned_empty(nbytes: int, alignment: int = 4096) -> np.ndarray:
    """A uint8 array of ``nbytes`` whose data starts on an ``alignment`` boundary."""
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes]
