"""The MPI programs of ``tests/test_multilevel.py`` (multi-level checkpoints, issue 28), run on emulated nodes
(``tests/multinode.py``); every case prints one ``JSON {...}`` line per rank.

* ``lose SCHEME OUT STAGE WHAT [BACKEND]``: a Series with ``redundancy=SCHEME, drain_every=2`` (and
  ``backend=BACKEND``, default mpiio: the format of the drained level) writes steps 1-3 (only step 2 reaches OUT;
  the stage keeps step 3 alone, with its redundancy); then the node of the last rank loses its stage
  (``WHAT=wipe``), or that and one more piece elsewhere (``WHAT=two``: for ``xor`` rank 0's data, for ``partner``
  the lost node's partner copy); a new Series' ``latest()`` must rebuild and restart from step 3 (``wipe``) or
  fall back to step 2 with a warning saying why (``two``); the data is read back on every rank and N-to-M;
* ``write SCHEME OUT STAGE [STEPS]``: steps 1-3 (or STEPS, e.g. ``3``) as above, nothing lost (the first job
  of a node replacement; with ``CKPTIO_FAULT``, a job killed inside the redundancy exchange; with
  ``MULTILEVEL_CHUNK``, the exchange's chunk size in bytes; with ``MULTILEVEL_SCALE``, that many times the
  rows per rank, in every case);
* ``restart SCHEME OUT STAGE STEP``: ``latest()`` must give STEP (rebuilt onto a node with a new name), then
  step 4 is written with redundancy again, and drained (``drain=True``);
* ``other SCHEME OUT STAGE WRITERS STEP``: a job of another rank count than the WRITERS that wrote the stage:
  ``latest()`` must give STEP (drained by WRITERS of its ranks when its nodes hold every piece, else the
  fallback), read back whole on every rank;
* ``layout_to_leaders OUT`` (4 ranks, plain mpirun): the rebuild's layout reaches the node leaders only, and a
  damaged level is the same error on every rank;
* ``full SCHEME OUT STAGE ROWS``: steps 1-3 as above, then a step 4 of ROWS rows per rank that does not fit the
  last node's stage (the test mounts a small tmpfs there): the same error on every rank, naming the node and the
  file; ``latest()`` still gives step 3;
* ``bad_args OUT STAGE``: a bad ``redundancy=`` on the last rank, ``redundancy=`` without ``stage_dir=``, and
  failure groups that differ within a node: the same clear error on every rank.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import warnings

import numpy as np

import ckptio


def report(comm, **kw) -> None:
    print("JSON " + json.dumps({"rank": comm.Get_rank(), "host": socket.gethostname(), **kw}), flush=True)


def rows(r: int) -> int:
    return (4 + r) * int(os.environ.get("MULTILEVEL_SCALE", "1"))  # uneven pieces: the nodes' data differ in size


def values(r: int, step: int) -> np.ndarray:
    return np.arange(rows(r) * 5, dtype=np.float64).reshape(rows(r), 5) + 1000 * r + step


def expected(nprocs: int, step: int) -> np.ndarray:
    return np.concatenate([values(r, step) for r in range(nprocs)])


def series(comm, scheme: str, out: str, stage: str, backend: str = "mpiio") -> ckptio.Series:
    return ckptio.Series(out, comm, stage_dir=stage, redundancy=scheme, drain_every=2, keep=2, backend=backend)


def write_steps(comm, scheme: str, out: str, stage: str, steps=(1, 2, 3), backend: str = "mpiio") -> ckptio.Series:
    r, n = comm.Get_rank(), comm.Get_size()
    s = series(comm, scheme, out, stage, backend)
    for step in steps:
        with s.create(step, attrs={"step": step}) as ck:
            ck.write("x", values(r, step), offset=(sum(rows(q) for q in range(r)), 0),
                     global_shape=(sum(rows(q) for q in range(n)), 5))
            ck.write("ids", np.arange(r + 1, dtype=np.int64) + 10 * r)
    s.wait()
    return s


def nodes(comm) -> tuple[list[str], int]:
    """Every rank's host, and the index of this rank's node (nodes in the order of their first rank)."""
    hosts = comm.allgather(socket.gethostname())
    order = list(dict.fromkeys(hosts))
    return hosts, order.index(hosts[comm.Get_rank()])


def stage_files(stage: str) -> dict[str, int]:
    """What this node's stage holds: relative path -> size."""
    out = {}
    for root, _dirs, files in os.walk(stage):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, stage)] = os.path.getsize(p)
    return out


