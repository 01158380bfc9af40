"""Series retention and restart timelines, latest() on exact names, background failures (issue 11: items 1, 2,
3 (async), 5, 6, 7, 11, 15).

The MPI scripts build adversarial directories (files named like checkpoints, a second series, Open MPI
leftovers, stale and fresh ckptio temporaries) and check, on every rank, exactly which files survive.
"""

from __future__ import annotations

import re

import pytest
from mpi_helpers import run_script

# ------------------------------------------------------------------------------------------ pure rules


def test_exact_name_pattern():
    from ckptio.catalog import NamePattern

    p = NamePattern("chk_", ".h5", 6)
    assert p.step("chk_000010.h5") == 10 and p.step("chk_1234567.h5") == 1234567
    for name in ("chk_000010", "chk_00010.h5", "chk_000010.h5.bak", "chk_notes.txt", "chk_fine_000300.h5",
                 "chk_000004.h5-1-4242.lock", ".locktest.chk_000001.h5", "xchk_000001.h5"):
        assert p.step(name) is None, name
    assert p.name(7) == "chk_000007.h5"
    assert p.temp_of(".chk_000002.h5.ckptio-tmp-0123456789ab") == "chk_000002.h5"
    for name in (".chk_000002.h5.ckptio-tmp-0123456789a", ".chk_000002.h5.ckptio-tmp-0123456789abX",
                 ".chk_fine_000002.h5.ckptio-tmp-0123456789ab", ".chk_000002.ckptio-tmp-0123456789ab"):
        assert p.temp_of(name) is None, name
    loose = NamePattern.for_prefix("chk")  # ckptio.latest: any number of digits, "chk" and "chk_" alike
    assert loose.step("chk_10") == 10 and NamePattern.for_prefix("chk_").step("chk_10") == 10


def _e(step: int, seq: int | None):
    from ckptio.catalog import Entry

    return Entry(f"d/chk_{step:06d}", step, seq, 0)


def test_restart_from_older_step_supersedes_the_abandoned_newer_ones():
    from ckptio import catalog
    from ckptio.series import plan_retention

    old = [_e(s, s) for s in range(20, 31)]
    new21 = _e(21, 31)  # the rerun from 20 overwrote chk_000021
    entries = [e for e in old if e.step != 21] + [new21]
    assert set(catalog.superseded(entries)) == {f"d/chk_{s:06d}" for s in range(22, 31)}
    assert [e.step for e in catalog.timeline(entries)][:2] == [21, 20]
    doomed, newest = plan_retention(entries, 1, {"d/chk_000020"})
    assert newest is new21 and sorted(e.step for e in doomed) == list(range(22, 31))
    # superseded ones are the first to go: the timeline (21, 20) fills keep first, then the newest abandoned one
    doomed, _ = plan_retention(entries, 3, set())
    assert {e.step for e in doomed} == set(range(22, 30))
    doomed, _ = plan_retention([*entries, _e(19, 19)], 3, set())
    assert {e.step for e in doomed} == set(range(22, 31))
    # a file whose metadata cannot be read is never deleted and supersedes nothing
    doomed, _ = plan_retention([_e(5, None), _e(3, 3), _e(4, 4)], 1, set())
    assert [e.step for e in doomed] == [3]
    # checkpoints without a sequence number (ckptio.create, older ckptio) keep the step order among themselves
    assert not catalog.superseded([_e(1, 0), _e(2, 0)])
    # ... nor with a Series' ones: a Fortran run (no sequence) continuing a Python Series' directory keeps step order
    mixed = [_e(5, 1), _e(10, 2), _e(15, 0), _e(20, 0)]
    assert not catalog.superseded(mixed)
    assert [e.step for e in plan_retention(mixed, 3, set())[0]] == [5]


# ------------------------------------------------------------------------------------------ MPI scripts

