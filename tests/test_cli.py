"""`ckptio inspect` and `ckptio plan` from the shell: fields, exit codes, --json, corruption, truncation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_helpers import BACKENDS, PROGRAMS, mpi_env, run_mpi

CKPTIO = str(Path(sys.executable).parent / "ckptio")
PROGRAM = str(PROGRAMS / "cli.py")  # the programs that write the checkpoints these tests read


def inspect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CKPTIO, "inspect", *args], capture_output=True, text=True, env=mpi_env(), timeout=120)


@pytest.fixture(params=BACKENDS)
def checkpoint(request, tmp_path):
    path = tmp_path / f"chk_{request.param}"
    run_mpi(2, [PROGRAM, "inspected", str(path), request.param])
    return path, request.param


@pytest.mark.mpi
def test_inspect_lists_everything_and_verifies(checkpoint):
    path, backend = checkpoint
    proc = inspect(str(path), "--verify", "--stats")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for word in (backend, "complete and verified", "step=7", "dens", "(8, 64)", "ids", "striping_factor=2",
                 "cb_nodes=2", "hints got", "write stats"):
        assert word in proc.stdout, f"{word!r} missing from:\n{proc.stdout}"


@pytest.mark.mpi
def test_inspect_json_schema_is_the_same_for_every_backend(checkpoint):
    path, backend = checkpoint
    proc = inspect(str(path), "--json")
    assert proc.returncode == 0
    doc = json.loads(proc.stdout)
    assert doc["format"] == backend and doc["status"] == "complete"
    assert set(doc) >= {"path", "format", "format_version", "schema", "status", "attrs", "variables", "hints",
                        "layout", "nprocs", "verified", "problems"}
    assert doc["variables"]["dens"]["shape"] == [8, 64] and doc["variables"]["dens"]["nblocks"] == 2
    assert doc["variables"]["ids"]["kind"] == "segment" and doc["variables"]["ids"]["shape"] == [3]
    assert set(doc["hints"]) >= {"requested", "effective", "io_component"}


@pytest.mark.mpi
def test_flipped_data_byte_exit_1_naming_the_block(checkpoint):
    path, _ = checkpoint
    from ckptio.backends import detect_backend

    backend = detect_backend(str(path))
    meta = backend.read_document(str(path))
    extent = next(e for e in backend.extents(meta) if e.var == "dens" and e.box.offset[0] == 4)
    with open(path, "r+b") as f:
        f.seek(extent.file_offset + 3)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 1]))
    proc = inspect(str(path), "--verify")
    assert proc.returncode == 1, proc.stdout
    assert "dens" in proc.stdout and "block 1" in proc.stdout and "rank 1" in proc.stdout, proc.stdout
    doc = json.loads(inspect(str(path), "--verify", "--json").stdout)
    assert doc["status"] == "corrupt" and doc["problems"][0]["variable"] == "dens" and doc["problems"][0]["block"] == 1


@pytest.mark.mpi
def test_truncated_file_is_incomplete_and_skipped_by_latest(checkpoint, tmp_path):
    path, _ = checkpoint
    size = path.stat().st_size
    os.truncate(path, size // 2)
    proc = inspect(str(path))
    assert proc.returncode == 1 and ("incomplete" in proc.stdout.lower() or "corrupt" in proc.stdout.lower())
    import warnings

    import ckptio

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert ckptio.latest(path.parent, prefix="chk_") is None


def test_inspect_usage_errors_exit_2(tmp_path):
    assert inspect(str(tmp_path / "missing")).returncode == 2
    junk = tmp_path / "junk"
    junk.write_bytes(b"hello world" * 100)
    proc = inspect(str(junk))
    assert proc.returncode == 2 and "not a ckptio checkpoint" in proc.stdout
    assert subprocess.run([CKPTIO, "inspect"], capture_output=True).returncode == 2


def test_plan_command_prints_and_plots(tmp_path):
    png = tmp_path / "ost.png"
    proc = subprocess.run([CKPTIO, "plan", "--ranks", "512", "--bytes", "8G", "--plot", str(png)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "RESTART" in proc.stdout and "naive" in proc.stdout and png.stat().st_size > 1000


# ------------------------------------------------------------------------ files that are not checkpoints
def _plain_hdf5(path: Path) -> None:
    import h5py
    import numpy as np

    with h5py.File(path, "w") as f:
        f["x"] = np.arange(10.0)
        f.attrs["title"] = "written by another program"


def _plain_netcdf(path: Path) -> None:
    """A classic CDF-5 file with one variable, written byte by byte (no netCDF library needed)."""
    import struct

    name = b"x\0\0\0"
    header = (b"CDF\x05" + struct.pack(">Q", 0)
              + struct.pack(">IQ", 10, 1) + struct.pack(">Q", 1) + name + struct.pack(">Q", 4)  # dim x = 4
              + struct.pack(">IQ", 0, 0)  # no global attributes
              + struct.pack(">IQ", 11, 1) + struct.pack(">Q", 1) + name + struct.pack(">Q", 1) + struct.pack(">Q", 0)
              + struct.pack(">IQ", 0, 0) + struct.pack(">IQQ", 6, 32, 0))
    begin = len(header)
    header = header[:-8] + struct.pack(">Q", begin)
    path.write_bytes(header + struct.pack(">4d", 1, 2, 3, 4))


def test_plain_hdf5_and_netcdf_files_are_not_checkpoints_exit_2(tmp_path):
    from ckptio.backends.pnetcdf import read_header

    h5, nc = tmp_path / "other.h5", tmp_path / "other.nc"
    _plain_hdf5(h5)
    _plain_netcdf(nc)
    assert read_header(str(nc)).vars["x"].begin > 0  # a well-formed CDF file
    for path, fmt in ((h5, "hdf5"), (nc, "pnetcdf")):
        proc = inspect("--json", str(path))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        report = json.loads(proc.stdout)
        assert report["status"] == "not a ckptio checkpoint" and "not a ckptio checkpoint" in report["error"], report
        assert report["format"] == fmt
        assert "status      not a ckptio checkpoint: " in inspect(str(path)).stdout


def test_ls_and_inspect_use_one_vocabulary_for_plain_files_with_step_like_names(tmp_path):
    """Issue 27, item 6: the FLASH file `convert --to flash` writes under FLASH's name (`*_hdf5_chk_0020`) and a
    plain netCDF file named like a checkpoint were "corrupt" (exit 1) in `ls` and "not a ckptio checkpoint" (exit 2)
    in `inspect`: now the same status in both, and `ls` exits 0 (a listing with no damaged checkpoint)."""
    _plain_hdf5(tmp_path / "flash_like_hdf5_chk_0020")
    _plain_netcdf(tmp_path / "other_000010.nc")
    proc = subprocess.run([CKPTIO, "ls", "--json", str(tmp_path)], capture_output=True, text=True, env=mpi_env(),
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)["files"]}
    assert set(rows) == {"flash_like_hdf5_chk_0020", "other_000010.nc"}, rows
    for name, fmt in (("flash_like_hdf5_chk_0020", "hdf5"), ("other_000010.nc", "pnetcdf")):
        assert (rows[name]["status"], rows[name]["format"]) == ("not a ckptio checkpoint", fmt), rows[name]
        assert not rows[name]["newest_valid"]
        report = json.loads(inspect("--json", str(tmp_path / name)).stdout)
        assert report["status"] == rows[name]["status"]
    text = subprocess.run([CKPTIO, "ls", str(tmp_path)], capture_output=True, text=True, env=mpi_env(), timeout=120)
    assert text.returncode == 0 and "corrupt" not in text.stdout, text.stdout
    assert text.stdout.count("not a ckptio checkpoint (") == 2, text.stdout


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_does_not_block_and_says_what_it_is(tmp_path):
    fifo = tmp_path / "chk_fifo"
    os.mkfifo(fifo)
    proc = inspect(str(fifo))  # before: blocked in open() until the 120 s timeout
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "FIFO" in proc.stdout and "not a regular file" in proc.stdout, proc.stdout
    import ckptio

    with pytest.raises(ckptio.UnknownFormatError, match="FIFO"):
        ckptio.backends.detect_backend(str(fifo))


@pytest.mark.mpi
def test_several_paths_worst_status_and_closed_pipe(tmp_path):
    good = tmp_path / "chk_good"
    run_mpi(2, [PROGRAM, "inspected", str(good), "mpiio"])
    junk = tmp_path / "junk"
    junk.write_bytes(os.urandom(4096))
    bad = tmp_path / "chk_bad"
    raw = bytearray(good.read_bytes())
    raw[len(raw) // 3] ^= 0xFF  # in the data
    bad.write_bytes(bytes(raw))
    both = inspect("--verify", str(good), str(bad))
    assert both.returncode == 1 and both.stdout.count("checkpoint  ") == 2, both.stdout
    assert inspect(str(good), str(bad), str(junk)).returncode == 2
    assert inspect(str(good), str(good)).returncode == 0
    many = json.loads(inspect("--json", str(good), str(junk)).stdout)
    assert [r["status"] for r in many] == ["complete", "not a ckptio checkpoint"]
    for args in (["--json", "--stats", *[str(good)] * 40], [*[str(good)] * 40]):
        proc = subprocess.run(f"{CKPTIO} inspect {' '.join(args)} | head -1", shell=True, capture_output=True,
                              text=True, env=mpi_env(), timeout=120)
        assert proc.stdout.count("\n") == 1, proc.stdout
        assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_every_command_into_a_closed_pipe_ends_quietly_with_the_sigpipe_status(tmp_path):
    """``ckptio ... | head -1`` under ``set -o pipefail``: no traceback, and status 141 (128 + SIGPIPE) or 0 (the
    output fitted the pipe), never 1 or 2, which mean "corrupt"/"different" and "error" (issue 11 item 12)."""
    big = tmp_path / "chk_000001"
    run_mpi(1, [PROGRAM, "big", str(big)])
    for i in range(2, 400):  # names that look like checkpoints: one line each in `ls`
        (tmp_path / f"chk_{i:06d}").write_bytes(b"not a checkpoint")
    commands = [f"inspect --verify {' '.join([str(big)] * 60)}", f"ls {tmp_path}", f"dump {big} x --full",
                f"dump --json {big} x --full", f"diff {big} {big}"]
    for command in commands:
        proc = subprocess.run(f"set -o pipefail; {CKPTIO} {command} | head -1", shell=True, executable="/bin/bash",
                              capture_output=True, text=True, env=mpi_env(), timeout=180)
        assert proc.returncode in (0, 141), (command, proc.returncode, proc.stderr)
        assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, (command, proc.stderr)


def test_directory_scan_reads_a_few_bytes_of_other_files(tmp_path, monkeypatch):
    """latest() over files that are not checkpoints: a few KiB read per file, not up to 64 MiB."""
    from ckptio.backends import detect, looks_like_checkpoint

    import ckptio

    for i in range(5):  # named exactly like checkpoints (others are never opened): each is sniffed, then skipped
        (tmp_path / f"chk_{i:06d}").write_bytes(os.urandom(3 << 20))
    (tmp_path / "chk_notes.txt").write_text("notes\n" * 1000)
    scanned: list[int] = []
    find = detect._find_document
    monkeypatch.setattr(detect, "_find_document", lambda f, size: scanned.append(size) or find(f, size))
    with pytest.warns(UserWarning):
        assert ckptio.latest(tmp_path) is None
    assert scanned == [], "the tails of files that are plainly not checkpoints were searched"
    assert not any(looks_like_checkpoint(str(p)) for p in tmp_path.iterdir())
    zeroed = tmp_path / "chk_zeroed"  # a zeroed header is still diagnosed (the common damage)
    zeroed.write_bytes(bytes(8192))
    assert looks_like_checkpoint(str(zeroed))
    with pytest.raises(ckptio.UnknownFormatError):
        detect.detect_backend(str(zeroed))
    assert scanned, "a zeroed header is searched for a metadata document"
