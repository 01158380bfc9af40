"""The MPI programs of ``tests/test_reader_leaving.py`` (``mpirun -n P python reader_leaving.py CASE ARGS...``).

* ``leave PATH BACKEND once|twice``: rank 1 leaves its Reader's with block while the others still read: every
  rank prints ``RAISED <rank> <class> <names rank 1 as closed>`` (or ``NOERROR <rank>``), then ``AFTER <rank>``;
* ``after_close PATH``: a read after ``close()`` on rank 1 only: ``CLOSED 1 <message>``, then ``AFTER <rank>``;
* ``read_on PATH``: ``read_many(error=...)`` on rank 0 only (``ERRORARG``, then the reader still reads:
  ``USABLE``); then rank 1 closes while the others read twice: ``FAILED1``/``FAILED2 <rank> <class> <names rank
  1>`` (the second without a collective), and every rank's close returns: ``AFTER <rank>``;
* ``undecodable PATH``: a zstd block whose frame header is damaged: ``NAMED <rank> <message names the block>``;
* ``damaged_signature PATH BACKEND``: the file's first 8 bytes zeroed: ``ERROR <rank> <class>``.
"""

from __future__ import annotations

import sys

import internals
import numpy as np

import ckptio


def leave(comm, path: str, backend: str, how: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    with ckptio.create(path, comm, backend=backend) as ck:
        ck.write("a", np.full((4, 3), r, np.float64), offset=(4 * r, 0), global_shape=(4 * n, 3))
    try:
        with ckptio.open(path, comm) as ck:
            ck.read("a")                        # every rank
            if r != 1:
                ck.read("a")                    # all but rank 1: rank 1 leaves the with block cleanly
                if how == "twice":
                    ck.read("a")
        print("NOERROR", r, flush=True)
    except ckptio.CheckpointError as exc:
        print("RAISED", r, type(exc).__name__, "rank 1" in str(exc) and "closed" in str(exc), flush=True)
    # the communicator is still usable: nobody is stuck in a collective of the reader
    assert comm.allreduce(1) == n
    print("AFTER", r, flush=True)


def after_close(comm, path: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    with ckptio.create(path, comm) as ck:
        ck.write("a", np.arange(3.0) + r, offset=(3 * r,), global_shape=(3 * n,))
    ck = ckptio.open(path, comm)
    ck.read("a")
    ck.close()
    if r == 1:
        try:
            ck.read("a")
            print("READ-AFTER-CLOSE-ACCEPTED", flush=True)
        except ckptio.ClosedCheckpointError as exc:
            print("CLOSED", r, "after Reader.close()" in str(exc), flush=True)
    assert comm.allreduce(1) == n
    print("AFTER", r, flush=True)


def read_on(comm, path: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    with ckptio.create(path, comm) as ck:
        ck.write("a", np.arange(3.0) + r, offset=(3 * r,), global_shape=(3 * n,))
    ck = ckptio.open(path, comm)
    try:  # a problem one rank found with its own arguments fails every rank in the read's first phase
        ck.read_many([("a", None, None)], error=ValueError("my buffer is wrong") if r == 0 else None)
        print("ERRORARG-IGNORED", r, flush=True)
    except ckptio.CheckpointError as exc:
        print("ERRORARG", r, "rank 0" in str(exc) and "my buffer is wrong" in str(exc), flush=True)
    want = np.concatenate([np.arange(3.0) + q for q in range(n)])
    print("USABLE", r, bool(np.array_equal(ck.read("a"), want)), flush=True)
    if r == 1:
        try:  # (its close met the others' read: it learns the mismatch too)
            ck.close()
        except ckptio.ClosedCheckpointError:
            pass
    else:
        for k in (1, 2):
            try:
                ck.read("a")
                print("READ", r, flush=True)
            except ckptio.ClosedCheckpointError as exc:
                print(f"FAILED{k}", r, type(exc).__name__, "rank 1" in str(exc), flush=True)
        ck.close()
    assert comm.allreduce(1) == n
    print("AFTER", r, flush=True)


def undecodable(comm, path: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    with ckptio.create(path, comm, compression="zstd") as ck:
        ck.write("x", np.arange(1000.0) + 1000 * r, offset=(1000 * r,), global_shape=(1000 * n,))
    if r == 0:
        block = internals.stored_blocks(path, "x")[1]
        # inside block 1's zstd frame header: the block cannot be decoded at all
        internals.flip_byte(path, block["file_offset"] + 5)
    comm.Barrier()
    try:
        with ckptio.open(path, comm) as ck:
            ck.read("x")
        print("READ-OK", flush=True)
    except ckptio.CorruptCheckpointError as exc:
        print("NAMED", r,
              f"{path}: variable 'x' block 1 (written by rank 1, offset [1000], shape [1000])" in str(exc),
              flush=True)


def damaged_signature(comm, path: str, backend: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    with ckptio.create(path, comm, backend=backend) as ck:
        ck.write("x", np.arange(1000.0) + 1000 * r, offset=(1000 * r,), global_shape=(1000 * n,))
    if r == 0:
        with open(path, "r+b") as f:  # the format's signature overwritten (not all zeros, not one flipped bit)
            f.write(b"\x00" * 8)
    comm.Barrier()
    try:
        ckptio.open(path, comm)
        print("OPENED", flush=True)
    except ckptio.CheckpointError as exc:
        print("ERROR", r, type(exc).__name__, flush=True)


CASES = {"leave": leave, "after_close": after_close, "read_on": read_on, "undecodable": undecodable,
         "damaged_signature": damaged_signature}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
