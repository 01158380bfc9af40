"""MPI program run on emulated nodes by tests/test_multinode.py (one action per job; prints JSON lines).

    multinode_app.py write-restart BACKEND MODE OUTDIR STAGE   write on every rank, restart N-to-M (one fewer
                                                                rank), check values and aggregator placement
    multinode_app.py recover OUTDIR STAGE                       staged steps 1, 2; lose the final copy of 2:
                                                                restart drains it from the stages; lose one
                                                                rank's piece too: falls back to step 1
    multinode_app.py bad-stage OUTDIR STAGE                     a staged close must fail on every rank
    multinode_app.py stage-step STEP OUTDIR STAGE               one staged checkpoint (run with CKPTIO_FAULT to
                                                                kill its drain)
    multinode_app.py placement-write OUTDIR CONFIG_LIST          a native checkpoint with cb_config_list=CONFIG_LIST
                                                                ("default": ckptio's choice); report the placement
    multinode_app.py restart OUTDIR STAGE STEP                  latest(comm=, stage_dir=) must give STEP with the
                                                                values the writers of STEP wrote
"""

from __future__ import annotations

import json
import os
import socket
import sys
import warnings

import numpy as np
from mpi4py import MPI

import ckptio
from ckptio.coord import placement

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
host = socket.gethostname()


def report(**kw) -> None:
    print("JSON " + json.dumps({"rank": rank, "host": host, **kw}), flush=True)


def values(step: int, rows: int = 8) -> np.ndarray:
    return (np.arange(rows * 5, dtype=np.float64).reshape(rows, 5) + 1000 * rank + step)


def write(path: str, backend: str, mode: str, stage: str, step: int = 1) -> ckptio.Writer:
    kw = {"stage_dir": stage} if mode == "staged" else {"mode": mode}
    ck = ckptio.create(path, comm, backend=backend, attrs={"step": step}, **kw)
    ck.write("x", values(step), offset=(8 * rank, 0), global_shape=(8 * size, 5))
    if backend == "mpiio":
        ck.write("ids", np.arange(rank + 1, dtype=np.int64) + 10 * rank)
    ck.close()
    return ck


def write_restart(backend: str, mode: str, outdir: str, stage: str) -> None:
    path = os.path.join(outdir, "chk_000001")
    ck = write(path, backend, mode, stage)
    ck.wait()
    expected = np.concatenate([np.arange(40, dtype=np.float64).reshape(8, 5) + 1000 * r + 1 for r in range(size)])
    # N-to-M: restart on one rank fewer (the last rank sits out)
    sub = comm.Split(0 if rank < size - 1 or size == 1 else MPI.UNDEFINED, rank)
    if sub != MPI.COMM_NULL:
        m = sub.Get_size()
        rows = 8 * size
        lo, hi = rank * rows // m, (rank + 1) * rows // m
        with ckptio.open(path, sub) as rd:
            got = rd.read("x", offset=(lo, 0), shape=(hi - lo, 5))
            assert rd.attrs["step"] == 1
        assert (got == expected[lo:hi]).all(), (rank, got, expected[lo:hi])
        sub.Free()
    nodes = len(set(comm.allgather(host)))
    with ckptio.open(path, comm, aggregators=nodes) as rd:
        rd.read("x")
        aggregators = list(rd.aggregators)
        placed = placement.read_report(rd)
    written = placement.write_report(ck)
    with ckptio.open(path, comm, aggregators=min(nodes + 1, size)) as rd:  # one per node first, then a second
        more = placement.read_report(rd)["aggregators_per_node"]
    staged_files = []
    if mode == "staged":
        for _root, _dirs, files in os.walk(stage):
            staged_files += [f for f in files if f.endswith(".json")]
    report(aggregators=aggregators, is_aggregator=rank in aggregators, staged=sorted(staged_files), read=placed,
           written=written, more=more, ok=True)


def placement_write(outdir: str, config_list: str) -> None:
    """One native checkpoint of 1 MiB per rank, with cb_config_list=CONFIG_LIST unless it is "default"; report
    the placement the write recorded, the hints MPI-IO reported back and the io component."""
    path = os.path.join(outdir, "chk_000001")
    hints = {} if config_list == "default" else {"cb_config_list": config_list}
    data = np.full(1 << 17, rank, np.float64)
    with ckptio.create(path, comm, hints=hints) as ck:
        ck.write("x", data, offset=(data.size * rank,), global_shape=(data.size * size,))
    with ckptio.open(path, comm) as rd:
        assert (rd.read("x", offset=(data.size * rank,), shape=(data.size,)) == rank).all()
        hints_got = rd.meta["hints"]
    report(written=placement.write_report(ck), hints=hints_got, ok=True)


