"""The MPI program of the aggregated-write tests (``tests/test_write_aggregation.py``, the strace check of
``tests/test_aggregators_strace.py``, ``tests/faults/test_aggregated_write_failure.py``): ckptio's own collective
buffering of the native format (issue 29 item 1).

    mpirun -n N python write_aggregation.py write PATH [--layout fs|cyclic:S:UNIT:OBJECT] [--mode sync|async|staged]
                                                       [--compression zstd:1] [--info DIR] [--fail-round K]
                                                       [--fail-rank R] [--signal-call K]
    mpirun -n M python write_aggregation.py read PATH

``write`` declares values every reader can recompute (``expected``): a 3-D array cut unevenly along its first axis
(rank 1 of 3 or more owns no rows), written from a strided view (the interior of a halo'd array); a segment
variable (rank 1 contributes none); a 2-D float32 array from a strided view; a scalar on rank 0. ``--layout
cyclic:...`` makes the planning rank see a striped layout (stripe count S, unit, object size) for a file on any
file system, so stripe-cyclic domains are exercised without CephFS. ``--info DIR``: every rank writes
``DIR/info.<rank>.json`` (its pid, whether it is a write aggregator, the aggregation record). ``--fail-round K``:
rank R's (``--fail-rank``, default 1) byte-range writer raises ENOSPC at its K-th write call (an injected failure
of one aggregator in the middle of the pipeline; 0: nothing injected); every rank then prints ``RAISED <rank>
<error class> | <message>`` and ``LEFT <rank> <names in the directory>``. ``--signal-call K``: instead, rank R's
writer sends its own process SIGTERM at its K-th write call (a batch system's warning in the middle of the data),
whose handler raises RuntimeError; every rank also prints ``CALLS <rank> <write calls it made>``. ``read``
restarts on M ranks (rank r reads rows [r*G/M, (r+1)*G/M)) and checks every value; rank 0 prints ``READ OK <M>``.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys

import numpy as np
from mpi4py import MPI

import ckptio

TRAILING = (24, 170)


def rows_of(rank: int, nprocs: int) -> int:
    return 0 if (rank == 1 and nprocs >= 3) else 3 + (rank * 7) % 5


def expected(lo: int, hi: int) -> np.ndarray:
    i = np.arange(lo, hi, dtype=np.float64)[:, None, None]
    j = np.arange(TRAILING[0], dtype=np.float64)[None, :, None]
    k = np.arange(TRAILING[1], dtype=np.float64)[None, None, :]
    return i * 1000 + j * 10 + k * 0.001


def parts_of(rank: int) -> np.ndarray:
    n = 0 if rank == 1 else 40 + 13 * rank
    return np.column_stack([np.full(n, rank, np.int64), np.arange(n, dtype=np.int64)])


def simulate_layout(spec: str) -> None:
    """The planning rank sees a striped layout for the file (cyclic domains on any file system)."""
    from ckptio.engine import write_aggregate as aggregate
    from ckptio.model import write_domains

    _, count, unit, size = spec.split(":")
    layout = write_domains.StripeLayout(int(count), int(unit), int(size))

    def striped(tmp, record, hosts, contiguous, user_hints):
        return write_domains.cyclic_domains(len(hosts), write_domains.node_ids(hosts), layout,
                                            aggregate.aggregator_override(user_hints), aggregate.buffer_bytes())

    aggregate.domains_for_file = striped


def fail_at(call: int, failing_rank: int) -> None:
    """Rank ``failing_rank``'s byte-range writer fails (ENOSPC) at its ``call``-th write."""
    from ckptio.backends import rangeio

    for cls in (rangeio.PosixRangeWriter, rangeio.MpiRangeWriter):
        original = cls.write
        calls = [0]

        def failing(self, runs, original=original, calls=calls):
            calls[0] += 1
            if MPI.COMM_WORLD.Get_rank() == failing_rank and calls[0] == call:
                raise ckptio.CheckpointIOError(f"{self.path}: injected: {os.strerror(errno.ENOSPC)}")
            return original(self, runs)

        cls.write = failing


def signal_at(call: int, signalled_rank: int) -> list[int]:
    """Rank ``signalled_rank``'s byte-range writer sends SIGTERM to its own process at its ``call``-th write (from
    the writing thread, whichever it is); the handler, run by the main thread, raises RuntimeError. Returns the
    count of write calls, updated as they happen."""
    import signal

    from ckptio.backends import rangeio

    def terminated(signum, frame):
        raise RuntimeError(f"terminated by signal {signum} (SIGTERM) on this rank")

    signal.signal(signal.SIGTERM, terminated)
    calls = [0]
    for cls in (rangeio.PosixRangeWriter, rangeio.MpiRangeWriter):
        original = cls.write

        def counting(self, runs, original=original):
            calls[0] += 1
            if MPI.COMM_WORLD.Get_rank() == signalled_rank and calls[0] == call:
                os.kill(os.getpid(), signal.SIGTERM)
            return original(self, runs)

        cls.write = counting
    return calls


