"""A client's write error that the MPI-IO library does not report: the checkpoint must still never be reported good.

Open MPI 4.1's OMPIO (on 3 ranks or more) returns success from a collective write on every rank when an
aggregator's ``pwritev`` failed: ``fcoll/vulcan`` (and ``dynamic_gen2``, its Lustre component) print "fbtl_pwritev
failed" and end with ``return OMPI_SUCCESS`` (``ckptio.coord.hints.collective_write_errors_lost``). HDF5's and
PnetCDF's collective data writes, and the native backend's ``CKPTIO_WRITE_IO=write_all``, go through it. Where the
file system shows the lost bytes as a hole, the commit's check that the data landed finds them
(``ckptio.engine.space.missing_data``); where it does not (CephFS through ceph-fuse: a lost write of an HDF5 and of
a PnetCDF checkpoint was found only by the restart's checksums, after both were reported good), the commit reads
the checkpoint back first (``ckptio.engine.commit.read_back``). Here a file system that shows no holes is
simulated with ``CKPTIO_FAULT_NO_HOLES=1``; ``tests/cephfs/test_cephfs_lost_write.py`` runs the real one.

The failing client: ``tests/programs/eio_preload.c``, preloaded, makes rank 1's writes of the checkpoint fail with
EIO (``tests/programs/lost_write_error.py``). Every rank must raise, nothing may be left, and the next checkpoint
must work."""

from __future__ import annotations

import os

import pytest
from mpi_helpers import PROGRAMS, eio_preload, run_mpi

from ckptio.coord.hints import collective_write_errors_lost
from ckptio.engine import space

PROGRAM = str(PROGRAMS / "lost_write_error.py")
CASES = [("hdf5", ""), ("pnetcdf", ""), ("mpiio", "write_all")]


def outcome(stdout: str) -> dict[str, list[str]]:
    lines = stdout.splitlines()
    return {"raised": sorted(line.split()[1] for line in lines if line.startswith("RAISED ")),
            "not_raised": sorted(line.split()[2] for line in lines if line.startswith("NOT RAISED ")),
            "left": next((line.split()[1:] for line in lines if line.startswith("LEFT")), ["(no LEFT line)"]),
            "next_ok": sorted(line.split()[2] for line in lines if line.startswith("NEXT OK "))}


@pytest.fixture(scope="module")
def preload(tmp_path_factory) -> str:
    return eio_preload(tmp_path_factory.mktemp("eio"))


@pytest.mark.parametrize("backend,write_io", CASES, ids=[b + (f"-{w}" if w else "") for b, w in CASES])
def test_a_write_error_the_library_does_not_report_fails_every_rank(tmp_path, preload, backend, write_io):
    # (cb_config_list: under ROMIO every rank an aggregator, so that rank 1 writes; OMPIO ignores it)
    env = {"LD_PRELOAD": preload, "ROWS": "1024", "CKPTIO_FAULT_NO_HOLES": "1", "CKPTIO_HINTS": "cb_config_list=*:*",
           **({"CKPTIO_WRITE_IO": write_io} if write_io else {})}
    proc = run_mpi(3, [PROGRAM, backend, str(tmp_path), "1"], timeout=240, check=False, env=env)
    got = outcome(proc.stdout)
    report = proc.stdout + proc.stderr[-3000:]
    assert proc.returncode == 0, report
    assert got["raised"] == ["0", "1", "2"] and not got["not_raised"], report
    assert got["left"] == [], report
    assert got["next_ok"] == ["0", "1", "2"], report
    assert sorted(os.listdir(tmp_path)) == ["chk"]
    if collective_write_errors_lost(3):  # OMPIO: the library said nothing; the read-back found it
        assert all("found by reading the checkpoint back before its commit" in line
                   for line in proc.stdout.splitlines() if line.startswith("RAISED ")), report


def test_the_probe_tells_a_file_system_that_shows_holes_from_one_that_does_not(tmp_path, monkeypatch):
    """The pytest temporary directory (ext4 or tmpfs) shows a reserved, never written range as a hole; with the
    fault set, no file system does. The probe leaves nothing behind."""
    space._SHOWN.clear()
    assert space.lost_writes_show(str(tmp_path))
    monkeypatch.setenv(space.NO_HOLES_ENV, "1")
    assert not space.lost_writes_show(str(tmp_path))
    assert os.listdir(tmp_path) == []
