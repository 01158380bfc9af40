"""The MPI programs of ``tests/test_staging.py`` (``mpirun -n P python staging.py CASE ARGS...``).

* ``two_runs BASE STAGE``: two series share one stage; each keeps its own staged copies (retention at each
  commit), recovers its own lost final copy and refuses the other's copy moved under its name; ``OK <rank>``;
* ``bad_stage OUT STAGE``: a stage that is a file fails a staged checkpoint and a staged Series on every rank
  (``OK <rank>`` twice per rank, ``NOERROR <rank>`` where it did not);
* ``one_rank_fails OUT STAGE``: a bad declaration on the last rank (``DECL <rank>``), an exception on rank 0
  inside the with block (``RAISED`` on rank 0, ``OTHERS`` elsewhere); nothing is staged; ``OK <rank>``;
* ``corrupt_piece OUT STAGE``: the restart reads the stage, then falls back past one flipped byte in the last
  rank's piece with a warning naming it; ``OK <rank>``;
* ``two_series OUT STAGE``: series ``chk`` (``drain_every=2``: its step 1 stays on the stage only) and ``plt``
  (every checkpoint drained) share a directory and its stage: plt's commits leave chk's staged copy alone and a
  new chk Series restarts from it; then ``create(drain=...)`` that differs between the ranks fails on every rank
  with a DeclarationError (``DRAIN <rank>``); ``OK <rank>``;
* ``warning_is_error OUT STAGE`` (run with ``PYTHONWARNINGS=error::RuntimeWarning``): a one-node job asks for
  ``redundancy="partner"``; rank 0's warning that it cannot have it, an exception under that filter, fails the
  checkpoint on every rank instead of leaving the others in the next collective (``FAILED <rank>``); ``OK <rank>``;
* ``staged_reader PATH STAGE``: the staged restart reader reads like a Reader (out=, slicing, a bad request on one
  rank, a rank leaving its with block); ``STAGED READER OK <rank>``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings

import internals
import numpy as np

import ckptio
from ckptio import CollectiveError, ReadRequestError


def two_runs(comm, base: str, stage: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    runs = {name: ckptio.Series(os.path.join(base, name), comm, keep=2, stage_dir=stage) for name in ("A", "B")}
    for step in range(1, 7):                     # interleaved: both runs write the same names into one stage
        for name, series in runs.items():
            with series.create(step, attrs={"run": name}) as ck:
                ck.write("x", np.full(4, step + (100 if name == "B" else 0) + 1000 * r, np.int64),
                         offset=(4 * r,), global_shape=(4 * n,))
    for series in runs.values():
        series.wait()
    # each run has its own key directory, holding only its newest drained checkpoint (retention at each commit)
    keys = {name: internals.staged_key_dir(stage, series.path(1)) for name, series in runs.items()}
    assert keys["A"] != keys["B"] and sorted(os.listdir(stage)) == sorted(os.path.basename(k) for k in keys.values())
    for key in keys.values():
        assert os.listdir(key) == ["chk_000006"], os.listdir(key)
        assert len(os.listdir(os.path.join(key, "chk_000006"))) == 1
    # A's final copy of step 6 is lost: A recovers its own staged copy, never B's
    a6 = runs["A"].path(6)
    if r == 0:
        os.unlink(a6)
    comm.Barrier()
    assert runs["A"].latest() == a6
    with ckptio.open(a6, comm) as ck:
        assert ck.attrs["run"] == "A" and (ck.read("x", offset=(4 * r,), shape=(4,)) == 6 + 1000 * r).all()
    # a staged copy moved under A's name (B's pieces) is refused: its manifest names B's final path
    if r == 0:
        os.unlink(a6)
        shutil.rmtree(os.path.join(keys["A"], "chk_000006"))
        shutil.copytree(os.path.join(keys["B"], "chk_000006"), os.path.join(keys["A"], "chk_000006"))
    comm.Barrier()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = runs["A"].latest()
    assert found == runs["A"].path(5), found
    if r == 0:
        assert any("belongs to" in str(w.message) and "/B/chk_000006" in str(w.message) for w in caught), caught
    print("OK", r, flush=True)


def bad_stage(comm, out: str, stage: str) -> None:
    r = comm.Get_rank()
    try:
        with ckptio.create(os.path.join(out, "chk_000001"), comm, stage_dir=stage) as ck:
            ck.write("x", np.zeros(3), offset=(3 * r,), global_shape=(3 * comm.Get_size(),))
        print("NOERROR", r, flush=True)
    except ckptio.CheckpointIOError as exc:
        assert stage in str(exc), exc
        assert not os.path.exists(os.path.join(out, "chk_000001"))
        print("OK", r, flush=True)
    series = ckptio.Series(os.path.join(out, "series"), comm, stage_dir=stage)  # the stage is checked at close
    try:
        with series.create(1) as ck:
            ck.write("x", np.zeros(3), offset=(3 * r,), global_shape=(3 * comm.Get_size(),))
        print("NOERROR", r, flush=True)
    except ckptio.CheckpointIOError as exc:
        assert stage in str(exc), exc
        print("OK", r, flush=True)


def stray_files(comm, out: str, stage: str) -> None:
    """Step 1 staged and drained; then a stray file where the stage keeps the series' directory (its key
    directory) on the last rank's view: latest() falls back to the parallel file system (step 1), step 2 fails
    with the same CheckpointIOError on every rank, the stray file stays. Then a read-only stage (a read-only
    tmpfs, when this process may mount one): the error names the stage and the node, not the probe's removal."""
    from ckptio.tiers.stage_files import key_dir

    r = comm.Get_rank()
    series = ckptio.Series(out, comm, stage_dir=stage)
    with series.create(1) as ck:
        ck.write("x", np.arange(3.0) + 3 * r, offset=(3 * r,), global_shape=(3 * comm.Get_size(),))
    series.wait()
    comm.Barrier()
    key = key_dir(stage, os.path.join(out, "x"))
    if r == 0:
        shutil.rmtree(key)
        with open(key, "w") as f:
            f.write("not ckptio's")
    comm.Barrier()
    again = ckptio.Series(out, comm, stage_dir=stage)
    found = again.latest()
    errors = []
    try:
        with again.create(2) as ck:
            ck.write("x", np.zeros(3), offset=(3 * r,), global_shape=(3 * comm.Get_size(),))
        errors.append(None)
    except Exception as exc:  # must be a ckptio error, the same on every rank
        errors.append(f"{type(exc).__name__}: {exc}")
    stray = open(key).read() if os.path.isfile(key) else None
    readonly = os.path.join(os.path.dirname(stage), "readonly")
    mounted = False
    if r == 0:
        os.makedirs(readonly, exist_ok=True)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", readonly],
                                 capture_output=True).returncode == 0
    mounted = comm.bcast(mounted, root=0)
    if mounted:
        try:
            with ckptio.create(os.path.join(out, "chk_ro"), comm, stage_dir=readonly) as ck:
                ck.write("x", np.zeros(3), offset=(3 * r,), global_shape=(3 * comm.Get_size(),))
            errors.append(None)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        comm.Barrier()
        if r == 0:
            subprocess.run(["umount", readonly], check=True)
    print("JSON " + json.dumps({"rank": r, "found": found, "errors": errors, "stray": stray,
                                "mounted": mounted}), flush=True)


