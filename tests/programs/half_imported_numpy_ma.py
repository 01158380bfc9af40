"""The program of ``tests/faults/test_declarations.py::test_write_while_another_thread_imports_numpy_ma``
(``python half_imported_numpy_ma.py DIR``, one process).

While ``write("a", ...)`` runs, ``sys.modules`` holds what ``import numpy.ma`` leaves while another thread is still
running that import: a module ``numpy.ma`` without its names and an empty ``numpy.ma.core``. Then the import ends
(the whole modules are back), a masked array with a masked element is refused, and the plain checkpoint is read.
Prints ``REFUSED <message>`` and ``READ <values>``.
"""

from __future__ import annotations

import sys
import types

import numpy as np

import ckptio
from ckptio.coord.mpi import MPI


def main(directory: str) -> None:
    whole = {name: sys.modules.pop(name) for name in ("numpy.ma", "numpy.ma.core") if name in sys.modules}
    with ckptio.create(directory + "/plain", MPI.COMM_SELF) as ck:
        half = types.ModuleType("numpy.ma")
        half.__path__ = []  # a package whose __init__ has not finished
        sys.modules["numpy.ma"], sys.modules["numpy.ma.core"] = half, types.ModuleType("numpy.ma.core")
        ck.write("a", np.arange(4.0), offset=(0,), global_shape=(4,))
        for name in ("numpy.ma", "numpy.ma.core"):  # the other thread's import ends
            del sys.modules[name]
        sys.modules.update(whole)
    import numpy.ma

    try:
        with ckptio.create(directory + "/masked", MPI.COMM_SELF) as ck:
            ck.write("m", numpy.ma.masked_array(np.arange(4.0), mask=[0, 1, 0, 0]), offset=(0,),
                     global_shape=(4,))
    except ckptio.DeclarationError as exc:
        print("REFUSED", exc)
    with ckptio.open(directory + "/plain", MPI.COMM_SELF) as ck:
        print("READ", ck.read("a").tolist())


if __name__ == "__main__":
    main(sys.argv[1])
