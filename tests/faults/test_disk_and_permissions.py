"""Full file systems, read-only directories and impossible paths (4 ranks, every backend).

The file systems are small tmpfs mounts (root only; always unmounted). Root ignores permission bits, so
"read-only" means a tmpfs remounted ``ro``, which stops root too.

* full disk: a 2 MiB tmpfs holding ``chk_000010`` (~60 KiB) gets a ~4 MB ``chk_000020``: every rank must get a
  CheckpointIOError or CollectiveError that names the checkpoint and says the space ran out; the job must
  end normally (no hang, no crash at exit); ``chk_000010`` unchanged and ``latest``; no temporary file left.
  ``slow``: a sweep of sizes around the free space, so the space runs out in the data, the index or the
  completion mark -- each write either succeeds completely or fails as above.
* paths: writing into a read-only directory, a missing directory, under a regular file, at a path that is
  a directory, or into ``/proc``; reading a missing file, a directory, a file that is not a checkpoint and an
  empty file: a clear CheckpointError on every rank, and nothing created. Reading from the read-only directory
  works.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import warnings
from pathlib import Path

import pytest
from conftest import NPROCS, assert_every_rank_failed, needs_root, remount, require_backend, run_job, tmpfs
from mpi_helpers import PROGRAMS, run_mpi

import ckptio
from ckptio.tools.cli import inspect_report

FILL_TIMEOUT = 45
PROGRAM = str(PROGRAMS / "disk_and_permissions.py")  # the MPI program of the full-stage test
SPACE_WORDS = re.compile(r"space|full|ENOSPC|quota", re.IGNORECASE)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_full_disk_outcome(result, fs: Path, survivor_digest: str, allow_success: bool = False) -> str:
    """The job ended normally; each rank failed clearly (or, if allowed, the checkpoint is complete);
    chk_000010 survived; nothing half-written is left. Returns "failed" or "written"."""
    assert result.returncode == 0, f"the job did not end normally after the error\n{result.describe()}"
    final = fs / "chk_000020"
    survivor = fs / "chk_000010"
    outcomes = result.by_case().get("fill", {})
    assert sorted(outcomes) == list(range(NPROCS)), result.describe()
    assert digest(survivor) == survivor_digest, "the previous checkpoint changed"
    leftovers = sorted(p.name for p in fs.iterdir() if p.name not in ("chk_000010", "chk_000020"))
    assert not leftovers, f"left behind: {leftovers}"
    if allow_success and all(o["ok"] for o in outcomes.values()):
        code, report = inspect_report(str(final), verify=True)
        assert code == 0, report
        assert ckptio.latest(fs) == str(final)
        return "written"
    per_rank = assert_every_rank_failed(result, "fill")
    for rank, o in per_rank.items():
        assert {"CheckpointIOError", "CollectiveError"} & set(o["bases"]), f"rank {rank}: {o['cls']}: {o['msg']}"
        assert str(final) in o["msg"], f"rank {rank}: the error does not name the checkpoint: {o['msg']}"
        assert SPACE_WORDS.search(o["msg"]), f"rank {rank}: the error does not say the space ran out: {o['msg']}"
    assert not final.exists(), "a failed checkpoint appeared at its final name"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ckptio.latest(fs) == str(survivor)
    return "failed"


@needs_root
@pytest.mark.mpi
def test_full_disk(backend, corpus, tmp_path):
    with tmpfs(tmp_path / "fs", "2m") as fs:
        shutil.copy2(corpus / backend / "chk_000010", fs / "chk_000010")
        before = digest(fs / "chk_000010")
        result = run_job(["fill", str(fs), "20", backend, str(4_000_000)], tmp_path, timeout=FILL_TIMEOUT)
        check_full_disk_outcome(result, fs, before)


@needs_root
@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("margin", (-65536, -8192, -2048, 0, 2048, 8192, 1 << 20))
def test_full_disk_sweep(backend, corpus, tmp_path, margin):
    """The checkpoint's data is (free space + margin) bytes: the space runs out at different places."""
    with tmpfs(tmp_path / "fs", "2m") as fs:
        shutil.copy2(corpus / backend / "chk_000010", fs / "chk_000010")
        before = digest(fs / "chk_000010")
        st = os.statvfs(fs)
        free = st.f_bavail * st.f_frsize
        result = run_job(["fill", str(fs), "20", backend, str(max(free + margin, 8 * NPROCS))], tmp_path,
                         timeout=FILL_TIMEOUT)
        check_full_disk_outcome(result, fs, before, allow_success=True)


