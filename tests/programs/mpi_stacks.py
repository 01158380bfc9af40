"""The MPI programs of ``tests/test_mpi_stacks.py`` (``mpirun -n P python mpi_stacks.py CASE ARGS...``).

* ``datatypes PATH``: the MPI datatypes ckptio builds for file pieces are classic (no large-count combiner,
  which ROMIO up to MPICH 4.0.x cannot flatten), and pieces handed over in reverse file order land in their own
  ranges; prints ``OK <MPI library>``;
* ``no_pnetcdf DIR``: with pnetcdf-python unavailable (blocked before ckptio is imported), the pnetcdf backend is
  refused on every rank (``REFUSED <message>``) and hdf5 works; ``OK``;
* ``size``: prints ``SIZE <size> <rank>`` (one job of N ranks, not N singletons).
"""

from __future__ import annotations

import sys


def datatypes(path: str) -> None:
    import internals
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    r = comm.rank
    # classic constructor: no large-count arguments in the type's envelope, whatever mpi4py would have used
    t = internals.classic_hindexed([4, 8, (1 << 30) + 5], [0, 16, 64])
    _, _, nc, _, combiner = t.Get_envelope()
    assert combiner == MPI.COMBINER_HINDEXED and nc == 0, t.Get_envelope()
    assert t.Get_size() == (1 << 30) + 17, t.Get_size()
    t.Free()
    # pieces handed over in reverse file order: each buffer must still land in its own range
    fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_RDWR)
    base = 1000 * r
    bufs = [np.full(10, 3 * r + k, np.uint8) for k in range(3)]
    pieces = [(base + 200, 10), (base + 100, 10), (base, 10)]
    internals.transfer(fh, pieces, bufs, write=True)
    fh.Sync()
    comm.Barrier()
    fh.Sync()
    back = [np.zeros(10, np.uint8) for _ in range(3)]
    internals.transfer(fh, pieces[::-1], back[::-1], write=False)
    fh.Close()
    for k in range(3):
        assert (back[k] == 3 * r + k).all(), (k, back[k])
    raw = np.fromfile(path, np.uint8)
    for k, (off, n) in enumerate(pieces):
        assert (raw[off:off + n] == 3 * r + k).all(), (r, k, raw[off:off + n])
    print("OK", MPI.Get_library_version().split(",")[0].split("\n")[0])


def no_pnetcdf(d: str) -> None:
    sys.modules["pnetcdf"] = None          # as on a cluster installed without PNETCDF_DIR: the import fails
    import internals
    import numpy as np
    from mpi4py import MPI

    import ckptio

    missing = internals.missing_backends()
    assert "pnetcdf" in missing, missing
    try:
        with ckptio.create(d + "/nc", MPI.COMM_WORLD, backend="pnetcdf") as ck:
            ck.write("x", np.zeros(4))
    except ckptio.CapabilityError as exc:
        print("REFUSED", exc)
    with ckptio.create(d + "/h5", MPI.COMM_WORLD, backend="hdf5") as ck:   # everything else works
        ck.write("x", np.arange(4.0))
    with ckptio.open(d + "/h5", MPI.COMM_WORLD) as ck:
        assert (ck.read("x") == np.arange(4.0)).all()
    print("OK")


def size() -> None:
    from mpi4py import MPI

    c = MPI.COMM_WORLD
    print("SIZE", c.size, c.rank)


CASES = {"datatypes": datatypes, "no_pnetcdf": no_pnetcdf, "size": size}


def main(argv: list[str]) -> int:
    CASES[argv[0]](*argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
