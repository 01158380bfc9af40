"""The MPI program of ``tests/test_verify_parallel.py``: ``ckptio.verify.verify_parallel`` over a communicator.

``mpirun -n N python verify_job.py CASE PATH BACKEND [WINDOW]``: every rank writes its part of a checkpoint (six small
blocks of ``dens``, one block each of ``nanv`` (float64 with a NaN) and ``big`` (int32), a per-rank segment ``ids``),
then:

``write``    nothing more (``WINDOW`` is the compression then: ``""`` for none, e.g. ``zstd+shuffle``);
``corrupt``  verifies it (``CLEAN`` problems and ranges), rank 0 flips one byte in two blocks, verifies again
             (``CORRUPT``); rank 0 also verifies serially (``SERIAL``, ``ckptio.verify.verify_checkpoint``);
             ``SHARING``: the ``sharing`` each of this rank's parallel scans got (``verify_scan.check_rows``);
``fail``     rank 1's own verification raises OSError (its read fails): every rank must raise, none may hang;
``one-aggregator``  verifies with one aggregator (``SHARING``: each rank's scans' ``sharing``).

Every rank prints ``RESULT {json}`` (``corrupt``) or ``RAISED <rank> <class> <message>`` (``fail``). ``WINDOW``:
bytes per read of the verification (default: the module's), to force many windows.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from ckptio.backends import detect_backend
from mpi4py import MPI

import ckptio
from ckptio import verify
from ckptio.engine import verify_scan

ROWS, COLS = 4, 64  # one small block of dens: 2 KiB


def write(path: str, backend: str, comm, compression: str | None = None) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    with ckptio.create(path, comm, backend=backend, compression=compression) as ck:
        for b in range(6):
            row = ROWS * (6 * r + b)
            ck.write("dens", np.full((ROWS, COLS), 10.0 * r + b) + np.arange(COLS), offset=(row, 0),
                     global_shape=(6 * ROWS * n, COLS))
        x = np.linspace(0, 1, 3000) + r
        x[7] = np.nan
        ck.write("nanv", x, offset=(3000 * r,), global_shape=(3000 * n,))
        ck.write("big", np.arange(20000, dtype=np.int32).reshape(200, 100) * (r + 1), offset=(200 * r, 0),
                 global_shape=(200 * n, 100))
        ck.write("ids", np.arange(r + 1, dtype=np.int64))


def flip(path: str, picks: list[tuple[str, int]]) -> None:
    """Rank 0: one byte flipped in block ``index`` (in file order) of each variable of ``picks``."""
    backend = detect_backend(path)
    extents = backend.extents(backend.read_document(path))
    for name, index in picks:
        e = [x for x in extents if x.var == name][index]
        with open(path, "r+b") as f:
            f.seek(e.file_offset + e.nbytes // 3)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0x10]))


def as_json(v: verify.Verification) -> dict:
    return {"problems": [p.to_json() for p in v.problems], "ranges": v.ranges}


def main() -> None:
    case, path, backend = sys.argv[1:4]
    comm = MPI.COMM_WORLD
    r = comm.Get_rank()
    if case == "write":
        write(path, backend, comm, sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else None)
        return
    if len(sys.argv) > 4:
        verify_scan.WINDOW = int(sys.argv[4])
    write(path, backend, comm)
    if case == "fail":
        check_rows = verify_scan.check_rows

        def failing(*args, **kw):
            if r == 1:
                raise OSError(5, "Input/output error (injected on rank 1)")
            return check_rows(*args, **kw)

        verify_scan.check_rows = failing
        try:
            verify.verify_parallel(path, comm)
            print("NO ERROR", r, flush=True)
        except Exception as exc:
            print("RAISED", r, type(exc).__name__, str(exc).replace("\n", " "), flush=True)
        return
    sharing: list[int] = []  # what each scan of this rank was told about the scans beside it on its host
    check_rows = verify_scan.check_rows

    def recording(*args, **kw):
        sharing.append(kw.get("sharing", args[6] if len(args) > 6 else 1))
        return check_rows(*args, **kw)

    verify_scan.check_rows = recording
    if case == "one-aggregator":
        checked = verify.verify_parallel(path, comm, aggregators=1)
        print("SHARING", json.dumps({"rank": r, "sharing": sharing, "aggregators": checked.aggregators,
                                     "problems": len(checked.problems)}), flush=True)
        return
    out = {"rank": r, "size": comm.Get_size(), "clean": as_json(verify.verify_parallel(path, comm, ranges=True))}
    comm.Barrier()
    if r == 0:
        flip(path, [("dens", 4), ("big", -1)])
    comm.Barrier()
    checked = verify.verify_parallel(path, comm, ranges=True)
    out["corrupt"] = as_json(checked)
    out["aggregators"] = checked.aggregators
    out["sharing"] = list(sharing)  # (rank 0's serial verification below is not one of them)
    if r == 0:
        b = detect_backend(path)
        out["serial"] = as_json(verify.verify_checkpoint(b, path, b.read_document(path), ranges=True))
    print("RESULT", json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
