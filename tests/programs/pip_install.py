"""The MPI program of ``tests/test_pip_install.py``, run by the Python of a fresh venv where ckptio was
pip-installed (``mpirun -n 2 <venv>/bin/python pip_install.py write PATH BACKEND``).

``write PATH BACKEND``: every rank writes 4 values and reads the whole array back; prints
``OK <the file of the ckptio package imported>`` (the pip-installed copy, not the source tree). It imports
nothing from ``tests/``.
"""

from __future__ import annotations

import sys

import numpy as np

import ckptio


def write(comm, path: str, backend: str) -> None:
    r, n = comm.rank, comm.size
    with ckptio.create(path, comm, backend=backend, attrs={"time": 1.5}) as ck:
        ck.write("x", np.arange(4.0) + 4 * r, offset=(4 * r,), global_shape=(4 * n,))
    with ckptio.open(path, comm) as ck:
        assert (ck.read("x", offset=(0,), shape=(4 * n,)) == np.arange(4.0 * n)).all()
    print("OK", ckptio.__file__)


CASES = {"write": write}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
