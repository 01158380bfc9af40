"""The MPI program of ``tests/test_restart_memory.py``: allocating reads whose outputs are recycled.

``mpirun -n N python recycled_reads.py PATH``: every rank writes its rows of two float64 variables ``a`` and ``b``
(each rank's share at least ``restart_memory.MIN_BYTES``), then reads a shifted range of ``a`` (allocating),
drops it, and reads the same range of ``b``. Each rank prints ``RESULT {json}``: for each read, the outputs'
addresses and how many mappings were fresh or reused (by the pool's counters and by the reader's own
``stats``), the fraction of the second outputs' pages mapped before the
second read began (``mincore`` on the kept mappings), and whether every value read was right.
"""

from __future__ import annotations

import ctypes
import gc
import json
import sys

import numpy as np
from mpi4py import MPI

import ckptio
from ckptio.engine import restart_memory

ROW = 64 * 1024 // 8  # float64 per row: 64 KiB
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]


def values(name: str, lo: int, hi: int) -> np.ndarray:
    base = np.arange(lo * ROW, hi * ROW, dtype=np.float64).reshape(hi - lo, ROW)
    return base * (1.0 if name == "a" else -3.0)


def resident_of_kept() -> float:
    """The fraction of the kept mappings' pages that are mapped (what the next output is made in)."""
    pages = total = 0
    for m in restart_memory.RECYCLED._kept:
        n = m.size // 4096
        vec = (ctypes.c_ubyte * n)()
        start = np.frombuffer(m.mm, np.uint8, count=1).ctypes.data + m.offset
        assert _libc.mincore(start, m.size, vec) == 0
        pages += sum(b & 1 for b in bytes(vec))
        total += n
    return pages / total if total else 0.0


def main() -> None:
    comm = MPI.COMM_WORLD
    r, n = comm.Get_rank(), comm.Get_size()
    rows_each = restart_memory.MIN_BYTES // (ROW * 8) + 8
    total = rows_each * n
    path = sys.argv[1]
    lo, hi = r * rows_each, (r + 1) * rows_each
    with ckptio.create(path, comm) as ck:
        for name in ("a", "b"):
            ck.write(name, values(name, lo, hi), offset=(lo, 0), global_shape=(total, ROW))
    first, count = min(lo + rows_each // 3, total - rows_each), rows_each  # shifted: pieces of two writers
    pool = restart_memory.RECYCLED
    out = {"rank": r}
    ok = True
    with ckptio.open(path, comm) as ck:
        for name, key in (("a", "first"), ("b", "second")):
            gc.collect()
            before = {"fresh": pool.fresh, "reused": pool.reused}
            resident = resident_of_kept() if key == "second" else None
            stats_before = {k: ck.stats.to_json()[k] for k in ("fresh_outputs", "recycled_outputs")}
            arr = ck.read(name, (first, 0), (count, ROW))
            ok = ok and bool(np.array_equal(arr, values(name, first, first + count)))
            stats = {k: v - stats_before[k] for k, v in ck.stats.to_json().items() if k in stats_before}
            out[key] = {"fresh": pool.fresh - before["fresh"], "reused": pool.reused - before["reused"],
                        "addresses": [arr.ctypes.data], "resident_before": resident, "stats": stats}
            del arr  # dropped: its mapping is kept for the next read
    out["values_ok"] = ok
    print("RESULT", json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
