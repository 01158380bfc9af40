"""The MPI programs of ``tests/test_retention.py`` (``mpirun -n P python retention.py [--user-exit-handler] CASE
ARGS...``). Every case prints ``OK <rank>`` when its checks passed (an assertion ends the job otherwise).

* ``adversarial DIR sync|async|staged``: a Series owns only its exact names (another series' checkpoints, a
  user's look-alike files, a write still going on stay) and applies keep=2 as each checkpoint commits;
* ``restart DIR KEEP rerun|fallback``: a new run restarting from an older step (chosen, or because the newer
  ones are corrupt) keeps its source and supersedes the newer checkpoints; corrupt ones are kept (marked), and
  moved aside when the run commits a checkpoint under their name;
* ``all_damaged DIR``: every checkpoint of a series is damaged: a restart job (``must_exist=True``) stops with an
  error naming them on every rank; a run that starts over keeps them (marked: never chosen, never deleted, no
  ``keep`` place), moves one aside when it reuses its name, and retention drops a mark whose file is gone;
* ``suffix DIR``: a Series with ``suffix=".h5"``; ``missing_directory DIR``: a missing directory (or a file in
  its place) is an error on every rank;
* ``async_failure DIR 0|close|1``: a failed background checkpoint is raised by ``Series.wait()`` (0), by the
  second-next ``close()`` (close), or reported at exit (1: the program prints ``EXITING <rank>`` and exits 0
  without waiting); with ``--user-exit-handler`` an exit handler is registered before ckptio is imported (it
  prints ``USER HANDLER RAN``);
* ``series_args DIR``: arguments that differ between ranks (``REFUSED <rank>`` three times), an empty prefix
  (``EMPTY <rank>``);
* ``must_exist DIR``: ``Series(must_exist=True)`` refuses a misspelt or a file directory on every rank;
* ``own_exception_async PATH``: rank 1's exception fails an async checkpoint; every rank handles its error
  (``HANDLED <rank>``), and nothing is reported again at exit.

ckptio is imported by each case (not by this module) so that the user's exit handler comes first.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import warnings

import internals
import numpy as np


# ------------------------------------------------------------------------------------- shared by the cases
def write(comm, series, step, **kw):
    r, n = comm.Get_rank(), comm.Get_size()
    with series.create(step, attrs={"step": step}, **kw) as ck:
        ck.write("x", np.full(4, step, np.int64), offset=(4 * r,), global_shape=(4 * n,))
    return ck


def ours(d, suffix=""):
    return sorted(f for f in os.listdir(d) if re.fullmatch(r"chk_[0-9]{6}" + re.escape(suffix), f))


def corrupt(comm, path):
    if comm.Get_rank() == 0:
        offset, _ = internals.extent_span(path, 0)
        internals.flip_byte(path, offset)
    comm.Barrier()


def step_of(comm, path):
    import ckptio

    with ckptio.open(path, comm) as rd:
        return rd.attrs["step"]


# ----------------------------------------------------------------------------------------------- the cases
def adversarial(comm, d: str, mode: str) -> None:
    import ckptio

    r = comm.Get_rank()
    other = ckptio.Series(d, comm, prefix="chk_fine", keep=5)          # a second series in the same directory
    for s in (300, 400):
        write(comm, other, s)
    junk = ["chk_notes.txt", "chk_job.log", "chk_000001.bak", "chk_000099.h5", "chk_000002-1-4242.lock",
            ".locktest.chk_000003", "chk_00005", ".chk_000002.ckptio-tmp-xyz",
            ".chk_fine_000500.ckptio-tmp-0123456789ab"]
    stale = ".chk_000002.ckptio-tmp-0123456789ab"     # a killed write's leftover, older than any new commit
    fresh = ".chk_000009.ckptio-tmp-abcdef012345"     # a write that may still be going on (newer than every commit)
    if r == 0:
        for name in [*junk, stale, fresh]:
            with open(os.path.join(d, name), "wb") as f:
                f.write(b"user data " * 100)
        os.utime(os.path.join(d, stale), (1, 1))
        os.utime(os.path.join(d, fresh), (4e9, 4e9))
    comm.Barrier()
    # staged: retention at each drain's commit
    kw = {"stage_dir": d + "-stage"} if mode == "staged" else {"mode": mode}
    series = ckptio.Series(d, comm, prefix="chk", keep=2, **kw)
    for s in range(1, 9):
        ck = write(comm, series, s)
        ck.wait()            # Writer.wait only: retention must already have run (as the checkpoint committed)
        comm.Barrier()
        if s >= 2:
            assert ours(d) == [f"chk_{s - 1:06d}", f"chk_{s:06d}"], (s, ours(d))
    left = sorted(os.listdir(d))
    for name in [*junk, fresh, "chk_fine_000300", "chk_fine_000400"]:
        assert name in left, (name, left)
    assert stale not in left, left
    assert series.latest() == os.path.join(d, "chk_000008")
    assert other.latest() == os.path.join(d, "chk_fine_000400")
    assert ckptio.latest(d, comm=comm) == os.path.join(d, "chk_000008")
    series.wait()
    assert sorted(os.listdir(d)) == left
    comm.Barrier()   # no rank exits (releasing the series' lease, ckptio.tiers.lease) before every rank has looked
    print("OK", r, flush=True)


def restart(comm, d: str, keep_arg: str, how: str) -> None:
    import ckptio

    r = comm.Get_rank()
    keep = int(keep_arg)
    first = ckptio.Series(d, comm, keep=10)
    for s in range(1, 7):
        write(comm, first, s)
    first.wait()
    run = ckptio.Series(d, comm, keep=keep)                  # a new run
    if how == "rerun":                                       # the user reruns from step 3 while 4..6 exist
        source = run.path(3)
        assert step_of(comm, source) == 3
    else:                                                    # the two newest are corrupt: latest() falls back
        corrupt(comm, run.path(6))
        corrupt(comm, run.path(5))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            source = run.latest()
        assert source == run.path(4), source
    start = int(source[-6:]) + 1
    write(comm, run, start)
    names = ours(d)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run.latest() == run.path(start), names
        assert ckptio.latest(d) == run.path(start)
    want = {1: [source, run.path(start)], 2: [source, run.path(start)]}.get(keep)
    if want is not None:
        if how == "fallback":  # the damaged 6 is marked and kept; the damaged 5 was moved aside by the new 5
            want.append(run.path(6))
            assert os.path.isfile(run.path(5) + ".damaged"), os.listdir(d)
        assert names == sorted(os.path.basename(p) for p in want), (keep, names)
    else:  # keep=10: nothing deleted, but the abandoned newer ones are never chosen again
        assert len(names) == 6 and run.path(6)[-10:] in names
        corrupt(comm, run.path(start))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found = run.latest()
        assert found == source, found      # not chk_000006 (superseded)
        if r == 0:
            assert any("superseded" in str(w.message) and "chk_000006" in str(w.message) for w in caught), caught
    write(comm, run, start + 1)
    names = ours(d)
    if keep == 1:
        assert names == sorted(os.path.basename(p) for p in (source, run.path(start + 1))), names
    if keep == 2:
        assert names == sorted(os.path.basename(p) for p in (source, run.path(start), run.path(start + 1))), names
    assert run.latest() == run.path(start + 1)
    assert step_of(comm, run.path(start + 1)) == start + 1
    print("OK", r, flush=True)


def all_damaged(comm, d: str) -> None:
    import shutil

    import ckptio
    from ckptio.tools.cli import inspect_report
    from ckptio.tools.commands.ls import list_run

    def marks(directory=d):
        return sorted(f for f in os.listdir(directory) if f.endswith(".ckptio-damaged"))

    r = comm.Get_rank()
    first = ckptio.Series(d, comm, keep=3)
    for s in (10, 20, 30):
        write(comm, first, s)
    corrupt(comm, first.path(10))  # data damaged: marked by the lookup
    corrupt(comm, first.path(20))
    if r == 0:  # truncated: its metadata does not read (never marked, never deleted, moved aside by a new 30)
        os.truncate(first.path(30), os.path.getsize(first.path(30)) // 2)
    comm.Barrier()
    job = ckptio.Series(d, comm, keep=1, must_exist=True)   # a restart job
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            job.latest()
        except ckptio.CorruptCheckpointError as exc:
            assert "3 checkpoint(s)" in str(exc) and "chk_000030, chk_000020, chk_000010" in str(exc), exc
            assert "must_exist=False" in str(exc), exc
        else:
            raise AssertionError("a restart job over a series of damaged checkpoints did not stop")
    assert job.skipped == (first.path(30), first.path(20), first.path(10)), job.skipped
    assert marks() == [".chk_000010.ckptio-damaged", ".chk_000020.ckptio-damaged"], marks()
    if r == 0:  # ``ckptio ls`` (no --verify) shows what latest() would skip, and no newest valid checkpoint
        rows = list_run(d)
        assert [x.name for x in rows] == ["chk_000010", "chk_000020", "chk_000030"], rows
        assert all(x.status in ("corrupt", "incomplete") and not x.newest_valid for x in rows), rows
        assert all("marked damaged" in x.error for x in rows[:2]), rows
        code, report = inspect_report(first.path(20), False)  # ``ckptio inspect`` says so too (exit 1)
        assert code == 1 and report["status"] == "corrupt" and "marked damaged" in report["error"], report
        code, report = inspect_report(first.path(20), True)   # and --verify finds the damage itself
        assert code == 1 and "failed verification" in report["error"], report

    fresh = ckptio.Series(d, comm, keep=1)                    # a run that starts over on purpose
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert fresh.latest() is None
    if r == 0:  # skipped by their marks, without reading them again
        texts = [str(w.message) for w in caught]
        assert sum("marked damaged by ckptio" in t for t in texts) == 2, texts
    assert fresh.skipped == job.skipped
    size10, size30 = os.path.getsize(first.path(10)), os.path.getsize(first.path(30))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for s in (5, 10, 15, 30):
            write(comm, fresh, s)
    if r == 0:
        texts = [str(w.message) for w in caught]
        for name in ("chk_000010.damaged", "chk_000030.damaged"):
            assert any(name in t and "was a damaged checkpoint" in t for t in texts), (name, texts)
    comm.Barrier()
    assert ours(d) == ["chk_000020", "chk_000030"], ours(d)   # keep=1, and the damaged 20 (no keep place)
    assert os.path.getsize(first.path(10) + ".damaged") == size10   # the damaged 10, moved aside by the new 10
    assert os.path.getsize(first.path(30) + ".damaged") == size30   # the truncated 30, moved aside by the new 30
    assert marks() == [".chk_000010.damaged.ckptio-damaged", ".chk_000020.ckptio-damaged",
                       ".chk_000030.damaged.ckptio-damaged"], marks()
    if r == 0:
        status = {x.name: x.status for x in list_run(d)}
        assert status["chk_000010.damaged"] == "corrupt" and status["chk_000030"] == "valid", status
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert fresh.latest() == fresh.path(30)

    copy = d + "_copy"  # a copy that keeps modification times (cp -a, rsync -a): the marks still apply
    if r == 0:
        shutil.copytree(d, copy)
    comm.Barrier()
    elsewhere = ckptio.Series(copy, comm, keep=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write(comm, elsewhere, 40)
    assert ours(copy) == ["chk_000020", "chk_000030", "chk_000040"], ours(copy)  # (30: the restart point)
    assert ".chk_000020.ckptio-damaged" in marks(copy), marks(copy)

    if r == 0:
        os.remove(first.path(20))  # the user deletes it by hand: its mark no longer applies to anything
    comm.Barrier()
    fresh.prune()
    assert marks() == [".chk_000010.damaged.ckptio-damaged", ".chk_000030.damaged.ckptio-damaged"], marks()
    comm.Barrier()
    if r == 0:  # a set-aside file whose mark the user removed is still no series' valid checkpoint for ``ls``
        os.remove(os.path.join(d, ".chk_000010.damaged.ckptio-damaged"))
        row = next(x for x in list_run(d) if x.name == "chk_000010.damaged")
        assert row.status == "corrupt" and "set aside" in row.error and not row.newest_valid, row
    print("OK", r, flush=True)


def suffix(comm, d: str) -> None:
    import ckptio

    r = comm.Get_rank()
    series = ckptio.Series(d, comm, keep=5, suffix=".h5")
    for s in (5, 10):
        write(comm, series, s)
    assert ours(d, ".h5") == ["chk_000005.h5", "chk_000010.h5"]
    assert ckptio.latest(d, suffix=".h5", comm=comm) == os.path.join(d, "chk_000010.h5")
    assert series.latest() == os.path.join(d, "chk_000010.h5")
    assert ckptio.latest(d, comm=comm) is None             # no checkpoint named without the suffix
    print("OK", r, flush=True)


def missing_directory(comm, d: str) -> None:
    import ckptio

    r = comm.Get_rank()
    # rank 0's errors reach every rank (old code: rank 0 got NotADirectoryError, the others waited forever)
    gone = ckptio.Series(d + "_gone", comm)
    comm.Barrier()
    if r == 0:
        os.rmdir(d + "_gone")
        open(d + "_gone", "w").close()
    comm.Barrier()
    for call in (gone.latest, gone.prune):
        try:
            call()
            raise SystemExit(f"{call.__name__} on a file raised nothing")
        except ckptio.CheckpointIOError as exc:
            assert "_gone" in str(exc), exc
    series = ckptio.Series(d, comm, keep=5)
    assert ckptio.latest(d, comm=comm) is None and series.latest() is None   # an existing, empty directory
    write(comm, series, 1)
    missing, afile = d + "_missing", os.path.join(d, "chk_000001")
    for bad in (missing, afile):
        try:
            ckptio.latest(bad, comm=comm)
            raise SystemExit(f"latest({bad}) raised nothing")
        except ckptio.CheckpointIOError as exc:
            assert bad in str(exc), exc
        try:
            ckptio.latest(bad)
            raise SystemExit(f"local latest({bad}) raised nothing")
        except ckptio.CheckpointIOError as exc:
            assert bad in str(exc), exc
    try:
        ckptio.Series(afile, comm)
        raise SystemExit("Series on a file raised nothing")
    except ckptio.CheckpointIOError as exc:
        assert afile in str(exc), exc
    print("OK", r, flush=True)


def async_failure(comm, d: str, how: str) -> None:
    import ckptio

    r, n = comm.Get_rank(), comm.Get_size()
    exit_without_wait = how == "1"
    series = ckptio.Series(d, comm, keep=2, mode="async")
    write(comm, series, 1)
    write(comm, series, 2)
    bad = series.create(3)
    bad.write("x", np.zeros(3), offset=(2 * r,), global_shape=(2 * n,))    # past the end: fails in the I/O thread
    bad.close()
    write(comm, series, 4)                                                   # a good one after the failure
    if exit_without_wait:
        print("EXITING", r, flush=True)
        sys.exit(0)
    if how == "close":   # the second-next background close() reports it, and its own checkpoint is still written
        try:
            write(comm, series, 5)
            raise SystemExit("close() of step 5 did not report step 3")
        except ckptio.DeclarationError as exc:
            assert "chk_000003" in "".join(exc.__notes__), exc
        series.wait()    # already reported: nothing more to raise
        assert ours(d) == ["chk_000004", "chk_000005"], ours(d)
        print("OK", r, flush=True)
        sys.exit(0)
    try:
        series.wait()
        raise SystemExit("Series.wait() lost the failure of step 3")
    except ckptio.DeclarationError as exc:
        assert "chk_000003" in "".join(getattr(exc, "__notes__", [])) + str(exc), exc
    series.wait()                                                            # reported once
    assert ours(d) == ["chk_000002", "chk_000004"], ours(d)
    assert series.latest() == os.path.join(d, "chk_000004")
    print("OK", r, flush=True)


def series_args(comm, d: str) -> None:
    import ckptio

    r, n = comm.Get_rank(), comm.Get_size()
    for kw in ({"keep": 1 + (r == n - 1)}, {"prefix": "chk" if r else "ckp"},
               {"suffix": ".h5" if r == n - 1 else ""}):
        try:
            ckptio.Series(d, comm, **kw)
            print("ACCEPTED", kw, flush=True)
        except ckptio.DeclarationError as exc:
            assert "differs between ranks" in str(exc) and f"rank {n - 1}" in str(exc), exc
            print("REFUSED", r, flush=True)
    try:
        ckptio.Series(d, comm, prefix="")
    except ValueError as exc:
        assert "prefix=''" in str(exc) and "non-empty" in str(exc), exc
        print("EMPTY", r, flush=True)
    print("OK", r, flush=True)


def must_exist(comm, run: str) -> None:
    import ckptio

    rank = comm.Get_rank()
    typo = run + "_typo"
    first = ckptio.Series(run, comm, keep=2)                     # a new run: the directory is made
    assert first.created and os.path.isdir(run)
    with first.create(10) as ck:
        ck.write("x", np.full(2, rank, np.float64), offset=(2 * rank,), global_shape=(2 * comm.Get_size(),))
    again = ckptio.Series(run, comm, keep=2, must_exist=True)   # the restart job finds it
    assert not again.created and again.latest().endswith("chk_000010")
    try:                                                        # a misspelt restart directory: every rank raises
        ckptio.Series(typo, comm, keep=2, must_exist=True)
    except ckptio.CheckpointIOError as exc:
        assert "does not exist" in str(exc) and "must_exist=True" in str(exc), exc
    else:
        raise AssertionError("a missing restart directory was accepted")
    comm.Barrier()
    assert not os.path.exists(typo)                             # and nothing was created
    comm.Barrier()
    if rank == 0:
        open(typo, "w").close()
    comm.Barrier()
    try:
        ckptio.Series(typo, comm, must_exist=True)
    except ckptio.CheckpointIOError as exc:
        assert "is not a directory" in str(exc), exc
    else:
        raise AssertionError("a file was accepted as the series directory")
    try:                                                        # must_exist must agree between ranks
        ckptio.Series(run, comm, must_exist=(rank == 0))
    except ckptio.DeclarationError as exc:
        assert comm.Get_size() > 1 and "must_exist differs between ranks" in str(exc), exc
    else:
        assert comm.Get_size() == 1
    print("OK", rank)


def own_exception_async(comm, path: str) -> None:
    import ckptio

    r, n = comm.Get_rank(), comm.Get_size()
    try:
        with ckptio.create(path, comm, mode="async") as w:
            w.write("x", np.zeros(2), offset=(2 * r,), global_shape=(2 * n,))
            if r == 1:
                raise RuntimeError("the simulation failed on rank 1")
        w.wait()  # the others learn it here
        raise SystemExit("the checkpoint was reported as good")
    except (RuntimeError, ckptio.CheckpointError) as exc:
        assert isinstance(exc, RuntimeError) == (r == 1), exc
    print("HANDLED", r, flush=True)


CASES = {"adversarial": adversarial, "restart": restart, "all_damaged": all_damaged, "suffix": suffix,
         "missing_directory": missing_directory, "async_failure": async_failure, "series_args": series_args,
         "must_exist": must_exist, "own_exception_async": own_exception_async}


def main(argv: list[str]) -> int:
    if argv[0] == "--user-exit-handler":  # registered before ckptio's: os._exit would skip it
        atexit.register(lambda: print("USER HANDLER RAN", flush=True))
        argv = argv[1:]
    from mpi4py import MPI

    import ckptio  # noqa: F401  (imported here, after the user's exit handler, as the cases need it)

    CASES[argv[0]](MPI.COMM_WORLD, *argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