def written(comm, out: str, stage: str) -> dict:
    """After steps 1-3: what the parallel file system and this node's stage hold."""
    hosts, _ = nodes(comm)
    leader = hosts.index(hosts[comm.Get_rank()]) == comm.Get_rank()
    files = stage_files(stage) if leader else {}
    return {"pfs": sorted(n for n in os.listdir(out) if n.startswith("chk_")),
            "staged": sorted({p.split(os.sep)[1] for p in files if p.count(os.sep) >= 3}),
            "pieces": sum(v for p, v in files.items() if "redundancy" not in p and p.endswith((".data", ".json"))
                          and os.path.basename(p).startswith("rank-")),
            "redundancy": sum(v for p, v in files.items() if "redundancy" in p and not p.endswith("level.json")),
            "parity": sum(v for p, v in files.items() if p.endswith("xor.parity")), "leader": leader}


def check_restart(comm, found: str, step: int) -> None:
    n = comm.Get_size()
    with ckptio.open(found, comm) as rd:
        assert rd.attrs["step"] == step and (rd.read("x") == expected(n, step)).all()
        r = comm.Get_rank()
        assert (rd.read("ids") == np.arange(r + 1) + 10 * r).all()  # this rank's own segment
    if n > 1:  # N-to-M: one rank fewer reads the same file
        sub = comm.Split(0 if comm.Get_rank() < n - 1 else 1, comm.Get_rank())
        if comm.Get_rank() < n - 1:
            total = sum(rows(q) for q in range(n))
            lo, hi = sub.Get_rank() * total // (n - 1), (sub.Get_rank() + 1) * total // (n - 1)
            with ckptio.open(found, sub) as rd:
                assert (rd.read("x", offset=(lo, 0), shape=(hi - lo, 5)) == expected(n, step)[lo:hi]).all()
        sub.Free()


