"""The program of ``tests/test_flash_layout.py`` that writes a small FLASH-like checkpoint by one process, no
mpirun (``python flash_layout.py write PATH CASE``).

Cases: ``refined`` (one root block and its 8 children), ``no-geometry`` (the attribute missing), ``no-bbox``
(the variable missing).
"""

from __future__ import annotations

import sys

import numpy as np

import ckptio


def write(path: str, case: str) -> None:
    from mpi4py import MPI

    attrs = {"time": 0.25, "geometry": "cartesian", "xmin": 0.0, "xmax": 2.0, "ymin": 0.0, "ymax": 2.0,
             "zmin": 0.0, "zmax": 2.0, "nblockx": 1, "nblocky": 1, "nblockz": 1}
    if case == "no-geometry":
        del attrs["geometry"]
    lo = [np.zeros(3)] + [np.array([(c >> a) & 1 for a in range(3)], float) for c in range(8)]
    width = [2.0] + [1.0] * 8
    bbox = np.array([[[corner[a], corner[a] + w] for a in range(3)] for corner, w in zip(lo, width, strict=True)])
    dens = np.empty((9, 4, 4, 4))
    dens[0] = 100.0  # the parent: covered by its children everywhere, so never seen in yt's leaf data
    dens[1:] = np.arange(8 * 64, dtype=float).reshape(8, 4, 4, 4)
    with ckptio.create(path, MPI.COMM_SELF, backend="mpiio", attrs=attrs) as ck:
        ck.write("dens", dens, offset=(0, 0, 0, 0), global_shape=dens.shape)
        if case != "no-bbox":
            ck.write("bbox", bbox, offset=(0, 0, 0), global_shape=bbox.shape)


CASES = {"write": write}


def main(argv: list[str]) -> int:
    CASES[argv[0]](*argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
