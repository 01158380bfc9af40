"""The programs of ``tests/test_missing_libraries.py`` (``python missing_libraries.py CASE ARGS...``).

Before anything imports ckptio, ``block`` makes format libraries unavailable in this interpreter, as on a machine
without them: ``no-h5py`` / ``no-pnetcdf`` / ``both`` (``sys.modules[name] = None``: the import fails),
``serial-h5py`` (h5py without MPI: ``h5py.get_config().mpi`` is False), ``none``.

* ``write DIR`` (mpirun, 2 ranks, nothing blocked): ``DIR/chk_000001`` mpiio, ``chk_000002`` pnetcdf,
  ``chk_000003`` hdf5;
* ``inspect_latest BLOCK DIR`` (one process): prints ``{"inspect": [exit codes of inspect --verify of the three],
  "latest": ckptio.latest(DIR)}`` as JSON, every warning an error;
* ``restart BLOCK DIR OUT`` (mpirun): reads the HDF5 and the netCDF checkpoint, then tries to write each format;
  every rank writes its lines (``read <backend> <values right>``, ``write <backend> OK`` or
  ``write <backend> <exception classes> | <message>``) to ``OUT/rank<r>``.
"""

from __future__ import annotations

import json
import sys
import types
import warnings

BLOCKS = ("none", "serial-h5py", "no-h5py", "no-pnetcdf", "both")


def block(name: str) -> None:
    """Make the libraries of ``name`` (one of BLOCKS) unavailable; call before ckptio is imported."""
    assert "ckptio" not in sys.modules and name in BLOCKS, name
    if name == "serial-h5py":
        import h5py

        h5py.get_config = lambda: types.SimpleNamespace(mpi=False)
    if name in ("no-h5py", "both"):
        sys.modules["h5py"] = None
    if name in ("no-pnetcdf", "both"):
        sys.modules["pnetcdf"] = None


def write(d: str) -> None:
    import numpy as np
    from mpi4py import MPI

    import ckptio

    comm = MPI.COMM_WORLD
    r = comm.rank
    for step, b in ((1, "mpiio"), (2, "pnetcdf"), (3, "hdf5")):
        with ckptio.create(f"{d}/chk_{step:06d}", comm, backend=b, attrs={"step": step, "backend": b}) as ck:
            ck.write("dens", np.arange(40.0).reshape(10, 4)[5 * r:5 * r + 5] + step, offset=(5 * r, 0),
                     global_shape=(10, 4))
            ck.write("seg", np.full(3 + r, r, dtype="i4"))


def inspect_latest(name: str, d: str) -> None:
    block(name)
    warnings.simplefilter("error")
    import internals

    import ckptio

    print(json.dumps({"inspect": [internals.inspect_exit_code(f"{d}/chk_{s:06d}") for s in (1, 2, 3)],
                      "latest": ckptio.latest(d)}))


def restart(name: str, d: str, out: str) -> None:
    block(name)
    import numpy as np
    from mpi4py import MPI

    import ckptio

    comm = MPI.COMM_WORLD
    lines = []
    for step in (2, 3):
        with ckptio.open(f"{d}/chk_{step:06d}", comm) as ck:
            cols = ck.read("dens", offset=(0, 2 * comm.rank), shape=(10, 2))
            ok = np.array_equal(cols, np.arange(40.0).reshape(10, 4)[:, 2 * comm.rank:2 * comm.rank + 2] + step)
            lines.append(f"read {ck.attrs['backend']} {ok}")
    for b in ("hdf5", "pnetcdf"):
        try:
            with ckptio.create(f"{d}/new_{b}", comm, backend=b) as ck:
                ck.write("x", np.zeros(2), offset=(2 * comm.rank,), global_shape=(2 * comm.size,))
            lines.append(f"write {b} OK")
        except ckptio.CheckpointError as exc:
            message = str(exc).replace("\n", " ")
            lines.append(f"write {b} {' '.join(c.__name__ for c in type(exc).__mro__)} | {message}")
    with open(f"{out}/rank{comm.rank}", "w") as f:
        f.write("\n".join(lines))


CASES = {"write": write, "inspect_latest": inspect_latest, "restart": restart}


def main(argv: list[str]) -> int:
    CASES[argv[0]](*argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
