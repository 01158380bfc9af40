"""The programs of ``tests/test_startup.py``: one step of a program in a fresh interpreter, then which of the
heavy libraries it loaded (``python startup.py CASE [ARGS]``, one process, no mpirun).

Cases: ``import_ckptio`` (``import ckptio``); ``import_tool_modules`` (the modules of the backends, the command
line, series and catalog too); ``get_backend`` (the hdf5 backend looked up by name); ``missing`` (why each backend
cannot write, which asks the libraries; the hdf5 backend module then holds h5py exactly when it was loaded);
``hdf5_roundtrip PATH`` (a checkpoint written and read through the hdf5 backend on COMM_SELF, h5py loaded only by
the first ``create``, when hdf5 is available). The last line printed is the JSON list of the ``HEAVY`` modules in
``sys.modules``.

This module imports nothing but the standard library before a case runs.
"""

from __future__ import annotations

import json
import sys

HEAVY = ("h5py", "pnetcdf", "netCDF4", "matplotlib", "tqdm", "xarray")


def import_ckptio() -> None:
    import ckptio  # noqa: F401


def import_tool_modules() -> None:
    import internals

    import ckptio  # noqa: F401

    internals.import_tool_modules()


def get_backend() -> None:
    import internals

    internals.backend_by_name("hdf5")


def missing() -> None:
    import internals
    from ckptio.backends import available_backends, known_backends

    why = internals.missing_backends()
    assert sorted(set(known_backends()) - set(why)) == available_backends(), (why,)
    assert internals.hdf5_backend_has_h5py() == ("h5py" in sys.modules)


def hdf5_roundtrip(path: str) -> None:
    import ckptio.backends
    import numpy as np
    from mpi4py import MPI

    import ckptio

    assert "h5py" not in sys.modules
    if "hdf5" in ckptio.backends.available_backends():
        with ckptio.create(path, MPI.COMM_SELF, backend="hdf5") as ck:
            ck.write("x", np.arange(6.0), offset=(0,), global_shape=(6,))
        with ckptio.open(path, MPI.COMM_SELF) as ck:
            assert np.array_equal(ck.read("x"), np.arange(6.0))


CASES = {"import_ckptio": import_ckptio, "import_tool_modules": import_tool_modules, "get_backend": get_backend,
         "missing": missing, "hdf5_roundtrip": hdf5_roundtrip}


def main(argv: list[str]) -> int:
    CASES[argv[0]](*argv[1:])
    print(json.dumps([m for m in HEAVY if m in sys.modules]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
