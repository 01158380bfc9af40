"""The MPI programs of ``tests/test_async_series.py`` (``mpirun -n P python async_series.py CASE ARGS...``).

Every case prints ``OK <rank>`` when all its checks passed (an assertion ends the job otherwise):

* ``async_snapshot PATH BACKEND``: an async checkpoint holds the values of ``close()`` although the arrays change
  right after; a failing background checkpoint raises DeclarationError on every rank at ``wait()``;
* ``keep_and_fallback DIR BACKEND MODE``: ``Series(keep=2)`` keeps the last two; ``latest()`` falls back past a newest
  checkpoint with one flipped data byte, with a warning on rank 0;
* ``staged DIR STAGE BACKEND``: staged checkpoints drain; the stage holds the newest only, under a key directory;
  a final copy lost after the drain is drained again by ``latest()``;
* ``compression PATH``: ``zstd`` and ``zstd+shuffle:5`` round trips (the codec recorded per block), and
  CapabilityError for compression on hdf5;
* ``background_results DIR sync|async|staged``: 0-d variables survive, and after ``wait()`` the statistics and
  the document are what a synchronous ``close()`` gives, for every backend.
"""

from __future__ import annotations

import os
import sys
import warnings

import internals
import numpy as np

import ckptio


def async_snapshot(comm, path: str, backend: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    u = np.full((1000, 64), float(r))
    v = np.asfortranarray(np.arange(60.0).reshape(6, 10) + r)
    with ckptio.create(path, comm, backend=backend, mode="async") as ck:
        ck.write("u", u, offset=(1000 * r, 0), global_shape=(1000 * n, 64))
        ck.write("v", v, offset=(6 * r, 0), global_shape=(6 * n, 10))
    u[:] = -1.0          # the simulation overwrites its state right away
    v[:] = -1.0
    ck.wait()
    assert ck.done()
    with ckptio.open(path, comm) as rd:
        got = rd.read("u")
        assert (got == np.repeat(np.arange(n, dtype=float), 1000)[:, None]).all(), "async checkpoint lost the snapshot"
        want = np.concatenate([np.arange(60.0).reshape(6, 10) + k for k in range(n)])
        assert (rd.read("v") == want).all()
    # a failing background checkpoint: the error reaches every rank at wait()
    bad = ckptio.create(path + "_bad", comm, backend=backend, mode="async")
    bad.write("x", np.zeros(3), offset=(2 * r,), global_shape=(2 * n + 1,))
    bad.close()
    try:
        bad.wait()
        raise SystemExit("no error from an overlapping async checkpoint")
    except ckptio.DeclarationError as exc:
        assert "'x'" in str(exc)
    print("OK", r, flush=True)


def keep_and_fallback(comm, d: str, backend: str, mode: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    series = ckptio.Series(d, comm, keep=2, backend=backend, mode=mode)
    for step in range(1, 6):
        with series.create(step, attrs={"step": step}) as ck:
            ck.write("x", np.full(8, step, np.int64), offset=(8 * r,), global_shape=(8 * n,))
    series.wait()
    left = sorted(n for n in os.listdir(d) if not n.endswith(".ckptio-lease"))  # (the series lease: ckptio.tiers.lease)
    assert left == ["chk_000004", "chk_000005"], os.listdir(d)
    assert series.latest() == os.path.join(d, "chk_000005")
    if r == 0:  # corrupt one data byte of the newest checkpoint
        offset, _ = internals.extent_span(os.path.join(d, "chk_000005"), 0)
        internals.flip_byte(os.path.join(d, "chk_000005"), offset)
    comm.Barrier()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = series.latest()
    assert found == os.path.join(d, "chk_000004"), found
    if r == 0:
        assert any("chk_000005" in str(w.message) and "checksum" in str(w.message) for w in caught), caught
    with ckptio.open(found, comm) as ck:
        assert ck.attrs["step"] == 4 and (ck.read("x") == 4).all()
    print("OK", r, flush=True)


def staged(comm, d: str, stage: str, backend: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    series = ckptio.Series(d, comm, keep=3, backend=backend, stage_dir=stage)
    for step in (1, 2):
        with series.create(step) as ck:
            ck.write("y", np.full((4, 3), 10 * step + r, np.float32), offset=(4 * r, 0), global_shape=(4 * n, 3))
    series.wait()
    final = os.path.join(d, "chk_000002")
    assert os.path.exists(final)
    # the stage holds the newest drained checkpoint only, under a directory named by the final directory
    key = internals.staged_key_dir(stage, final)
    assert sorted(os.listdir(stage)) == [os.path.basename(key)], os.listdir(stage)
    assert sorted(os.listdir(key)) == ["chk_000002"], os.listdir(key)
    assert series.latest() == final
    if r == 0:
        os.unlink(final)                       # the drain "did not finish": restart drains the staged copy again
    comm.Barrier()
    assert series.latest() == final and os.path.exists(final)
    with ckptio.open(final, comm) as ck:
        assert (ck.read("y") == (20 + np.repeat(np.arange(n), 4))[:, None]).all()
    print("OK", r, flush=True)


def compression(comm, path: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    x = np.linspace(0, 1, 20000).reshape(200, 100) + r
    for spec in ("zstd", "zstd+shuffle:5"):
        with ckptio.create(path, comm, compression=spec) as ck:
            ck.write("x", x, offset=(200 * r, 0), global_shape=(200 * n, 100))
            ck.write("ids", np.arange(r * 3, dtype=np.int64))
        with ckptio.open(path, comm, buffer_bytes=4096) as ck:
            assert (ck.read("x", offset=(200 * r, 0), shape=(200, 100)) == x).all()
            b = internals.stored_blocks(path, "x")[0]
            assert b["codec"] == spec.split(":")[0] + ":" + (spec.split(":")[1] if ":" in spec else "3")
            assert b["stored_nbytes"] < 200 * 100 * 8
    try:
        ckptio.create(path + "_h5", comm, backend="hdf5", compression="zstd").close()  # raised in its first phase
        raise SystemExit("hdf5 accepted compression")
    except ckptio.CapabilityError as exc:
        assert "compression" in str(exc)
    print("OK", r, flush=True)


def background_results(comm, d: str, how: str) -> None:
    BlockTable = internals.block_table_type()
    rank, size = comm.Get_rank(), comm.Get_size()
    for backend in ("mpiio", "hdf5", "pnetcdf"):
        path = f"{d}/{how}_{backend}"
        kw = {"stage_dir": f"{d}/stage"} if how == "staged" else {"mode": how}
        w = ckptio.create(path, comm, backend=backend, **kw)
        if rank == 0:  # a 0-d variable (the staged copy made it 1-d: the drain refused it), as a numpy scalar too
            w.write("e", np.array(2.5), offset=(), global_shape=())
            w.write("f", np.float32(3.5), offset=(), global_shape=())
        w.write("x", np.full(4, rank, np.float64), offset=(4 * rank,), global_shape=(4 * size,))
        w.close()
        w.wait()
        # after wait() as after a synchronous close(): the statistics and the document (rank 0's whole)
        assert w.stats.bytes_total == 32 * size + 12, w.stats
        assert "write" in w.stats.seconds, w.stats
        var = w.meta["variables"]["x"]
        assert isinstance(var["blocks"], BlockTable) if rank == 0 else var["nblocks"] == size, var
        with ckptio.open(path, comm) as ck:
            assert float(ck.read("e")) == 2.5 and float(ck.read("f")) == 3.5 and ck.read("f").dtype == np.float32
            assert np.array_equal(ck.read("x", (4 * rank,), (4,)), np.full(4, rank))
    print("OK", rank)


CASES = {"async_snapshot": async_snapshot, "keep_and_fallback": keep_and_fallback, "staged": staged,
         "compression": compression, "background_results": background_results}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
