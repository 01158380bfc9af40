"""Verification at the storage's speed (issue 29 item 4): the serial scan of ``ckptio inspect --verify`` and
``latest(verify=True)``, and the collective ``ckptio.verify.verify_parallel`` (``python -m ckptio.verify``), in which
each restart aggregator verifies its own file domains.

What must hold: the same problems with the same messages (variable, block, writing rank) as the first, per-extent
implementation, whatever the windows of the reads; every rank of a parallel verification gets all of them; a rank
whose verification fails makes every rank fail, and none hangs. Speed is measured (benchmarks/verifybench.py),
never asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ckptio.backends import detect_backend
from mpi_helpers import BACKENDS, mpi_env, mpiexec, run_mpi

from ckptio import verify
from ckptio.engine import verify_scan

PROGRAM = Path(__file__).resolve().parent / "programs" / "verify_job.py"
CKPTIO = str(Path(sys.executable).parent / "ckptio")



def write(nprocs: int, path: Path, backend: str = "mpiio", compression: str = "") -> None:
    """A checkpoint of small ``dens`` blocks, ``nanv`` (a NaN), ``big`` (int32) and a segment (verify_job.py)."""
    run_mpi(nprocs, [str(PROGRAM), "write", str(path), backend, compression], timeout=240)


def _results(stdout: str, tag: str) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in stdout.splitlines() if line.startswith(tag + " ")]


def _flip(path: Path, picks: list[tuple[str, int]]) -> None:
    backend = detect_backend(str(path))
    extents = backend.extents(backend.read_document(str(path)))
    for name, index in picks:
        e = [x for x in extents if x.var == name][index]
        with open(path, "r+b") as f:
            f.seek(e.file_offset + e.nbytes // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0x01]))


def _per_extent(path: str, meta: dict | None = None) -> verify.Verification:
    """The first implementation's results: one extent at a time through the backend's serial reader."""
    b = detect_backend(path)
    meta = b.read_document(path) if meta is None else meta
    reader = b.serial_extents(path, meta)
    try:
        found = verify_scan.check_with_reader(reader, meta["variables"], b.extent_table(meta), ranges=True)
    finally:
        reader.close()
    return verify._verification(found)


@pytest.fixture(params=[(b, "") for b in BACKENDS] + [("mpiio", "zstd+shuffle")],
                ids=lambda p: "-".join(filter(None, p)))
def damaged(request, tmp_path):
    backend, compression = request.param
    path = tmp_path / "chk"
    write(3, path, backend, compression)
    _flip(path, [("dens", 1), ("dens", -1), ("big", 1)])
    return path


@pytest.mark.mpi
@pytest.mark.parametrize("window", [None, 4096, 100_000])
def test_serial_verification_finds_what_the_per_extent_one_found_whatever_the_windows(damaged, window, monkeypatch):
    if window is not None:  # many windows: extents larger than a window, windows across holes and variables
        monkeypatch.setattr(verify_scan, "WINDOW", window)
    b = detect_backend(str(damaged))
    meta = b.read_document(str(damaged))
    got = verify.verify_checkpoint(b, str(damaged), meta, ranges=True)
    want = _per_extent(str(damaged))
    assert [p.to_json() for p in got.problems] == [p.to_json() for p in want.problems]
    assert got.ranges == want.ranges
    names = {(p.variable, p.block) for p in got.problems}
    assert len(got.problems) == 3 and {v for v, _ in names} == {"dens", "big"}, got.problems
    assert all(p.rank is not None and ("checksum mismatch" in p.message or "zstd" in p.message.lower())
               for p in got.problems), got.problems
    assert verify.verify_blocks(b, str(damaged), meta) == got.problems


@pytest.mark.mpi
def test_min_max_and_nan_count_come_from_the_verification_pass(tmp_path):
    path = tmp_path / "chk"
    write(2, path)
    b = detect_backend(str(path))
    got = verify.verify_checkpoint(b, str(path), b.read_document(str(path)), ranges=True)
    assert not got.problems
    assert got.ranges["nanv"] == {"min": 0.0, "max": 2.0, "nan_count": 2}
    assert got.ranges["big"] == {"min": 0, "max": 19999 * 2, "nan_count": 0}
    assert got.ranges["dens"] == {"min": 0.0, "max": 10.0 + 5 + 63, "nan_count": 0}


@pytest.mark.mpi
def test_an_extent_past_the_end_of_the_file_is_reported_per_block(tmp_path):
    """The file shrank after its metadata was read: the blocks it no longer holds are problems with the message
    the per-extent reader gave them (``ckptio.engine.space`` verifies suspect extents this way)."""
    path = tmp_path / "chk"
    write(2, path)
    b = detect_backend(str(path))
    meta = b.read_document(str(path))
    last = max(b.extents(meta), key=lambda e: e.file_offset)
    with open(path, "r+b") as f:
        f.truncate(last.file_offset + 10)
    got = verify.verify_blocks(b, str(path), meta)
    assert [p.to_json() for p in got] == [p.to_json() for p in _per_extent(str(path), meta).problems]
    assert got and all("file ends inside the data" in p.message for p in got), got


@pytest.mark.mpi
@pytest.mark.parametrize("window", [None, 4096])
def test_a_file_that_shrinks_during_the_verification_reports_what_it_lost(tmp_path, monkeypatch, window):
    """The file ends earlier than when the scan began (reads return 0 past a point): the blocks it lost are
    problems with the message a verification of the shorter file gives them, also in a row read in pieces."""
    import os
    import shutil

    path = tmp_path / "chk"
    write(2, path)
    b = detect_backend(str(path))
    meta = b.read_document(str(path))
    rows = sorted(b.extents(meta), key=lambda e: e.file_offset)
    cut = rows[len(rows) * 2 // 3].file_offset + 100  # inside a row
    shorter = tmp_path / "shorter"
    shutil.copy(path, shorter)
    os.truncate(shorter, cut)
    want = [p.to_json() for p in _per_extent(str(shorter), meta).problems]
    real = os.preadv

    def ends_at_cut(fd, buffers, offset):
        if offset >= cut:
            return 0
        return real(fd, [memoryview(buffers[0])[:cut - offset]], offset)

    if window is not None:
        monkeypatch.setattr(verify_scan, "WINDOW", window)
    monkeypatch.setattr(os, "preadv", ends_at_cut)
    got = [p.to_json() for p in verify.verify_blocks(b, str(path), meta)]
    assert got == want and got, got


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs,backend,window", [(1, "mpiio", None), (2, "mpiio", 8192), (4, "mpiio", None),
                                                    (2, "hdf5", None), (2, "pnetcdf", 8192)])
def test_parallel_verification_names_every_damaged_block_on_every_rank(tmp_path, nprocs, backend, window):
    args = [str(PROGRAM), "corrupt", str(tmp_path / "chk"), backend] + ([str(window)] if window else [])
    proc = run_mpi(nprocs, args, timeout=300)
    results = sorted(_results(proc.stdout, "RESULT"), key=lambda x: x["rank"])
    assert len(results) == nprocs, proc.stdout + proc.stderr
    first = results[0]  # rank 0, which also verified in one process
    assert first["clean"]["problems"] == [] and first["aggregators"] == nprocs
    # every rank is an aggregator and mpirun runs them all on this host: each scan shares its cache with them all
    assert all(r["sharing"] == [nprocs, nprocs] for r in results), [r["sharing"] for r in results]
    named = {(p["variable"], p["block"]) for p in first["corrupt"]["problems"]}
    assert len(first["corrupt"]["problems"]) == 2 and {v for v, _ in named} == {"dens", "big"}, first
    assert all("checksum mismatch" in p["message"] and p["rank"] is not None for p in first["corrupt"]["problems"])
    assert first["corrupt"]["problems"] == first["serial"]["problems"]  # the same as one process finds
    assert first["corrupt"]["ranges"] == first["serial"]["ranges"]  # (of the damaged file: the same data)
    assert first["clean"]["ranges"]["big"]["max"] == 19999 * nprocs
    for r in results[1:]:  # agreed: every rank has every problem and every range
        assert r["clean"] == first["clean"] and r["corrupt"] == first["corrupt"], (r, first)


@pytest.mark.mpi
def test_only_the_aggregators_count_as_scans_sharing_the_host(tmp_path):
    """3 ranks on this host, one verifying aggregator: it scans with the whole window (sharing 1), the others not
    at all; with every rank an aggregator each was told 3 (above)."""
    proc = run_mpi(3, [str(PROGRAM), "one-aggregator", str(tmp_path / "chk"), "mpiio"], timeout=240)
    got = sorted(_results(proc.stdout, "SHARING"), key=lambda x: x["rank"])
    assert [g["aggregators"] for g in got] == [1, 1, 1] and all(g["problems"] == 0 for g in got), proc.stdout
    assert sorted(len(g["sharing"]) for g in got) == [0, 0, 1], got
    assert [s for g in got for s in g["sharing"]] == [1], got


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3])
def test_a_rank_whose_verification_fails_makes_every_rank_fail_without_hanging(tmp_path, nprocs):
    proc = run_mpi(nprocs, [str(PROGRAM), "fail", str(tmp_path / "chk"), "mpiio"], timeout=240)
    raised = [line.split(" ", 3) for line in proc.stdout.splitlines() if line.startswith("RAISED ")]
    assert len(raised) == nprocs and "NO ERROR" not in proc.stdout, proc.stdout + proc.stderr
    for _, rank, cls, message in raised:
        assert "IO" in cls or "Collective" in cls, (rank, cls, message)
        assert "rank 1" in message and "injected" in message, message


@pytest.mark.mpi
def test_python_m_ckptio_verify_under_mpirun_prints_what_inspect_prints(tmp_path):
    path = tmp_path / "chk"
    write(2, path)
    serial = subprocess.run([CKPTIO, "inspect", "--verify", str(path)], capture_output=True, text=True,
                            env=mpi_env(), timeout=120)
    assert serial.returncode == 0 and "python -m ckptio.verify" in serial.stdout, serial.stdout  # the hint
    env = mpi_env()
    run = [*mpiexec(env), "-n", "2", sys.executable, "-m", "ckptio.verify"]
    good = subprocess.run([*run, str(path)], capture_output=True, text=True, env=env, timeout=240)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "complete and verified" in good.stdout and "verified on 2 ranks" in good.stdout
    values = [line for line in serial.stdout.splitlines() if line.startswith("values") or "nanv" in line]
    assert values and all(v in good.stdout for v in values)  # the same min/max section
    _flip(path, [("big", 0)])
    bad = subprocess.run([*run, "--json", str(path)], capture_output=True, text=True, env=env, timeout=240)
    assert bad.returncode == 1, bad.stdout + bad.stderr  # the status of every rank (mpirun: the highest)
    doc = json.loads(bad.stdout)
    assert doc["status"] == "corrupt" and doc["problems"][0]["variable"] == "big" and doc["problems"][0]["block"] == 0
    assert doc["verified_on"] == {"ranks": 2, "aggregators": 2}
    missing = subprocess.run([*run, str(tmp_path / "nothing")], capture_output=True, text=True, env=env, timeout=240)
    assert missing.returncode == 2 and "no such file" in missing.stdout


@pytest.mark.parametrize("value", ["0", "-1", "2.5", "many"])
def test_a_bad_aggregator_count_is_a_usage_error(tmp_path, value):
    """Not a file status ("unreadable: ... aggregators=0 must be a positive integer", found by an outside trial):
    argparse's usage error, exit 2, before any file is opened."""
    bad = subprocess.run([sys.executable, "-m", "ckptio.verify", f"--aggregators={value}", str(tmp_path / "x")],
                         capture_output=True, text=True, env=mpi_env(), timeout=120)
    assert bad.returncode == 2 and "must be a positive integer" in bad.stderr, bad.stdout + bad.stderr
    assert bad.stdout == "", bad.stdout
