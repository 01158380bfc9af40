"""The MPI program of ``tests/test_contract.py``: the engine writes and restarts a checkpoint of a fourth format
(``tests/thirdparty/ckptio_flat.py``, found through its entry point only).

``mpirun -n N python contract.py write PATH BACKEND``: N writers split every variable along its LAST axis (a
2-D and a 3-D variable), each also writes a per-rank segment of ``rank + 1`` ids, and rank 0 a 0-d variable;
every rank prints ``WROTE <rank>``.

``mpirun -n M python contract.py read PATH BACKEND WRITERS``: M readers split the FIRST axis instead and read
their rows, the segment rows of their share of the writers and the 0-d variable; each checks the values and
prints ``RESTARTED <rank> <format name>``.

``python contract.py memory DIR``, no mpirun: the storage contract suite on the in-memory reference backend, one
process playing 3 ranks; its ``CASE`` lines, then ``MPI LOADED <True|False>`` (it must make no MPI call).
"""

from __future__ import annotations

import sys

import numpy as np
from ckptio.backends import detect_backend

import ckptio

SHAPES = {"u": (12, 10), "cells": (5, 4, 9)}


def expected(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """The global values of a variable (distinct per variable and element)."""
    return (np.arange(np.prod(shape), dtype=np.float64) * 3 + len(name)).reshape(shape)


def piece(n: int, parts: int, index: int) -> tuple[int, int]:
    return index * n // parts, (index + 1) * n // parts


def ids(writer: int) -> np.ndarray:
    return np.arange(writer + 1, dtype=np.int64) + 100 * writer


def write(comm, path: str, backend: str) -> None:
    rank, size = comm.Get_rank(), comm.Get_size()
    with ckptio.create(path, comm, backend=backend, attrs={"writers": size}) as ck:
        for name, shape in SHAPES.items():
            lo, hi = piece(shape[-1], size, rank)
            ck.write(name, np.ascontiguousarray(expected(name, shape)[..., lo:hi]),
                     offset=(*(0,) * (len(shape) - 1), lo), global_shape=shape)
        ck.write("ids", ids(rank))
        if rank == 0:
            ck.write("time", np.array(2.5), offset=(), global_shape=())
    print(f"WROTE {rank}", flush=True)


def read(comm, path: str, backend: str, writers: int) -> None:
    rank, size = comm.Get_rank(), comm.Get_size()
    found = detect_backend(path).name
    with ckptio.open(path, comm) as ck:
        assert ck.attrs["writers"] == writers, ck.attrs
        for name, shape in SHAPES.items():
            lo, hi = piece(shape[0], size, rank)
            got = ck.read(name, offset=(lo, *(0,) * (len(shape) - 1)), shape=(hi - lo, *shape[1:]))
            np.testing.assert_array_equal(got, expected(name, shape)[lo:hi], err_msg=name)
        first, last = piece(writers, size, rank)
        want = np.concatenate([ids(w) for w in range(first, last)] or [np.zeros(0, np.int64)])
        np.testing.assert_array_equal(ck.read("ids"), want)
        assert float(ck.read("time")) == 2.5
    assert found == backend, found
    print(f"RESTARTED {rank} {found}", flush=True)


def memory_suite(directory: str) -> int:
    from ckptio.testing.contract import CASES, run_cases
    from ckptio.testing.harness import Environment
    from ckptio.testing.memory import MemoryBackend, MemoryFiles

    failed = run_cases(Environment(MemoryBackend, None, directory, 3, MemoryFiles()), CASES)
    print(f"MPI LOADED {'mpi4py.MPI' in sys.modules}", flush=True)
    return failed


if __name__ == "__main__":
    if sys.argv[1] == "memory":
        sys.exit(memory_suite(sys.argv[2]))
    from mpi4py import MPI

    command, path, backend = sys.argv[1:4]
    if command == "write":
        write(MPI.COMM_WORLD, path, backend)
    else:
        read(MPI.COMM_WORLD, path, backend, int(sys.argv[4]))