COMMON = """
import os, sys, time, warnings, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()

def write(series, step, **kw):
    with series.create(step, attrs={"step": step}, **kw) as ck:
        ck.write("x", np.full(4, step, np.int64), offset=(4 * r,), global_shape=(4 * n,))
    return ck

def ours(d, suffix=""):
    import re
    return sorted(f for f in os.listdir(d) if re.fullmatch(r"chk_[0-9]{6}" + re.escape(suffix), f))

def corrupt(path):
    if r == 0:
        from ckptio.backends import detect_backend
        be = detect_backend(path)
        e = be.extents(be.read_metadata(path))[0]
        with open(path, "r+b") as f:
            f.seek(e.file_offset)
            b = f.read(1)
            f.seek(e.file_offset)
            f.write(bytes([b[0] ^ 0xFF]))
    comm.Barrier()

def step_of(path):
    with ckptio.open(path, comm) as rd:
        return rd.attrs["step"]
"""

ADVERSARIAL = COMMON + """
d, mode = sys.argv[1], sys.argv[2]
other = ckptio.Series(d, comm, prefix="chk_fine", keep=5)          # a second series in the same directory
for s in (300, 400):
    write(other, s)
junk = ["chk_notes.txt", "chk_job.log", "chk_000001.bak", "chk_000099.h5", "chk_000002-1-4242.lock",
        ".locktest.chk_000003", "chk_00005", ".chk_000002.ckptio-tmp-xyz", ".chk_fine_000500.ckptio-tmp-0123456789ab"]
stale = ".chk_000002.ckptio-tmp-0123456789ab"     # a killed write's leftover, older than any new commit
fresh = ".chk_000009.ckptio-tmp-abcdef012345"     # a write that may still be going on (newer than every commit)
if r == 0:
    for name in junk + [stale, fresh]:
        with open(os.path.join(d, name), "wb") as f:
            f.write(b"user data " * 100)
    os.utime(os.path.join(d, stale), (1, 1))
    os.utime(os.path.join(d, fresh), (4e9, 4e9))
comm.Barrier()
kw = {"stage_dir": d + "-stage"} if mode == "staged" else {"mode": mode}   # staged: retention at each drain's commit
series = ckptio.Series(d, comm, prefix="chk", keep=2, **kw)
for s in range(1, 9):
    ck = write(series, s)
    ck.wait()            # Writer.wait only: retention must already have run (as the checkpoint committed)
    comm.Barrier()
    if s >= 2:
        assert ours(d) == [f"chk_{s - 1:06d}", f"chk_{s:06d}"], (s, ours(d))
left = sorted(os.listdir(d))
for name in junk + [fresh, "chk_fine_000300", "chk_fine_000400"]:
    assert name in left, (name, left)
assert stale not in left, left
assert series.latest() == os.path.join(d, "chk_000008")
assert other.latest() == os.path.join(d, "chk_fine_000400")
assert ckptio.latest(d, comm=comm) == os.path.join(d, "chk_000008")
series.wait()
assert sorted(os.listdir(d)) == left
comm.Barrier()   # no rank exits (releasing the series' lease, ckptio.lease) before every rank has looked
print("OK", r, flush=True)
"""

RESTART = COMMON + """
d, keep, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
first = ckptio.Series(d, comm, keep=10)
for s in range(1, 7):
    write(first, s)
first.wait()
run = ckptio.Series(d, comm, keep=keep)                  # a new run
if how == "rerun":                                       # the user reruns from step 3 while 4..6 exist
    source = run.path(3)
    assert step_of(source) == 3
else:                                                    # the two newest are corrupt: latest() falls back
    corrupt(run.path(6)); corrupt(run.path(5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = run.latest()
    assert source == run.path(4), source
start = int(source[-6:]) + 1
write(run, start)
names = ours(d)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert run.latest() == run.path(start), names
    assert ckptio.latest(d) == run.path(start)
want = {1: [source, run.path(start)], 2: [source, run.path(start)]}.get(keep)
if want is not None:
    assert names == sorted(os.path.basename(p) for p in want), (keep, names)
else:  # keep=10: nothing deleted, but the abandoned newer ones are never chosen again
    assert len(names) == 6 and run.path(6)[-10:] in names
    corrupt(run.path(start))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = run.latest()
    assert found == source, found      # not chk_000006 (superseded)
    if r == 0:
        assert any("superseded" in str(w.message) and "chk_000006" in str(w.message) for w in caught), caught
write(run, start + 1)
names = ours(d)
if keep == 1:
    assert names == sorted(os.path.basename(p) for p in (source, run.path(start + 1))), names
if keep == 2:
    assert names == sorted(os.path.basename(p) for p in (source, run.path(start), run.path(start + 1))), names
assert run.latest() == run.path(start + 1)
assert step_of(run.path(start + 1)) == start + 1
print("OK", r, flush=True)
"""

