"""The Python side of the C and Fortran bindings tests (``tests/test_bindings*.py``): what the compiled programs
wrote, as Python reads it (``mpirun -n P python bindings.py CASE ARGS...``).

``tests/test_bindings.py``:

* ``compare FIRST OTHER...`` (1 rank, COMM_SELF): every variable and attribute of the checkpoints bit for bit
  against FIRST's; prints ``IDENTICAL <n> variables``;
* ``c_roundtrip PATH WRITERS``: the checkpoint of ``ckptio_test_c roundtrip`` on another rank count;
  ``PYTHON OK`` from rank 0;
* ``fortran_layout DIR WRITERS``: the checkpoints of ``ckptio_test_f layout``: Fortran's column-major arrays with
  the reversed shape, segments, rows, attributes; ``PYTHON OK`` from rank 0;
* ``host_is_python LIBRARY PATH``: the C library loaded with ctypes into a running interpreter writes a
  checkpoint and leaves the interpreter running; ``HOST OK <rank>``.

``tests/test_bindings_safety.py``: ``temporaries DIR WRITERS`` and ``types DIR WRITERS`` (the checkpoints of
``ckptio_test_f temporaries`` and ``types``; ``PYTHON OK`` from rank 0).

``tests/test_bindings_background.py``: ``codec PATH`` (1 rank): prints ``CODEC [<codecs of "x"'s blocks>]``.

``tests/test_bindings_parity.py``: ``corrupt_newest PATH`` (1 rank): flips one bit in the middle of the last
extent; prints ``CORRUPTED``.
"""

from __future__ import annotations

import ctypes
import sys

import internals
import numpy as np


# ----------------------------------------------------------------------------------------- test_bindings.py
def compare(first: str, *others: str) -> None:
    """Compare every variable and attribute of checkpoints, bit for bit (1 rank, COMM_SELF)."""
    from mpi4py import MPI

    import ckptio

    SERIES_ONLY = "ckptio_series_seq"  # the commit counter an older ckptio.Series added as an attribute (Fortran: none)
    with ckptio.open(first, MPI.COMM_SELF) as a:
        ref = {n: a.read(n) for n in a.variables}
        attrs = {k: v for k, v in a.attrs.items() if k != SERIES_ONLY}
    for other in others:
        with ckptio.open(other, MPI.COMM_SELF) as b:
            assert sorted(b.variables) == sorted(ref), (other, sorted(b.variables), sorted(ref))
            assert {k: v for k, v in b.attrs.items() if k != SERIES_ONLY} == attrs, (other, b.attrs, attrs)
            for n, x in ref.items():
                y = b.read(n)
                assert x.dtype == y.dtype and x.shape == y.shape, (other, n, x.dtype, y.dtype, x.shape, y.shape)
                assert x.tobytes() == y.tobytes(), f"{other}: variable {n} differs from {first}"
    print("IDENTICAL", len(ref), "variables")