def recover(outdir: str, stage: str) -> None:
    for step in (1, 2):
        write(os.path.join(outdir, f"chk_{step:06d}"), "mpiio", "staged", stage, step).wait()
    final = os.path.join(outdir, "chk_000002")
    if rank == 0:
        os.unlink(final)  # the drain of step 2 "did not finish"
    comm.Barrier()
    found = ckptio.latest(outdir, prefix="chk_", comm=comm, stage_dir=stage)
    assert found == final, found
    with ckptio.open(found, comm) as rd:
        assert (rd.read("x", offset=(8 * rank, 0), shape=(8, 5)) == values(2)).all()
    # lose the final copy again, and the last rank's staged piece: no usable stage, step 1 is the newest
    if rank == 0:
        os.unlink(final)
    if rank == size - 1:
        for root, _dirs, files in os.walk(stage):
            for f in files:
                if f.startswith(f"rank-{rank:06d}") and f.endswith(".json") and "chk_000002" in root:
                    os.unlink(os.path.join(root, f))
    comm.Barrier()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = ckptio.latest(outdir, prefix="chk_", comm=comm, stage_dir=stage)
    assert found == os.path.join(outdir, "chk_000001"), found
    report(found=found, warned=[str(w.message) for w in caught if "staged copy" in str(w.message)], ok=True)


def bad_stage(outdir: str, stage: str) -> None:
    try:
        write(os.path.join(outdir, "chk_000001"), "mpiio", "staged", stage)
    except ckptio.CheckpointIOError as exc:
        report(error=str(exc), ok=True)
        return
    report(error=None, ok=False)


def stage_step(step: str, outdir: str, stage: str) -> None:
    write(os.path.join(outdir, f"chk_{int(step):06d}"), "mpiio", "staged", stage, int(step)).wait()
    report(ok=True)


def staged_read(outdir: str, stage: str, mode: str, expect: str) -> None:
    """mode: staged / sync (write chk_000001 first) or none; expect: where ckptio.open reads from."""
    path = os.path.join(outdir, "chk_000001")
    if mode != "none":
        write(path, "mpiio", mode, stage, 1).wait()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rd = ckptio.open(path, comm, stage_dir=stage)
    source = getattr(rd, "source", "pfs")
    assert source == expect, (source, [str(w.message) for w in caught])
    with rd, ckptio.open(path, comm) as ref:
        writers = ref.variables["ids"].nblocks
        requests = [("x", None, None),                                   # the whole array on every rank
                    ("x", (max(0, 8 * rank - 3), 1), (7, 3)),            # across the writers' blocks
                    ("x", (0, 0), (0, 5))]                               # empty
        if writers == size:
            requests.append(("ids", None, None))                         # this rank's own segment
        got, want = rd.read_many(requests), ref.read_many(requests)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape and (g == w).all()
        assert rd.attrs == ref.attrs and set(rd.variables) == set(ref.variables)
    report(source=source, warned=[str(w.message) for w in caught if "stage" in str(w.message)], ok=True)


def restart(outdir: str, stage: str, step: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = ckptio.latest(outdir, prefix="chk_", comm=comm, stage_dir=stage)
    assert found == os.path.join(outdir, f"chk_{int(step):06d}"), found
    with ckptio.open(found, comm) as rd:
        writers = rd.meta["nprocs"]
        got = rd.read("x")
    expected = np.concatenate([np.arange(40, dtype=np.float64).reshape(8, 5) + 1000 * r + int(step)
                               for r in range(writers)])
    assert (got == expected).all()
    report(found=found, warned=[str(w.message) for w in caught if "staged copy" in str(w.message)], ok=True)


if __name__ == "__main__":
    action, *args = sys.argv[1:]
    {"write-restart": write_restart, "recover": recover, "bad-stage": bad_stage, "stage-step": stage_step,
     "restart": restart, "staged-read": staged_read, "placement-write": placement_write}[action](*args)