def write(args) -> None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if args.layout != "fs":
        simulate_layout(args.layout)
    if args.fail_round:
        fail_at(args.fail_round, args.fail_rank)
    calls = signal_at(args.signal_call, args.fail_rank) if args.signal_call else None
    if calls is not None and args.fail_round is None:
        args.fail_round = 0  # (the outcome is printed as for a failure)
    counts = [rows_of(r, size) for r in range(size)]
    lo = sum(counts[:rank])
    halo = np.zeros((counts[rank] + 4, TRAILING[0] + 4, TRAILING[1]))
    halo[2:-2, 2:-2] = expected(lo, lo + counts[rank])
    flat = np.zeros((counts[rank] + 2, 40), np.float32)
    flat[1:-1, 3:-5] = np.float32(rank) + np.arange(32, dtype=np.float32)
    kw = {"stage_dir": args.stage} if args.mode == "staged" else {"mode": args.mode}
    try:
        w = ckptio.create(args.path, comm, attrs={"writers": size}, compression=args.compression, **kw)
        with w:
            w.write("dens", halo[2:-2, 2:-2], offset=(lo, 0, 0), global_shape=(sum(counts), *TRAILING))
            w.write("flat", flat[1:-1, 3:-5], offset=(lo, 0), global_shape=(sum(counts), 32))
            w.write("parts", parts_of(rank))
            if rank == 0:
                w.write("time", np.float64(1.25), offset=(), global_shape=())
        w.wait()
        outcome = "OK"
    except (ckptio.CheckpointError, RuntimeError) as exc:  # RuntimeError: --signal-call's handler, on its rank
        outcome = f"RAISED {rank} {type(exc).__name__} | {' '.join(str(exc).split())}"
    if args.fail_round is not None:
        print(outcome, flush=True)
        if calls is not None:
            print(f"CALLS {rank} {calls[0]}", flush=True)
        comm.Barrier()
        print(f"LEFT {rank} {sorted(os.listdir(os.path.dirname(os.path.abspath(args.path))))}", flush=True)
        return
    if outcome != "OK":
        raise SystemExit(outcome)
    stats = w.meta["stats"]["write"]
    if args.info:
        aggregation = stats.get("aggregation") or {}
        info = {"rank": rank, "pid": os.getpid(), "aggregator": rank in aggregation.get("aggregators", ()),
                "aggregation": aggregation, "seconds": stats["seconds"]}
        with open(os.path.join(args.info, f"info.{rank}.json"), "w") as f:
            json.dump(info, f)
    if rank == 0:
        print("JSON " + json.dumps({"aggregation": stats.get("aggregation"), "placement": stats.get("placement"),
                                    "layout": w.meta["layout"]}), flush=True)


def read(args) -> None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    with ckptio.open(args.path, comm) as ck:
        writers = int(ck.attrs["writers"])
        total = sum(rows_of(r, writers) for r in range(writers))
        assert ck.variables["dens"].shape == (total, *TRAILING)
        lo, hi = rank * total // size, (rank + 1) * total // size
        got = ck.read("dens", offset=(lo, 0, 0), shape=(hi - lo, *TRAILING))
        assert np.array_equal(got, expected(lo, hi)), f"dens rows {lo}:{hi} differ"
        flat = ck.read("flat", offset=(lo, 0), shape=(hi - lo, 32))
        owner = np.repeat(np.arange(writers), [rows_of(r, writers) for r in range(writers)])[lo:hi]
        assert np.array_equal(flat, owner[:, None].astype(np.float32) + np.arange(32, dtype=np.float32))
        parts = ck.read("parts", offset=(0, 0), shape=ck.variables["parts"].shape)
        assert np.array_equal(parts, np.concatenate([parts_of(r) for r in range(writers)]))
        assert float(ck.read("time")) == 1.25
    ok = comm.allreduce(1)
    if rank == 0:
        print(f"READ OK {ok}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["write", "read"])
    parser.add_argument("path")
    parser.add_argument("--layout", default="fs")
    parser.add_argument("--mode", default="sync", choices=["sync", "async", "staged"])
    parser.add_argument("--stage")
    parser.add_argument("--compression")
    parser.add_argument("--info")
    parser.add_argument("--fail-round", type=int)  # 0: nothing injected, the outcome reported as for a failure
    parser.add_argument("--fail-rank", type=int, default=1)
    parser.add_argument("--signal-call", type=int)
    args = parser.parse_args()
    (write if args.what == "write" else read)(args)


if __name__ == "__main__":
    sys.exit(main())