def c_roundtrip(path: str, writers_arg: str) -> None:
    """The checkpoint of ckptio_test_c roundtrip, as Python sees it (on another rank count than the writer's)."""
    from mpi4py import MPI

    import ckptio

    writers = int(writers_arg)
    comm = MPI.COMM_WORLD
    with ckptio.open(path, comm) as ck:
        assert ck.attrs["step"] == 7 and ck.attrs["time"] == 0.125
        label = ck.attrs["label"]
        assert (label.decode() if isinstance(label, bytes) else label) == "c roundtrip"
        rows = ck.read("rows")
        i, j = np.indices((3 * writers, 5))
        assert rows.dtype == np.float64 and (rows == 1000.0 * i + j + 0.25).all()
        f3 = ck.read("fortran3d")   # Fortran a(i,j,k), column-major: stored with the reversed shape (k, j, i)
        k, j, i = np.indices((2 * writers, 3, 4))
        assert f3.dtype == np.int32 and f3.shape == (2 * writers, 3, 4)
        assert (f3 == 10000 * k + 100 * j + i).all()
        seg = ck.read("seg", offset=(0,), shape=(writers * (writers + 1) // 2,))
        assert seg.tolist() == [100 * r + q for r in range(writers) for q in range(r + 1)]
    if comm.rank == 0:
        print("PYTHON OK")


def fortran_layout(d: str, writers_arg: str) -> None:
    from mpi4py import MPI

    import ckptio

    writers = int(writers_arg)
    N1, N2, NK = 4, 3, 2
    with ckptio.open(f"{d}/chk_000003", MPI.COMM_WORLD) as ck:
        # Fortran a(N1, N2, NK*writers) -> C-order global shape (NK*writers, N2, N1); a(i,j,k) == x[k-1, j-1, i-1]
        assert ck.variables["a"].shape == (NK * writers, N2, N1), ck.variables["a"].shape
        x = ck.read("a")
        k, j, i = np.indices(x.shape) + 1
        assert x.dtype == np.float64 and (x == i + 100.0 * j + 10000.0 * k + 0.5).all()
        r4 = ck.read("r4")
        assert r4.dtype == np.float32 and r4.shape == (5 * writers,)
        assert (r4 == np.repeat(np.arange(writers), 5) + 0.25 * np.tile(np.arange(1, 6), writers)).all()
        seg = ck.read("seg", offset=(0,), shape=(writers * (writers + 1) // 2,))
        assert seg.tolist() == [100 * r + q for r in range(writers) for q in range(r + 1)]
        # Fortran tr(3, n) with rows=.true.: Python's (n, 3) rows, every writer's in rank order
        want = [[10.0 * r + 0.5 * (3 * q + c + 1) for c in range(3)] for r in range(writers) for q in range(r % 3)]
        assert ck.variables["tr"].shape == (len(want), 3)
        assert ck.read("tr", offset=(0, 0), shape=(len(want), 3)).tolist() == want
        assert ck.attrs["step"] == 3 and ck.attrs["big"] == 9000000000 and ck.attrs["time"] == 0.375
        assert ck.attrs["label"] == "fortran layout"
        # slice of the middle: Python hyperslabs map to Fortran index ranges
        part = ck.read("a", offset=(1, 1, 2), shape=(2, 2, 2))
        assert (part == x[1:3, 1:3, 2:4]).all()
    with ckptio.open(f"{d}/ints_000001", MPI.COMM_WORLD) as ck:
        b = ck.read("b")   # Fortran b(4, 2*writers) -> (2*writers, 4)
        assert b.dtype == np.int32 and b.shape == (2 * writers, 4)
        r, c = np.indices(b.shape)
        assert (b == (r % 2) * 4 + c + 1 + 10 * (r // 2)).all()
    if MPI.COMM_WORLD.rank == 0:
        print("PYTHON OK")


def host_is_python(library: str, path: str) -> None:
    """The C library in a process whose host program is this interpreter: it must reuse it (and ckptio is
    imported here only after the library's calls)."""
    from mpi4py import MPI

    lib = ctypes.CDLL(library)       # CDLL releases the GIL around calls: the library takes it itself
    comm_t = ctypes.c_void_p if MPI._sizeof(MPI.Comm) == ctypes.sizeof(ctypes.c_void_p) else ctypes.c_int
    lib.ckptio_create.argtypes = [ctypes.c_char_p, comm_t, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.ckptio_write_segment.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int64,
                                         ctypes.c_void_p]
    lib.ckptio_close.argtypes = [ctypes.c_void_p]
    comm = MPI.COMM_WORLD
    data = np.arange(comm.rank + 2, dtype=np.float64)
    f = ctypes.c_void_p()
    assert lib.ckptio_create(path.encode(), comm_t(MPI._handleof(comm)), b"mpiio", ctypes.byref(f)) == 0
    assert lib.ckptio_write_segment(f, b"x", 10, data.size, data.ctypes.data) == 0
    assert lib.ckptio_close(f) == 0
    assert lib.ckptio_finalize() == 0     # not our interpreter: it keeps running
    import ckptio

    with ckptio.open(path, comm) as ck:
        assert ck.read("x").tolist() == data.tolist()
    print("HOST OK", comm.rank)


# ---------------------------------------------------------------------------------- test_bindings_safety.py
def temporaries(d: str, writers_arg: str) -> None:
    from mpi4py import MPI

    import ckptio

    writers = int(writers_arg)
    n = 1000
    with ckptio.open(f"{d}/chk_000001", MPI.COMM_WORLD) as ck:
        i = np.arange(n * writers)
        assert (ck.read("expr") == 2.0 * (i + 1)).all()
        r, k = np.divmod(i, n)
        assert (ck.read("explicit") == r * 2 * n + 2 * k + 1 + 0.25).all()
        assert (ck.read("contig") == r * 2 * n + 2 * k + 2 + 0.25).all()
        big = ck.read("big", offset=(ck.variables["big"].shape[0] - 3,), shape=(3,))
        assert (big == np.arange(ck.variables["big"].shape[0] - 2, ck.variables["big"].shape[0] + 1) + 0.5).all()
    if MPI.COMM_WORLD.rank == 0:
        print("PYTHON OK")


def types(d: str, writers_arg: str) -> None:
    from mpi4py import MPI

    import ckptio

    writers = int(writers_arg)
    with ckptio.open(f"{d}/chk_000001", MPI.COMM_WORLD) as ck:
        lg = ck.read("l")                     # Fortran l(3, 2*writers) -> (2*writers, 3)
        assert lg.dtype == np.bool_ and lg.shape == (2 * writers, 3), (lg.dtype, lg.shape)
        j, i = np.indices(lg.shape) + 1       # global column j, row i; rank r owns columns 2r+1..2r+2
        r, jl = np.divmod(j - 1, 2)
        assert (lg == ((i + jl + 1 + r) % 2 == 0)).all()
        c4 = ck.read("c4")
        assert c4.dtype == np.complex64
        assert (c4 == np.repeat(np.arange(writers), 5) + 1j * np.tile(np.arange(1, 6), writers)).all()
        c8 = ck.read("c8")                   # Fortran c8(2, 3*writers) -> (3*writers, 2)
        assert c8.dtype == np.complex128 and c8.shape == (3 * writers, 2)
        jj, ii = np.indices(c8.shape)
        assert (c8 == (jj // 3) + 0.5 * (ii + 1) - 1j * (jj % 3 + 1)).all()
        seg = ck.read("lseg", offset=(0,), shape=(writers * (writers + 1) // 2,))
        assert seg.dtype == np.bool_ and seg.tolist() == [q > 0 for r in range(writers) for q in range(r + 1)]
        assert ck.attrs["r4"] == float(np.float32(0.1))
    if MPI.COMM_WORLD.rank == 0:
        print("PYTHON OK")


# ------------------------------------------------------------------------------ test_bindings_background.py
def codec(path: str) -> None:
    from mpi4py import MPI

    import ckptio

    with ckptio.open(path, MPI.COMM_SELF):
        print("CODEC", sorted({b["codec"] for b in internals.stored_blocks(path, "x")}))


# ---------------------------------------------------------------------------------- test_bindings_parity.py
def corrupt_newest(path: str) -> None:
    offset, nbytes = internals.extent_span(path, -1)
    internals.flip_byte(path, offset + nbytes // 2, 0x40)
    print("CORRUPTED")


CASES = {"compare": compare, "c_roundtrip": c_roundtrip, "fortran_layout": fortran_layout,
         "host_is_python": host_is_python, "temporaries": temporaries, "types": types, "codec": codec,
         "corrupt_newest": corrupt_newest}


def main(argv: list[str]) -> int:
    CASES[argv[0]](*argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