@needs_root
@pytest.mark.mpi
def test_impossible_paths(backend, corpus, tmp_path):
    require_backend(backend)
    with tmpfs(tmp_path / "ro", "1m") as ro:
        shutil.copy2(corpus / backend / "chk_000010", ro / "chk_000010")
        remount(ro, "ro")
        (tmp_path / "afile").write_bytes(b"not a directory")
        (tmp_path / "adir").mkdir()
        (tmp_path / "junk").write_bytes(os.urandom(5000))
        (tmp_path / "empty").write_bytes(b"")
        writes = {"read-only directory": ro / "chk_000020", "missing directory": tmp_path / "missing" / "chk_1",
                  "under a regular file": tmp_path / "afile" / "chk_1", "path is a directory": tmp_path / "adir",
                  "a virtual file system": Path("/proc") / "chk_000001"}
        reads = {"missing file": tmp_path / "nothere", "directory": tmp_path / "adir",
                 "not a checkpoint": tmp_path / "junk", "empty file": tmp_path / "empty"}
        (tmp_path / "results").mkdir()  # run_job's outcome files: there before and after
        before = sorted(os.listdir(tmp_path))
        result = run_job(["access", backend, "--write", *map(str, writes.values()), "--read",
                          *map(str, reads.values()), str(ro / "chk_000010")], tmp_path, timeout=120)
        assert result.returncode == 0, result.describe()
        for what, path in writes.items():
            per_rank = assert_every_rank_failed(result, f"write {path}")
            for rank, o in per_rank.items():
                assert "CheckpointIOError" in o["bases"], f"{what}: rank {rank}: {o['cls']}: {o['msg']}"
                assert str(path) in o["msg"], f"{what}: rank {rank}: the error does not name the path: {o['msg']}"
                if what == "a virtual file system":  # (outside trial 14: it named the temporary file's ENOENT)
                    assert "cannot create files in /proc" in o["msg"], o["msg"]
        for what, path in reads.items():
            per_rank = assert_every_rank_failed(result, f"read {path}")
            want = {"not a checkpoint": "UnknownFormatError", "empty file": "UnknownFormatError"}.get(
                what, "CheckpointIOError")
            for rank, o in per_rank.items():
                assert want in o["bases"], f"{what}: rank {rank}: expected {want}, got {o['cls']}: {o['msg']}"
                assert str(path) in o["msg"], f"{what}: rank {rank}: the error does not name the path: {o['msg']}"
        restart = result.by_case()[f"read {ro / 'chk_000010'}"]
        assert all(o["ok"] and o["value"] == 10 for o in restart.values()), restart
        assert sorted(os.listdir(ro)) == ["chk_000010"]
        assert sorted(os.listdir(tmp_path)) == before, "a failed write left something behind"
        assert os.listdir(tmp_path / "adir") == []


@pytest.mark.mpi
@needs_root
def test_a_full_stage_is_emptied_so_the_next_staged_checkpoint_fits(tmp_path):
    """Outside trial: a staged write that filled the stage left its pieces and probes there, so every later
    checkpoint of the run failed at the probe. Now a failed staged write removes every rank's piece."""
    d = tmp_path / "run"
    d.mkdir()
    with tmpfs(tmp_path / "stage", "2m") as stage:
        proc = run_mpi(2, [PROGRAM, "stage_fill", str(d), str(stage)], timeout=180)
        out, describe = proc.stdout, proc.stdout + proc.stderr[-3000:]
        assert out.count("STEP 1 FULL") == 2 and out.count("STEP 2 FULL") == 2, describe
        assert out.count("STEP 3 OK") == 2, describe
        assert "PROBES 0" in out, describe