SUFFIX = COMMON + """
d = sys.argv[1]
series = ckptio.Series(d, comm, keep=5, suffix=".h5")
for s in (5, 10):
    write(series, s)
assert ours(d, ".h5") == ["chk_000005.h5", "chk_000010.h5"]
assert ckptio.latest(d, suffix=".h5", comm=comm) == os.path.join(d, "chk_000010.h5")
assert series.latest() == os.path.join(d, "chk_000010.h5")
assert ckptio.latest(d, comm=comm) is None             # no checkpoint named without the suffix
print("OK", r, flush=True)
"""

MISSING = COMMON + """
d = sys.argv[1]
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
write(series, 1)
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
"""

ASYNC_FAILURE = COMMON + """
d, how = sys.argv[1], sys.argv[2]
exit_without_wait = how == "1"
series = ckptio.Series(d, comm, keep=2, mode="async")
write(series, 1)
write(series, 2)
bad = series.create(3)
bad.write("x", np.zeros(3), offset=(2 * r,), global_shape=(2 * n,))    # past the end: fails in the I/O thread
bad.close()
write(series, 4)                                                            # a good one after the failure
if exit_without_wait:
    print("EXITING", r, flush=True)
    sys.exit(0)
if how == "close":   # the second-next background close() reports it, and its own checkpoint is still written
    try:
        write(series, 5)
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
series.wait()                                                               # reported once
assert ours(d) == ["chk_000002", "chk_000004"], ours(d)
assert series.latest() == os.path.join(d, "chk_000004")
print("OK", r, flush=True)
"""


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["sync", "async", "staged"])
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_series_owns_only_its_exact_names_and_applies_keep_at_each_commit(nprocs, mode, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    proc = run_script(nprocs, ADVERSARIAL, tmp_path, str(d), mode, timeout=100)
    assert proc.stdout.count("OK") == nprocs


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["rerun", "fallback"])
@pytest.mark.parametrize("keep", [1, 2, 10])
def test_restart_from_older_step_keeps_the_source_and_supersedes_newer(keep, how, tmp_path):
    nprocs = {1: 2, 2: 4, 10: 1}[keep]
    proc = run_script(nprocs, RESTART, tmp_path, str(tmp_path / "run"), str(keep), how, timeout=100)
    assert proc.stdout.count("OK") == nprocs


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_missing_directory_is_an_error_on_every_rank(nprocs, tmp_path):
    proc = run_script(nprocs, MISSING, tmp_path, str(tmp_path / "run"), timeout=60)
    assert proc.stdout.count("OK") == nprocs


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_suffix_and_step_order(tmp_path):
    proc = run_script(2, SUFFIX, tmp_path, str(tmp_path / "run"), timeout=100)
    assert proc.stdout.count("OK") == 2


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("nprocs", [1, 3])
def test_failed_background_checkpoint_is_raised_by_series_wait(nprocs, tmp_path):
    proc = run_script(nprocs, ASYNC_FAILURE, tmp_path, str(tmp_path / "run"), "0", timeout=100)
    assert proc.stdout.count("OK") == nprocs


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_failed_background_checkpoint_is_raised_by_a_later_close_once(tmp_path):
    proc = run_script(2, ASYNC_FAILURE, tmp_path, str(tmp_path / "run"), "close", timeout=100)
    assert proc.stdout.count("OK") == 2


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_failed_background_checkpoint_is_reported_at_exit(tmp_path):
    proc = run_script(2, ASYNC_FAILURE, tmp_path, str(tmp_path / "run"), "1", timeout=100, check=False)
    assert proc.stdout.count("EXITING") == 2
    assert proc.returncode != 0, (proc.stdout, proc.stderr)
    assert re.search(r"ckptio: ERROR: 1 background checkpoint\(s\) failed", proc.stderr), proc.stderr
    assert "chk_000003: CollectiveDeclarationError" in proc.stderr and "'x'" in proc.stderr, proc.stderr
    assert "exiting with status 1" in proc.stderr, proc.stderr


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_exit_status_is_left_alone_when_an_unknown_exit_handler_must_run(tmp_path):
    """The documented limit: an exit handler registered before ckptio's would be skipped by os._exit, so the
    failure is only printed, and the handler still runs."""
    script = "import atexit\natexit.register(lambda: print('USER HANDLER RAN', flush=True))\n" + ASYNC_FAILURE
    proc = run_script(1, script, tmp_path, str(tmp_path / "run"), "1", timeout=100, check=False)
    assert "USER HANDLER RAN" in proc.stdout, (proc.stdout, proc.stderr)
    assert "chk_000003" in proc.stderr and "exit status cannot be changed safely" in proc.stderr, proc.stderr
    assert proc.returncode == 0