def one_rank_fails(comm, out: str, stage: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    try:                                           # a bad declaration on the last rank only
        with ckptio.create(os.path.join(out, "chk_000001"), comm, stage_dir=stage) as ck:
            ck.write("x", np.zeros(3), offset=(3 * r + (1 if r == n - 1 else 0),), global_shape=(3 * n,))
    except ckptio.CheckpointError as exc:
        assert "x" in str(exc), exc
        print("DECL", r, flush=True)
    try:                                           # an exception inside the with-block on rank 0 only
        with ckptio.create(os.path.join(out, "chk_000002"), comm, stage_dir=stage) as ck:
            ck.write("x", np.zeros(3), offset=(3 * r,), global_shape=(3 * n,))
            if r == 0:
                raise RuntimeError("simulation failed")
    except RuntimeError:
        print("RAISED", r, flush=True)
    except ckptio.CheckpointError:
        print("OTHERS", r, flush=True)
    assert not os.listdir(out), os.listdir(out)
    staged = [f for _, _, files in os.walk(stage) for f in files if f.endswith(".json")]
    assert not staged, staged
    print("OK", r, flush=True)


def corrupt_piece(comm, out: str, stage: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    path = os.path.join(out, "chk_000001")
    ck = ckptio.create(path, comm, stage_dir=stage, attrs={"step": 1})
    ck.write("x", np.arange(6, dtype=np.float32) + 10 * r, offset=(6 * r,), global_shape=(6 * n,))
    ck.close()
    ck.wait()
    with ckptio.open(path, comm, stage_dir=stage) as rd:   # every piece fine: read from the stage
        assert rd.source == "stage" and rd.attrs == {"step": 1}
        assert (rd.read("x") == np.concatenate([np.arange(6, dtype=np.float32) + 10 * q for q in range(n)])).all()
    if r == n - 1:                                          # one flipped byte in the last rank's piece
        internals.flip_byte(internals.staged_data_pieces(stage, r)[0], 5)
    comm.Barrier()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rd = ckptio.open(path, comm, stage_dir=stage)
    assert isinstance(rd, ckptio.Reader), type(rd)
    if r == 0:
        assert any(f"rank {n - 1}" in str(w.message) and "checksum" in str(w.message) for w in caught), caught
    assert (rd.read("x", offset=(6 * r,), shape=(6,)) == np.arange(6, dtype=np.float32) + 10 * r).all()
    rd.close()
    print("OK", r, flush=True)


def staged_reader(comm, path: str, stage: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    rows = np.arange((r + 1) * 4, dtype=np.float64).reshape(r + 1, 4) + 100 * r  # an N-d per-rank segment
    with ckptio.create(path, comm, stage_dir=stage) as w:
        w.write("tracers", rows)
    w.wait()
    every = np.concatenate([np.arange((q + 1) * 4, dtype=np.float64).reshape(q + 1, 4) + 100 * q for q in range(n)])
    with ckptio.open(path, comm, stage_dir=stage) as ck:
        assert type(ck).__name__ == "StagedReader"
        # out= on one rank only (a strided view), the others allocate
        halo = np.zeros((r + 3, 6))
        got = ck.read("tracers", out=halo[1:-1, 1:-1] if r == 0 else None)
        assert (got == rows).all() and (r != 0 or (halo[1:-1, 1:-1] == rows).all())
        assert (ck["tracers"][1:3] == every[1:3]).all() and "StagedReader" in repr(ck)
        # a bad request on one rank: ReadRequestError on every rank, nothing hangs
        try:
            ck.read("tracers", offset=(0,) if r == n - 1 else (0, 0), shape=None if r == n - 1 else (1, 4))
            raise AssertionError("no error")
        except ReadRequestError as exc:
            assert isinstance(exc, CollectiveError) and f"rank {n - 1}" in str(exc) and "2 dimension(s)" in str(exc)
    # rank 0 leaves the with block with its own exception while the others read: they raise, naming it
    try:
        with ckptio.open(path, comm, stage_dir=stage) as ck:
            if r == 0:
                raise ValueError("rank 0 bails out")
            ck.read("tracers")
            raise AssertionError("read went on")
    except ValueError as exc:
        assert r == 0 and "bails out" in str(exc)
    except CollectiveError as exc:
        assert r != 0 and "rank 0: ValueError: rank 0 bails out" in str(exc), exc
    print("STAGED READER OK", r, flush=True)


def two_series(comm, out: str, stage: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    data = np.arange(8.0) + 100 * r
    whole = np.concatenate([np.arange(8.0) + 100 * q for q in range(n)])
    chk = ckptio.Series(out, comm, prefix="chk", stage_dir=stage, drain_every=2)
    plt = ckptio.Series(out, comm, prefix="plt", stage_dir=stage)
    with chk.create(1) as ck:
        ck.write("x", data, offset=(8 * r,), global_shape=(8 * n,))
    chk.wait()
    for step in (1, 2):  # each plt commit runs the stage's retention
        with plt.create(step) as ck:
            ck.write("y", data + step, offset=(8 * r,), global_shape=(8 * n,))
    plt.wait()
    assert not os.path.exists(os.path.join(out, "chk_000001")), "chk's step 1 was drained"
    found = ckptio.Series(out, comm, prefix="chk", stage_dir=stage, drain_every=2).latest()
    assert found == os.path.join(out, "chk_000001"), f"chk's node-local step 1 is gone: latest() gave {found}"
    with ckptio.open(found, comm) as rd:
        assert (rd.read("x") == whole).all()
    ml = ckptio.Series(out, comm, prefix="ml", stage_dir=stage, drain_every=5)  # its step 1: drained only if asked
    try:
        with ml.create(1, drain=(r == 0)) as ck:
            ck.write("x", data, offset=(8 * r,), global_shape=(8 * n,))
        ml.wait()
        print("NOERROR", r, flush=True)
    except ckptio.DeclarationError as exc:
        assert "Series.create(drain=...) must be the same on every rank" in str(exc), exc
        print("DRAIN", r, flush=True)
    comm.Barrier()
    print("OK", r, flush=True)


def warning_is_error(comm, out: str, stage: str) -> None:
    r, n = comm.Get_rank(), comm.Get_size()
    s = ckptio.Series(out, comm, stage_dir=stage, redundancy="partner")
    try:
        with s.create(1) as ck:
            ck.write("x", np.zeros(4) + r, offset=(4 * r,), global_shape=(4 * n,))
        s.wait()
        print("NOERROR", r, flush=True)
    except (RuntimeWarning, ckptio.CheckpointError) as exc:
        assert "redundancy='partner'" in str(exc) and "no partner redundancy" in str(exc), exc
        print("FAILED", r, flush=True)
    comm.Barrier()
    print("OK", r, flush=True)


CASES = {"two_runs": two_runs, "two_series": two_series, "warning_is_error": warning_is_error,
         "bad_stage": bad_stage, "one_rank_fails": one_rank_fails, "stray_files": stray_files,
         "corrupt_piece": corrupt_piece, "staged_reader": staged_reader}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
