"""The MPI program of ``tests/test_read_split.py``
(``mpirun -n P python read_split.py split PATH BACKEND BUFFER none|own|other``).

``split``: "u" (64, 16, 64) float64 written in blocks of 8 rows, read back with one aggregator (rank 0) by readers
whose rows end inside a block. ``none``: every rank prints ``STATS {json}`` (its Reader statistics and ``own``,
the bytes of its rows). ``own`` / ``other``: rank 0 first flips one byte in the rows it reads straight into its
output, or in the rows of the same block that go through the buffer to rank 1; every rank then prints
``CORRUPT <rank> <message names the checksum and the variable>``.
"""

from __future__ import annotations

import json
import sys

import internals
import numpy as np

import ckptio

ROW = 16 * 64 * 8  # bytes per row of u
G = (64, 16, 64)


def split(comm, path: str, backend: str, buffer: str, corrupt: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    full = np.arange(np.prod(G), dtype=np.float64).reshape(G)
    with ckptio.create(path, comm, backend=backend) as ck:
        for lo in range(r * 64 // n, (r + 1) * 64 // n, 8):  # blocks of 8 rows
            ck.write("u", full[lo:lo + 8], offset=(lo, 0, 0), global_shape=G)
    cuts = [0] + [64 * q // n + 4 for q in range(1, n)] + [64]  # every reader's rows end inside a block
    if corrupt != "none" and r == 0:
        row = cuts[1] - 2 if corrupt == "own" else cuts[1] + 1  # read straight into rank 0's output / the buffer
        t = internals.extent_table(path, backend)
        i = int(np.flatnonzero((t.lo[:, 0] <= row) & (row < t.lo[:, 0] + t.shape[:, 0]))[0])
        with open(path, "r+b") as f:
            f.seek(int(t.file_offset[i]) + (row - int(t.lo[i, 0])) * ROW + 100)
            f.write(b"\x7f")
    comm.Barrier()
    with ckptio.open(path, comm, buffer_bytes=buffer, aggregators=1) as ck:  # rank 0 reads every part
        try:
            u = ck.read("u", offset=(cuts[r], 0, 0), shape=(cuts[r + 1] - cuts[r], 16, 64))
            assert np.array_equal(u, full[cuts[r]:cuts[r + 1]]), r
            print("STATS", json.dumps({"rank": r, "own": (cuts[r + 1] - cuts[r]) * ROW, **ck.stats.to_json()}),
                  flush=True)
        except ckptio.CorruptCheckpointError as exc:
            print("CORRUPT", r, "checksum mismatch" in str(exc) and "'u'" in str(exc), flush=True)


CASES = {"split": split}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
