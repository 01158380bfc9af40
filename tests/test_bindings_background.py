"""C and Fortran bindings: async and staged checkpoints and compression (issue 16, item 6), under mpirun.

``ckptio_create_ex`` (C) and ``ckptio_create(..., mode=, stage_dir=, compression=)`` (Fortran) take the options
of Python's ``ckptio.create``. A background handle (mode "async" or a stage_dir) survives ``ckptio_close`` until
``ckptio_wait``, which returns the background write's failure with the same status and message on every rank;
``ckptio_wait_all`` and ``ckptio_finalize`` report a failure whose handle was never waited for. Without
MPI_THREAD_MULTIPLE ckptio writes synchronously (a warning): the same failures then come from ``ckptio_close``.
The programs check the data they read back themselves; this module checks the ERR lines and the files.
"""

from __future__ import annotations

import pytest
from mpi_helpers import run_mpi, run_program
from test_bindings import CODES, PROGRAM, ensure_build, error_lines, same_everywhere

pytestmark = [pytest.mark.mpi, pytest.mark.bindings, pytest.mark.timeout(600)]

DECL, ARG, CAP, OK = (CODES[c] for c in ("CKPTIO_ERR_DECLARATION", "CKPTIO_ERR_ARGUMENT",
                                         "CKPTIO_ERR_CAPABILITY", "CKPTIO_OK"))


@pytest.fixture(scope="session")
def build():
    return ensure_build()


def uncovered(nprocs: int) -> str:
    return f"element [{4 * nprocs}] is written by no rank"


def check_common(cases: dict, nprocs: int, threaded: bool) -> None:
    """The failing background checkpoints: reported by wait/wait_all/finalize when threaded, by close if not."""
    fail6 = same_everywhere(cases, "background_wait" if threaded else "background_close", nprocs, DECL)
    assert "fail_000006" in fail6 and uncovered(nprocs) in fail6
    same_everywhere(cases, "background_close" if threaded else "background_wait", nprocs, OK)
    fail7 = same_everywhere(cases, "background_wait_all" if threaded else "background_close7", nprocs, DECL)
    assert "fail_000007" in fail7 and uncovered(nprocs) in fail7
    same_everywhere(cases, "background_close7" if threaded else "background_wait_all", nprocs, OK)
    fail9 = same_everywhere(cases, "finalize_unwaited" if threaded else "background_close9", nprocs, DECL)
    assert fail9.startswith("ckptio_finalize: " if threaded else "ckptio_close: ") and "fail_000009" in fail9
    same_everywhere(cases, "background_close9" if threaded else "finalize_unwaited", nprocs, OK)


def check_files(tmp_path) -> None:
    names = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    for good in ("async_000001", "staged_000002", "zstd_000003"):
        assert good in names, names
    assert not [n for n in names if n.startswith(("fail_", "mixed_"))], names
    codec = run_mpi(1, [PROGRAM, "codec", str(tmp_path / "zstd_000003")]).stdout
    assert "CODEC ['zstd+shuffle:3']" in codec, codec


@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_c_async_staged_compressed(build, tmp_path, nprocs):
    proc = run_program(nprocs, [build / "ckptio_test_c", "background", tmp_path], timeout=300)
    assert f"BACKGROUND OK {nprocs} ranks" in proc.stdout
    assert "MPI_THREAD_MULTIPLE" not in proc.stderr  # really asynchronous
    cases = error_lines(proc.stdout)
    check_common(cases, nprocs, threaded=True)
    assert "only ckptio_wait and ckptio_done" in same_everywhere(cases, "write_after_close", nprocs, ARG)
    assert "already closed" in same_everywhere(cases, "close_twice", nprocs, ARG)
    assert "call ckptio_close first" in same_everywhere(cases, "wait_before_close", nprocs, ARG)
    assert "not a background checkpoint" in same_everywhere(cases, "wait_sync_handle", nprocs, ARG)
    assert "mode='later'" in same_everywhere(cases, "bad_mode", nprocs, DECL)
    assert "does not support compression" in same_everywhere(cases, "compression_hdf5", nprocs, CAP)
    if nprocs > 1:
        message = same_everywhere(cases, "mode_differs", nprocs, DECL)
        assert "different mode=" in message and "'async' on rank 0" in message
    check_files(tmp_path)


def test_c_without_thread_multiple_falls_back_to_sync(build, tmp_path):
    proc = run_program(2, [build / "ckptio_test_c", "background", tmp_path, "single"], timeout=300)
    assert "BACKGROUND OK 2 ranks" in proc.stdout
    assert "MPI_THREAD_MULTIPLE; mode='async' falls back" in proc.stderr
    check_common(error_lines(proc.stdout), 2, threaded=False)
    check_files(tmp_path)


@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_fortran_async_staged_compressed(build, tmp_path, nprocs):
    proc = run_program(nprocs, [build / "ckptio_test_f", "background", tmp_path], timeout=300)
    assert f"BACKGROUND OK {nprocs} ranks" in proc.stdout
    assert "MPI_THREAD_MULTIPLE" not in proc.stderr
    cases = error_lines(proc.stdout)
    check_common(cases, nprocs, threaded=True)
    assert "call ckptio_wait on it first" in same_everywhere(cases, "create_on_pending", nprocs, ARG)
    assert "only ckptio_wait and ckptio_done" in same_everywhere(cases, "write_after_close", nprocs, ARG)
    assert "does not support compression" in same_everywhere(cases, "compression_hdf5", nprocs, CAP)
    check_files(tmp_path)
