"""MPI programs of issue 23's series cases (``mpirun -n P python series_job.py CASE DIR [ARGS]``).

Every rank prints ``OK <rank>`` when its checks passed; a failed check raises (the job exits non-zero). Cases:

    identityless DIR MODE KEEP [BACKEND]
                                 chk_10/20/30 by ckptio.create (no series identity); a Series(keep=KEEP) run
                                 (MODE sync, async or staged) restarts from 20 and writes 21, 22, 23: each
                                 survives its own commit, 30 is abandoned, latest() is the run's own newest
    copied DIR                   a checkpoint copied in from another run's series never supersedes this run's
                                 newer ones, and retention never deletes it
    legacy DIR                   checkpoints with an older ckptio's counter attribute continue as before
    restart_step DIR             create(step) of the step the run restarted from: refused on every rank
    settings DIR                 collective CKPTIO_* settings that differ between ranks, or are misspelt on one
                                 rank: the same DeclarationError on every rank (restart and write), no hang
    replaced DIR VERIFY          a checkpoint replaced by rename after open(): the next read is a clear error on
                                 every rank, never "corrupt" nor the new file's values; after a first read the
                                 file is held and the old values keep coming
    near_miss DIR                one name rule for Series and ckptio.latest ("chk_" is the stem "chk_"); a
                                 directory holding only near-miss names warns, and is an error with must_exist
    staged_full DIR STAGE        (DIR is a small file system) a staged Series whose drain fails: the next
                                 checkpoint is still written, the failure reported once; a new job's latest()
                                 falls back instead of raising on the failed re-drain
    lease_a DIR CTL EXPECT       job A: writes step 1, signals CTL/a, waits for CTL/b, writes step 2 (EXPECT: ok,
                                 or taken: refused on every rank because job B took the lease over)
    lease_b DIR CTL EXPECT       job B on the same series: EXPECT refused (A is live) or took (A's lease stale)
    lease_dead DIR               writes step 1 and leaves without any exit handler (as a killed job does)
    lease_node_level DIR STAGE   checkpoints kept on the nodes only (drain_every): each refreshes the lease, and
                                 one after another job took the series over fails on every rank
    exit_in_flight DIR BACKEND N write N background checkpoints (mode="async") and leave the program without any
                                 wait(): every one must be committed (the checker runs afterwards)
    bad_arguments DIR            every collective entry point with a bad value on the LAST rank only: the same
                                 error class on every rank, no hang
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings

import numpy as np
from mpi4py import MPI

import ckptio

comm = MPI.COMM_WORLD
rank, nprocs = comm.Get_rank(), comm.Get_size()


def write(target, step: int, **kw) -> ckptio.Writer:
    """Write step ``step`` (its values say which step it is) into a Series or a path."""
    writer = target.create(step, attrs={"step": step}, **kw) if isinstance(target, ckptio.Series) else \
        ckptio.create(target, comm, attrs={"step": step}, **kw)
    with writer as ck:
        ck.write("x", np.full(4, step, np.int64), offset=(4 * rank,), global_shape=(4 * nprocs,))
    return writer


def names(d: str) -> list[str]:
    return sorted(n for n in os.listdir(d) if n.startswith("chk_") and n[4:].isdigit())


def step_of(path: str) -> int:
    with ckptio.open(path, comm) as ck:
        values, step = ck.read("x"), ck.attrs["step"]
    assert (values == step).all(), path
    return int(step)


def on_root(fn) -> None:
    if rank == 0:
        fn()
    comm.Barrier()


def identityless(d: str, mode: str, keep: str, backend: str = "mpiio") -> None:
    keep_n = int(keep)
    for step in (10, 20, 30):
        write(os.path.join(d, f"chk_{step:06d}"), step, backend=backend)
    options = {"stage_dir": d + "-stage"} if mode == "staged" else {"mode": mode}
    series = ckptio.Series(d, comm, keep=keep_n, backend=backend, **options)
    for step in (21, 22, 23):
        writer = write(series, step)
        writer.wait()
        comm.Barrier()
        assert f"chk_{step:06d}" in names(d), (step, names(d))  # never deleted right after its own commit
        assert "chk_000020" in names(d), names(d)  # the restart point
    series.wait()
    want = {1: ["chk_000020", "chk_000023"], 2: ["chk_000020", "chk_000022", "chk_000023"]}[keep_n]
    assert names(d) == want, (keep_n, names(d))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing skipped: 30 is gone, not merely passed over
        assert ckptio.latest(d, comm=comm) == os.path.join(d, "chk_000023")
        assert ckptio.Series(d, comm, must_exist=True).latest() == os.path.join(d, "chk_000023")
    assert step_of(os.path.join(d, "chk_000023")) == 23


def copied(d: str) -> None:
    ref, prod = os.path.join(d, "ref"), os.path.join(d, "prod")
    reference = ckptio.Series(ref, comm, keep=100)
    for step in range(10, 50, 10):
        write(reference, step)
    production = ckptio.Series(prod, comm, keep=3)
    for step in (60, 70, 80):
        write(production, step)
    on_root(lambda: shutil.copy2(os.path.join(ref, "chk_000040"), os.path.join(prod, "chk_000040")))
    restart = ckptio.Series(prod, comm, keep=3, must_exist=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "superseded" warning about the run's own checkpoints
        assert restart.latest() == os.path.join(prod, "chk_000080")
        assert ckptio.latest(prod, comm=comm) == os.path.join(prod, "chk_000080")
    write(restart, 90)
    # keep=3 keeps 90, 80, 70; 60 goes by retention; the copied 40 is another series': never deleted
    assert names(prod) == ["chk_000040", "chk_000070", "chk_000080", "chk_000090"], names(prod)
    assert restart.latest() == os.path.join(prod, "chk_000090")
    # a run that deliberately restarts from the copy abandons everything above it, whoever wrote it
    again = ckptio.Series(prod, comm, keep=10)
    write(again, 41)
    assert again.latest() == os.path.join(prod, "chk_000041")
    with ckptio.open(os.path.join(prod, "chk_000041"), comm) as ck:
        assert ck.attrs == {"step": 41}, ck.attrs  # the identity is not among the user's attributes


def legacy(d: str) -> None:
    # an older ckptio's Series: the counter attribute; a rerun from 20 wrote 25 later (counter 4)
    for step, seq in ((10, 1), (20, 2), (30, 3), (25, 4)):
        path = os.path.join(d, f"chk_{step:06d}")
        with ckptio.create(path, comm, attrs={"step": step, "ckptio_series_seq": seq}) as ck:
            ck.write("x", np.full(4, step, np.int64), offset=(4 * rank,), global_shape=(4 * nprocs,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        series = ckptio.Series(d, comm, keep=2)
        assert series.latest() == os.path.join(d, "chk_000025")
    write(series, 26)
    assert names(d) == ["chk_000025", "chk_000026"], names(d)  # 30 superseded first, then by keep=2


def restart_step(d: str) -> None:
    series = ckptio.Series(d, comm, keep=3)
    for step in (10, 20):
        write(series, step)
    run = ckptio.Series(d, comm, keep=3)
    assert run.latest() == os.path.join(d, "chk_000020")
    before = os.stat(os.path.join(d, "chk_000020")).st_mtime_ns
    try:
        write(run, 20)
        raise AssertionError("create() of the restart step was not refused")
    except ckptio.DeclarationError as exc:
        assert "restarted from" in str(exc), exc
    assert os.stat(os.path.join(d, "chk_000020")).st_mtime_ns == before
    write(run, 21)  # the run goes on
    assert run.latest() == os.path.join(d, "chk_000021")


def expect_everywhere(label: str, error: type[BaseException], call, culprit: int | None = -1) -> None:
    """``call()`` must raise ``error`` on every rank (agreed, not hung), naming rank ``culprit`` (default: the
    last, where the tests put their bad value; None: the failure is rank 0's own, no rank named)."""
    try:
        call()
    except error as exc:
        text = str(exc)
        culprit = nprocs - 1 if culprit == -1 else culprit
        assert culprit is None or f"rank {culprit}" in text or nprocs == 1, (label, text)
        return
    raise AssertionError(f"{label}: nothing raised on rank {rank}")


def bad_arguments(d: str) -> None:
    last = rank == nprocs - 1

    def bad(good, wrong):
        return wrong if last else good

    series_cases = {
        "keep=0": {"keep": bad(3, 0)}, "keep=2.0": {"keep": bad(3, 2.0)},
        "must_exist": {"must_exist": bad(False, "yes")}, "prefix empty": {"prefix": bad("chk", "")},
        "prefix slash": {"prefix": bad("chk", "a/b")}, "backend": {"backend": bad("mpiio", "hdf5f")},
        "mode": {"mode": bad("sync", "asynch")},
        "compression": {"backend": "hdf5", "compression": bad(None, "zstd")},
    }
    if nprocs > 1:
        series_cases["keep differs"] = {"keep": bad(3, 4)}
    for label, kw in series_cases.items():
        expect_everywhere(f"Series({label})", ckptio.CheckpointError, lambda kw=kw: ckptio.Series(d, comm, **kw))
    for label, step in (("create(-1)", -1), ("create(1.0)", 1.0), ("create('7')", "7")):
        # the first create() of a series (collective: it reads the timeline) and a later one (local until close)
        series = ckptio.Series(d, comm, keep=3)
        expect_everywhere(f"first Series.{label}", ckptio.CheckpointError,
                          lambda step=step, series=series: write(series, bad(5, step)))
        write(series, 4)
        expect_everywhere(f"later Series.{label}", ckptio.CheckpointError,
                          lambda step=step, series=series: write(series, bad(5, step)))
    write(series, 5)  # the series still works
    create_cases = {"hints": {"hints": bad(None, 42)}, "compression": {"compression": bad(None, "lz4")},
                    "mode": {"mode": bad("sync", "turbo")}, "backend": {"backend": bad("mpiio", "nope")}}
    for label, kw in create_cases.items():
        expect_everywhere(f"create({label})", ckptio.CheckpointError,
                          lambda kw=kw: write(os.path.join(d, "single"), 1, **kw))
    expect_everywhere("latest(prefix)", ckptio.DeclarationError,
                      lambda: ckptio.latest(d, comm=comm, prefix=bad("chk", "a/b")))
    if nprocs > 1:
        expect_everywhere("latest(verify differs)", ckptio.DeclarationError,
                          lambda: ckptio.latest(d, comm=comm, verify=bad(False, True)))
    assert ckptio.latest(d, comm=comm) == os.path.join(d, "chk_000005")


def settings(d: str) -> None:
    path = os.path.join(d, "chk_000001")
    write(path, 1)
    cases = [("CKPTIO_READ_IO", "posix", "mpiio"), ("CKPTIO_READ_THREAD", "1", "maybe"),
             ("CKPTIO_READ_IO", "posix", "turbo"), ("CKPTIO_HINTS", "", "cb_nodes=1")]
    for name, good, wrong in cases:
        if nprocs == 1 and wrong in ("mpiio", "cb_nodes=1"):
            continue  # a difference needs two ranks
        os.environ[name] = wrong if rank == nprocs - 1 else good

        def restart() -> None:
            with ckptio.open(path, comm) as ck:
                ck.read("x")

        expect_everywhere(f"open with {name}", ckptio.DeclarationError, restart)
        expect_everywhere(f"create with {name}", ckptio.DeclarationError,
                          lambda: write(os.path.join(d, "chk_000002"), 2))
        del os.environ[name]
    assert step_of(path) == 1 and names(d) == ["chk_000001"], names(d)


def replaced(d: str, verify: str) -> None:
    path, other = os.path.join(d, "chk_000020"), os.path.join(d, "chk_000099")
    write(path, 20)
    write(other, 99)
    with ckptio.open(path, comm, verify=verify == "true") as ck:
        on_root(lambda: os.replace(other, path))  # a rerun renamed a new chk_000020 onto the name
        expect_everywhere("read after replace", ckptio.CheckpointIOError, lambda: ck.read("x"), culprit=None)
    write(other, 99)
    with ckptio.open(path, comm, verify=verify == "true") as ck:
        first = ck.read("x")
        on_root(lambda: os.replace(other, path))
        again = ck.read("x")  # the aggregators hold the file they opened: still the checkpoint that was opened
    assert (first == 99).all() and (again == 99).all(), (first, again)  # (chk_000020 now holds step 99's data)


def near_miss(d: str) -> None:
    for name, step in (("chk_10.h5", 10), ("CHK_000020", 20)):
        write(os.path.join(d, name), step)
    try:
        ckptio.Series(d, comm, must_exist=True).latest()
        raise AssertionError("must_exist=True: a directory of near-miss names was taken for an empty series")
    except ckptio.CheckpointIOError as exc:
        assert "chk_10.h5" in str(exc) and "CHK_000020" in str(exc), exc
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ckptio.Series(d, comm).latest() is None
        assert ckptio.latest(d, comm=comm) is None
    if rank == 0:
        assert sum("another pattern" in str(w.message) for w in caught) == 2, [str(w.message) for w in caught]
    series = ckptio.Series(d, comm, prefix="chk_")
    write(series, 30)
    assert "chk_000030" in os.listdir(d), os.listdir(d)  # not chk__000030
    for latest in (series.latest(), ckptio.latest(d, prefix="chk_", comm=comm), ckptio.latest(d, comm=comm)):
        assert latest == os.path.join(d, "chk_000030"), latest


def staged_full(d: str, stage: str) -> None:
    series = ckptio.Series(d, comm, keep=5, stage_dir=stage)

    def staged(step: int, count: int) -> ckptio.Writer:
        with series.create(step, attrs={"step": step}) as ck:
            ck.write("x", np.full(count, step, np.int64), offset=(count * rank,), global_shape=(count * nprocs,))
        return ck

    staged(1, 1000)
    series.wait()
    staged(2, (4 << 20) // 8 // nprocs)  # 4 MiB: its drain cannot fit
    reported = 0
    try:
        staged(3, 1000)  # written whatever happened to step 2 (the failure may be reported here, once)
    except ckptio.CheckpointError as exc:
        assert "chk_000002" in str(exc) + "".join(getattr(exc, "__notes__", [])), exc
        reported += 1
    try:
        series.wait()
    except ckptio.CheckpointError as exc:
        assert "chk_000002" in str(exc) + "".join(getattr(exc, "__notes__", [])), exc
        reported += 1
    assert reported == 1, reported
    assert names(d) == ["chk_000001", "chk_000003"], names(d)
    assert step_of(os.path.join(d, "chk_000003")) == 3
    # a job whose newest staged checkpoint is the one that never drained: its re-drain fails again
    on_root(lambda: os.unlink(os.path.join(d, "chk_000003")))
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        found = ckptio.Series(d, comm, stage_dir=stage).latest()
    assert found in (os.path.join(d, "chk_000001"), os.path.join(d, "chk_000003")), found  # 3 may re-drain


def _wait_for(path: str, seconds: float = 90.0) -> None:
    import time

    end = time.monotonic() + seconds
    while not os.path.exists(path):
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.1)


def lease_a(d: str, ctl: str, expect: str) -> None:
    series = ckptio.Series(d, comm, keep=10)
    write(series, 1)
    on_root(lambda: open(os.path.join(ctl, "a"), "w").close())
    _wait_for(os.path.join(ctl, "b"))
    if expect == "ok":
        write(series, 2)
        assert series.latest() == os.path.join(d, "chk_000002")
        return
    expect_everywhere("A after B took over", ckptio.CheckpointIOError, lambda: write(series, 2), culprit=None)
    assert "chk_000002" not in names(d), names(d)
    on_root(lambda: open(os.path.join(ctl, "a2"), "w").close())  # B may leave now


def lease_b(d: str, ctl: str, expect: str) -> None:
    series = ckptio.Series(d, comm, keep=10)
    try:
        if expect == "refused":
            try:
                write(series, 10)
                raise AssertionError("a second job wrote a series another live job holds")
            except ckptio.CheckpointIOError as exc:
                assert "being written by another job" in str(exc) and "pid" in str(exc), exc
            assert "chk_000010" not in names(d), names(d)
        else:
            write(series, 10)
            assert step_of(os.path.join(d, "chk_000010")) == 10
    finally:
        on_root(lambda: open(os.path.join(ctl, "b"), "w").close())
    if expect == "took" and os.path.exists(os.path.join(ctl, "wait-a2")):
        _wait_for(os.path.join(ctl, "a2"))  # stay live (holding the lease) until A tried its next checkpoint


def lease_node_level(d: str, stage: str) -> None:
    """A Series that keeps its checkpoints on the nodes only (drain_every=5, staged in the background): each one
    is the lease's heartbeat, and one written after another job took the series over fails on every rank, as a
    drained one does."""
    import time

    from ckptio.tiers import lease

    series = ckptio.Series(d, comm, keep=10, stage_dir=stage, drain_every=5)
    path = os.path.join(d, ".chk_.ckptio-lease")
    write(series, 1)
    series.wait()
    on_root(lambda: os.utime(path, (time.time() - 3600, time.time() - 3600)))  # an old heartbeat
    write(series, 2)
    series.wait()
    fresh = comm.bcast(rank == 0 and os.stat(path).st_mtime > time.time() - 600)  # (every rank fails alike)
    assert fresh, "no heartbeat after a checkpoint kept on the nodes"
    on_root(lambda: lease._write(path, lease.Lease("other-run", "elsewhere", 1, None)))
    expect_everywhere("a node-level checkpoint after another job took over", ckptio.CheckpointIOError,
                      lambda: (write(series, 3), series.wait()), culprit=None)
    assert names(d) == [], names(d)  # nothing drained: every checkpoint stayed on the node level


def lease_dead(d: str) -> None:
    write(ckptio.Series(d, comm, keep=10), 1)
    comm.Barrier()
    MPI.Finalize()
    os._exit(0)  # no exit handler runs: the lease stays, as when the job is killed


def exit_in_flight(d: str, backend: str, count: str) -> None:
    series = ckptio.Series(d, comm, keep=100, backend=backend, mode="async")
    for step in range(1, int(count) + 1):
        write(series, step)
    # no series.wait(): the interpreter's exit must finish them before any library's own exit handler runs


CASES = {"identityless": identityless, "copied": copied, "legacy": legacy, "restart_step": restart_step,
         "bad_arguments": bad_arguments, "exit_in_flight": exit_in_flight,
         "settings": settings, "replaced": replaced, "near_miss": near_miss, "staged_full": staged_full,
         "lease_a": lease_a, "lease_b": lease_b, "lease_dead": lease_dead, "lease_node_level": lease_node_level}

if __name__ == "__main__":
    case, directory, *rest = sys.argv[1:]
    CASES[case](directory, *rest)
    comm.Barrier()
    print("OK", rank, flush=True)
