"""The MPI program of ``tests/test_hdf5_by_owner.py``: ``python hdf5_by_owner.py write PATH`` writes one
checkpoint (hdf5 backend) that mixes every kind of variable the HDF5 write path tells apart; ``read PATH WRITERS``
restarts it on this run's ranks and checks every value. Rank 0 prints ``OK`` when every rank's check passed.

The variables (P writer ranks, rank ``r``):

* ``own{r}_{k}`` (k < 40): 1 KiB held whole by rank r: written independently by its owner;
* ``gappy{r}``: 64 rows, rank r's two blocks (rows 0-15 and 40-63) and nobody's hole filled by rank r too (rows
  16-39), declared in that order: one owner, several blocks, still independent;
* ``scalar``: a 0-d value rank P-1 writes (offset ``()``);
* ``shared``: 1 KiB split over every rank: collective (more than one writer);
* ``big``: 2 MiB on rank 0 only, larger than the stripe unit: collective;
* ``tiles{r}``: an 8 x 8 variable rank r writes as two tiles side by side (they share every row: two writes);
* ``empty``: a (0, 3) variable rank 0 declares: no call at all.

``write`` prints ``STEPS`` and every rank's number of write steps of the data (``run_steps``): 3 whatever the
number of ranks and owned variables (the independent step, then ``shared`` and ``big``).
"""

from __future__ import annotations

import sys

import numpy as np

import ckptio

OWN = 40


def values(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """The deterministic contents of variable ``name`` (any rank can compute any variable's)."""
    seed = sum(ord(c) * 31 ** i for i, c in enumerate(name)) % (2 ** 32)
    return np.random.default_rng(seed).standard_normal(shape)


def write(comm, path: str) -> None:
    from ckptio.engine import write as engine_write

    r, p = comm.rank, comm.size
    steps = []
    run_steps = engine_write.run_steps
    engine_write.run_steps = lambda *args: steps.append(run_steps(*args)) or steps[-1]
    with ckptio.create(path, comm, backend="hdf5") as ck:
        for k in range(OWN):
            name = f"own{r}_{k}"
            ck.write(name, values(name, (128,)), offset=(0,), global_shape=(128,))
        gappy = values(f"gappy{r}", (64, 4))
        for rows in ((0, 16), (40, 64), (16, 40)):
            ck.write(f"gappy{r}", gappy[rows[0]:rows[1]], offset=(rows[0], 0), global_shape=(64, 4))
        tiles = values(f"tiles{r}", (8, 8))
        ck.write(f"tiles{r}", tiles[:, :4], offset=(0, 0), global_shape=(8, 8))
        ck.write(f"tiles{r}", tiles[:, 4:], offset=(0, 4), global_shape=(8, 8))
        if r == p - 1:
            ck.write("scalar", np.float64(3.25), offset=(), global_shape=())
        shared = values("shared", (128,))
        lo, hi = 128 * r // p, 128 * (r + 1) // p
        ck.write("shared", shared[lo:hi], offset=(lo,), global_shape=(128,))
        if r == 0:
            ck.write("big", values("big", (1 << 18,)), offset=(0,), global_shape=(1 << 18,))
            ck.write("empty", np.zeros((0, 3)), offset=(0, 0), global_shape=(0, 3))
    engine_write.run_steps = run_steps
    every = comm.gather(steps, root=0)
    if r == 0:
        print("STEPS", *(s[0] if len(s) == 1 else s for s in every), flush=True)


def read(comm, path: str, writers: str) -> None:
    bad = []
    with ckptio.open(path, comm) as ck:
        names = [f"own{w}_{k}" for w in range(int(writers)) for k in range(OWN)]
        names += [f"{kind}{w}" for kind in ("gappy", "tiles") for w in range(int(writers))] + ["shared", "big"]
        mine = names[comm.rank::comm.size]  # one collective read_many, each rank its own variables
        shapes = [ck.variables[name].shape for name in mine]
        got = ck.read_many([(name, (0,) * len(shape), shape) for name, shape in zip(mine, shapes, strict=True)])
        bad += [name for name, shape, a in zip(mine, shapes, got, strict=True)
                if not np.array_equal(a, values(name, shape))]
        if float(ck.read("scalar", (), ())) != 3.25:
            bad.append("scalar")
        if ck.variables["empty"].shape != (0, 3):
            bad.append("empty")
    every = comm.gather(bad, root=0)
    if comm.rank == 0:
        print("OK" if not any(every) else f"BAD {sorted(n for b in every for n in b)}", flush=True)


CASES = {"write": write, "read": read}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