SERIES_ARGS = COMMON + """
d = sys.argv[1]
for kw in ({"keep": 1 + (r == n - 1)}, {"prefix": "chk" if r else "ckp"}, {"suffix": ".h5" if r == n - 1 else ""}):
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
"""


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_series_arguments_that_differ_between_ranks_are_refused_everywhere(tmp_path):
    """Outside trial: keep= differing between ranks was silently rank 0's; an empty prefix was accepted."""
    proc = run_script(2, SERIES_ARGS, tmp_path, str(tmp_path / "run"), timeout=100)
    assert "ACCEPTED" not in proc.stdout and proc.stdout.count("REFUSED") == 6, proc.stdout
    assert proc.stdout.count("EMPTY") == 2 and proc.stdout.count("OK") == 2, proc.stdout


MUST_EXIST = """
import os, sys
import numpy as np
from mpi4py import MPI
import ckptio

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
run, typo = sys.argv[1], sys.argv[1] + "_typo"
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
open(typo, "w").close() if rank == 0 else None
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
"""


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("nprocs", [1, 3])
def test_a_restart_job_with_must_exist_refuses_a_misspelt_directory(nprocs, tmp_path):
    proc = run_script(nprocs, MUST_EXIST, tmp_path, str(tmp_path / "run"), timeout=100)
    assert proc.stdout.count("OK") == nprocs


OWN_EXCEPTION_ASYNC = """
import sys
import numpy as np
from mpi4py import MPI
import ckptio

comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
try:
    with ckptio.create(sys.argv[1], comm, mode="async") as w:
        w.write("x", np.zeros(2), offset=(2 * r,), global_shape=(2 * n,))
        if r == 1:
            raise RuntimeError("the simulation failed on rank 1")
    w.wait()  # the others learn it here
    raise SystemExit("the checkpoint was reported as good")
except (RuntimeError, ckptio.CheckpointError) as exc:
    assert isinstance(exc, RuntimeError) == (r == 1), exc
print("HANDLED", r, flush=True)
"""


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_an_async_failure_caused_by_the_ranks_own_exception_is_not_reported_again_at_exit(tmp_path):
    """The rank whose exception failed the background checkpoint got that exception: its handled program must
    not end with "never asked" and status 1 (outside trial)."""
    proc = run_script(3, OWN_EXCEPTION_ASYNC, tmp_path, str(tmp_path / "chk"), timeout=100, check=False)
    assert proc.stdout.count("HANDLED") == 3, proc.stdout + proc.stderr
    assert "never asked" not in proc.stderr and proc.returncode == 0, (proc.returncode, proc.stderr)
