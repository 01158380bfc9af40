"""The programs that write the checkpoints the command-line tests read (``tests/test_cli.py`` and
``tests/test_cli_tools.py``), under mpirun or as one process (``python cli.py CASE ARGS...``).

``tests/test_cli.py``:

* ``inspected PATH BACKEND``: "dens" (4 rows of 64 per rank, filled with the rank) and a segment "ids", attributes
  step=7 and time=0.5;
* ``big PATH``: "x", 20,000 float64 (one rank).

``tests/test_cli_tools.py``:

* ``tools PATH BACKEND MODIFY TIME [EXTRA]``: "dens" (12, 5, 3) float64 split along the first axis (MODIFY=1:
  one element changed), a segment "ids" of 40 values, a 0-d "scal", attributes time=TIME and units; EXTRA names
  one more variable;
* ``particles PATH BACKEND CHANGE DROP``: 30 particles; rank r owns those with (7 * id) % n == r (the segments'
  concatenation depends on the rank count); CHANGE: an id whose component 1 changes, DROP: an id left out (-1:
  none); plus "dens" with dims and attributes;
* ``rerun_series DIR`` (one process): a Series writes steps 90 and 100, a new Series (a rerun from 90) 95; prints
  ``ckptio.latest(DIR)``;
* ``rerun_attribute DIR`` (one process): steps 90, 100, 95 with the sequence attribute an older Series wrote;
  prints ``ckptio.latest(DIR)``.
"""

from __future__ import annotations

import sys

import numpy as np

import ckptio


# --------------------------------------------------------------------------------------------- test_cli.py
def inspected(path: str, backend: str) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    r, n = comm.Get_rank(), comm.Get_size()
    with ckptio.create(path, comm, backend=backend, attrs={"step": 7, "time": 0.5}) as ck:
        ck.write("dens", np.full((4, 64), r, np.float64), offset=(4 * r, 0), global_shape=(4 * n, 64))
        ck.write("ids", np.arange(r + 1, dtype=np.int64))


def big(path: str) -> None:
    from mpi4py import MPI

    with ckptio.create(path, MPI.COMM_WORLD) as ck:
        ck.write("x", np.arange(20000, dtype=np.float64), offset=(0,), global_shape=(20000,))


# --------------------------------------------------------------------------------------- test_cli_tools.py
def tools(path: str, backend: str, modify_arg: str, time_arg: str, *extra: str) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    r, n = comm.Get_rank(), comm.Get_size()
    modify, time = modify_arg == "1", float(time_arg)
    g = np.arange(12 * 5 * 3, dtype=np.float64).reshape(12, 5, 3) * 0.5
    if modify:
        g[5, 2, 1] += 1e-3
    rows = [12 * k // n for k in range(n + 1)]
    ids = np.arange(40, dtype=np.int64)
    seg = [40 * k // n for k in range(n + 1)]
    with ckptio.create(path, comm, backend=backend, attrs={"time": time, "units": "cgs"}) as ck:
        ck.write("dens", g[rows[r]:rows[r + 1]].copy(), offset=(rows[r], 0, 0), global_shape=g.shape)
        ck.write("ids", ids[seg[r]:seg[r + 1]].copy())
        if r == 0:
            ck.write("scal", np.array(3.5), offset=(), global_shape=())
        if extra:
            ck.write(extra[0], np.zeros(2, np.int32), offset=(2 * r,), global_shape=(2 * n,))


def particles(path: str, backend: str, change_arg: str, drop_arg: str) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    r, n = comm.Get_rank(), comm.Get_size()
    change, drop = int(change_arg), int(drop_arg)
    ids = np.array([i for i in range(30) if (7 * i) % n == r and i != drop], dtype=np.int64)
    parts = np.stack([ids * 1.0, np.sin(ids), np.cos(ids)], axis=1)
    parts[ids == change, 1] += 1e-3
    rows = [12 * k // n for k in range(n + 1)]
    dens = np.arange(12 * 4, dtype=np.float64).reshape(12, 4)[rows[r]:rows[r + 1]].copy()
    with ckptio.create(path, comm, backend=backend, attrs={"time": 0.5}) as ck:
        ck.write("dens", dens, offset=(rows[r], 0), global_shape=(12, 4), dims=("x", "y"),
                 attrs={"units": "g/cm**3", "long_name": "density"})
        ck.write("pid", ids)
        ck.write("kind", ids % 3)  # a segment whose values repeat: no key
        ck.write("parts", parts, dims=("particle", "component"), attrs={"units": "cm"})


def rerun_series(d: str) -> None:
    from mpi4py import MPI

    for _first, steps in ((90, (90, 100)), (95, (95,))):
        series = ckptio.Series(d, MPI.COMM_SELF, keep=10)
        for step in steps:
            with series.create(step) as ck:
                ck.write("x", np.arange(4.0), offset=(0,), global_shape=(4,))
    print(ckptio.latest(d))


def rerun_attribute(d: str) -> None:
    from mpi4py import MPI

    for step, seq in ((90, 1), (100, 2), (95, 3)):
        with ckptio.create(f"{d}/chk_{step:06d}", MPI.COMM_SELF, attrs={"ckptio_series_seq": seq}) as ck:
            ck.write("x", np.arange(4.0), offset=(0,), global_shape=(4,))
    print(ckptio.latest(d))


CASES = {"inspected": inspected, "big": big, "tools": tools, "particles": particles, "rerun_series": rerun_series,
         "rerun_attribute": rerun_attribute}


def main(argv: list[str]) -> int:
    CASES[argv[0]](*argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