def latest(comm, scheme: str, out: str, stage: str, backend: str = "mpiio") -> tuple[str | None, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = series(comm, scheme, out, stage, backend).latest()
    return found, [str(w.message) for w in caught if "staged copy" in str(w.message)]


def flip(path: str) -> None:
    with open(path, "r+b") as f:
        f.seek(8)
        byte = f.read(1)
        f.seek(8)
        f.write(bytes([byte[0] ^ 0xFF]))


def lose(comm, scheme: str, out: str, stage: str, what: str, backend: str = "mpiio") -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    write_steps(comm, scheme, out, stage, backend=backend)
    before = written(comm, out, stage)
    hosts, node = nodes(comm)
    victim = hosts[n - 1]
    victim_node = list(dict.fromkeys(hosts)).index(victim)
    comm.Barrier()
    if r == hosts.index(victim):  # the lost node's leader wipes its stage (its other ranks wait)
        shutil.rmtree(stage)
    if what == "two":
        if scheme == "xor" and r == 0:
            data = [p for p in stage_files(stage) if "chk_000003" in p and p.endswith(f"rank-{0:06d}-of-{n:06d}.data")]
            flip(os.path.join(stage, data[0]))
        if scheme == "partner" and hosts[r] != victim and r == hosts.index(hosts[r]):
            for p in stage_files(stage):
                if f"partner-{victim_node}" + os.sep in p and p.endswith(".data"):
                    flip(os.path.join(stage, p))
    comm.Barrier()
    found, warned = latest(comm, scheme, out, stage, backend)
    step = 3 if what == "wipe" else 2
    assert found == os.path.join(out, f"chk_{step:06d}"), (found, warned)
    check_restart(comm, found, step)
    back = written(comm, out, stage)
    report(comm, before=before, after=back, found=os.path.basename(found), warned=warned, node=node, ok=True)


def write(comm, scheme: str, out: str, stage: str, steps: str = "1,2,3") -> None:
    write_steps(comm, scheme, out, stage, [int(s) for s in steps.split(",")])
    report(comm, before=written(comm, out, stage), ok=True)


def restart(comm, scheme: str, out: str, stage: str, step: str) -> None:
    found, warned = latest(comm, scheme, out, stage)
    assert found == os.path.join(out, f"chk_{int(step):06d}"), (found, warned)
    check_restart(comm, found, int(step))
    after = written(comm, out, stage)
    s = series(comm, scheme, out, stage)
    s.latest()
    r, n = comm.Get_rank(), comm.Get_size()
    with s.create(4, attrs={"step": 4}, drain=True) as ck:  # the job goes on: protected on the new node set,
        # and drained (drain=True) though drain_every=2 would not drain the first checkpoint of this Series
        ck.write("x", values(r, 4), offset=(sum(rows(q) for q in range(r)), 0),
                 global_shape=(sum(rows(q) for q in range(n)), 5))
        ck.write("ids", np.arange(r + 1, dtype=np.int64) + 10 * r)
    s.wait()
    report(comm, after=after, next=written(comm, out, stage), found=os.path.basename(found), warned=warned, ok=True)


def other(comm, scheme: str, out: str, stage: str, writers: str, step: str) -> None:
    found, warned = latest(comm, scheme, out, stage)
    assert found == os.path.join(out, f"chk_{int(step):06d}"), (found, warned)
    n = int(writers)
    with ckptio.open(found, comm) as rd:
        assert rd.attrs["step"] == int(step) and (rd.read("x") == expected(n, int(step))).all()
        ids = np.concatenate([np.arange(r + 1) + 10 * r for r in range(n)])
        assert (rd.read("ids", offset=(0,), shape=(len(ids),)) == ids).all()
    report(comm, found=os.path.basename(found), warned=warned, ok=True)


def full(comm, scheme: str, out: str, stage: str, big_rows: str) -> None:
    """Steps 1-3 fit; step 4 (``big_rows`` rows per rank) does not fit the stage of the last node (a small tmpfs
    the test mounted): every rank gets the same error, naming the node, the file and the cause; step 3, the
    newest checkpoint that completed, still restarts from the stages."""
    r, n = comm.Get_rank(), comm.Get_size()
    s = write_steps(comm, scheme, out, stage)
    big = int(big_rows)
    try:
        with s.create(4, attrs={"step": 4}) as ck:
            ck.write("x", np.full((big, 5), float(r)), offset=(big * r, 0), global_shape=(big * n, 5))
        s.wait()
        said = None
    except ckptio.CheckpointError as exc:
        said = f"{type(exc).__name__}: {exc}"
    found, warned = latest(comm, scheme, out, stage)
    assert found == os.path.join(out, "chk_000003"), (found, warned)
    check_restart(comm, found, 3)
    report(comm, said=said, found=os.path.basename(found), ok=True)


def bad_args(comm, out: str, stage: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    errors = []
    for kw in ({"stage_dir": stage, "redundancy": "raid" if r == n - 1 else "xor"},
               {"redundancy": "partner"},
               {"stage_dir": stage, "redundancy": "xor", "drain_every": 0}):
        try:
            ckptio.Series(out, comm, **kw)
            errors.append(None)
        except ckptio.CheckpointError as exc:
            errors.append(str(exc))
    s = ckptio.Series(out, comm, stage_dir=stage, redundancy="partner", failure_group=f"rack{r}")
    try:
        with s.create(1) as ck:
            ck.write("x", np.zeros(3), offset=(3 * r,), global_shape=(3 * n,))
        errors.append(None)
    except ckptio.CheckpointError as exc:
        errors.append(str(exc))
    comm.Barrier()  # every rank removed its piece of the refused checkpoint
    report(comm, errors=errors, pfs=sorted(n for n in os.listdir(out) if n.startswith("chk")),
           staged=stage_files(stage), ok=True)


def layout_to_leaders(comm, out: str) -> None:
    """4 ranks, "nodes" {0, 1} and {2, 3} (leaders 0 and 2); rank 2 holds the recorded level. Only the leaders
    receive the layout; then with rank 2's level damaged, every rank gets the same CheckpointError."""
    from ckptio.model import parity
    from ckptio.tiers import redundancy

    r = comm.Get_rank()
    views = [("h0", 0, None, []), ("h0", 0, None, []), ("h1", 2, None, []), ("h1", 2, None, [])]
    recorded = parity.plan_layout("partner", views)
    mine = os.path.join(out, f"rank{r}")
    level = os.path.join(mine, redundancy.SUBDIR, redundancy.LEVEL)
    if r == 2:
        os.makedirs(os.path.dirname(level))
        with open(level, "w") as f:
            json.dump({"level": recorded.to_json(), "node": 1, "parity": None}, f)
    comm.Barrier()
    got = redundancy._layout_to_leaders(comm, "test: the level", mine, r in (0, 2), root=2)
    comm.Barrier()
    if r == 2:
        with open(level, "w") as f:
            f.write("{not json")
    comm.Barrier()
    try:
        redundancy._layout_to_leaders(comm, "test: the damaged level", mine, r in (0, 2), root=2)
        damaged = None
    except ckptio.CheckpointError as exc:
        damaged = f"{type(exc).__name__}: {exc}"
    report(comm, layout=None if got is None else got.to_json(), same=got == recorded if got else None,
           damaged=damaged, ok=True)


CASES = {"lose": lose, "write": write, "restart": restart, "other": other, "full": full, "bad_args": bad_args,
         "layout_to_leaders": layout_to_leaders}

if __name__ == "__main__":
    from dispatch import run_case

    if os.environ.get("MULTILEVEL_CHUNK"):  # many chunks per stream for these few-hundred-byte pieces
        from ckptio.coord import redundancy as wire

        wire.CHUNK = int(os.environ["MULTILEVEL_CHUNK"])

    sys.exit(run_case(CASES, sys.argv[1:]))
