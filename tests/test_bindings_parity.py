"""C and Fortran bindings: batched reads and restart fallback past a corrupt checkpoint (issue 16 item 6).

* ``ckptio_read_many`` (C) and ``ckptio_batch_add`` + ``ckptio_read_many`` (Fortran) read many small variables
  in one collective exchange (``ckptio.Reader.read_many``); the number of requests may differ between ranks
  (one rank asks for nothing); a bad request on one rank fails every rank before anything is read.
* ``ckptio_series_create`` (C and Fortran) is ``ckptio.Series(...).create(step)``: after each commit only the
  newest ``keep`` checkpoints of the series stay; a bad argument on one rank fails every rank.
* ``ckptio_latest_verified`` verifies checksums and falls back past a corrupt newest checkpoint, where
  ``ckptio_latest_comm`` (metadata only) still returns it.
"""

from __future__ import annotations

import re

import pytest
from mpi_helpers import run_mpi, run_program
from test_bindings import CODES, PROGRAM, ensure_build, error_lines

pytestmark = [pytest.mark.mpi, pytest.mark.bindings, pytest.mark.timeout(600)]


@pytest.fixture(scope="session")
def build():
    return ensure_build()


def _failed_everywhere(cases: dict, case: str, nprocs: int, status: int) -> str:
    ranks = cases.get(case, {})
    assert sorted(ranks) == list(range(nprocs)), (case, ranks)
    assert {s for s, _ in ranks.values()} == {status}, (case, ranks)
    messages = {m for _, m in ranks.values()}
    assert len(messages) == 1, messages
    return messages.pop()


@pytest.mark.parametrize("nprocs", [2, 4])
def test_c_read_many(build, tmp_path, nprocs):
    proc = run_program(nprocs, [build / "ckptio_test_c", "many", tmp_path, "200"], timeout=300)
    assert f"MANY OK {nprocs} ranks" in proc.stdout
    cases = error_lines(proc.stdout)
    message = _failed_everywhere(cases, "read_many_wrong_dtype", nprocs, CODES["CKPTIO_ERR_ARGUMENT"])
    assert f"rank {nprocs - 1}: ArgumentError: variable 'v00199'" in message and "float32 buffer" in message
    message = _failed_everywhere(cases, "read_many_unknown", nprocs, CODES["CKPTIO_ERR_NOT_FOUND"])
    assert "'nope'" in message
    timing = re.search(r"read_many_s ([\d.]+) one_read_per_variable_s ([\d.]+)", proc.stdout)
    assert timing, proc.stdout


@pytest.mark.parametrize("nprocs", [1, 3])
def test_fortran_read_many(build, tmp_path, nprocs):
    proc = run_program(nprocs, [build / "ckptio_test_f", "many", tmp_path], timeout=300)
    assert f"MANY OK {nprocs} ranks" in proc.stdout
    message = _failed_everywhere(error_lines(proc.stdout), "read_many_noncontiguous", nprocs,
                                 CODES["CKPTIO_ERR_ARGUMENT"])
    assert f'rank {nprocs - 1}: ArgumentError: the array to read "r002" into is not contiguous' in message


def test_latest_verified_falls_back_past_a_corrupt_checkpoint(build, tmp_path):
    run_program(2, [build / "ckptio_test_c", "many", tmp_path, "20"], timeout=300)   # chk_000001, chk_000002
    proc = run_program(2, [build / "ckptio_test_c", "latest", tmp_path])
    assert f"LATEST {tmp_path}/chk_000002" in proc.stdout and f"VERIFIED {tmp_path}/chk_000002" in proc.stdout
    assert "CORRUPTED" in run_mpi(1, [PROGRAM, "corrupt_newest", str(tmp_path / "chk_000002")]).stdout
    proc = run_program(2, [build / "ckptio_test_c", "latest", tmp_path])
    assert f"LATEST {tmp_path}/chk_000002" in proc.stdout          # metadata only: does not see it
    assert f"VERIFIED {tmp_path}/chk_000001" in proc.stdout        # checksums: falls back
    assert f"VERIFIED_N {tmp_path}/chk_000001 1" in proc.stdout    # ... past one damaged checkpoint
    assert f"LATEST_AFTER {tmp_path}/chk_000001" in proc.stdout    # marked: now skipped without reading it
    assert (tmp_path / ".chk_000002.ckptio-damaged").is_file()
    # the fallback's warning as C users should see it: ckptio's message, not the bridge's file and source line
    assert "UserWarning: ckptio: skipping" in proc.stderr and "_ckptio_bridge" not in proc.stderr, proc.stderr
    # every checkpoint damaged: an empty path, as for a new run, but the count tells a restart job to stop
    assert "CORRUPTED" in run_mpi(1, [PROGRAM, "corrupt_newest", str(tmp_path / "chk_000001")]).stdout
    proc = run_program(2, [build / "ckptio_test_c", "latest", tmp_path])
    assert "VERIFIED \n" in proc.stdout and "VERIFIED_N  2\n" in proc.stdout and "LATEST_AFTER \n" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir() if "chk_" in p.name) == [
        ".chk_000001.ckptio-damaged", ".chk_000002.ckptio-damaged", "chk_000001", "chk_000002"]


@pytest.mark.parametrize("nprocs", [2, 3])
def test_lookup_arguments_that_differ_on_one_rank_fail_every_rank(build, tmp_path, nprocs):
    """Outside trial 15: a different dir or prefix on one rank got rank 0's answer, a stage_dir on one rank hung."""
    proc = run_program(nprocs, [build / "ckptio_test_c", "latest_args", tmp_path], timeout=120)
    cases = error_lines(proc.stdout)
    for case, key in (("latest_dir_differs", "dir"), ("latest_prefix_differs", "prefix"),
                      ("latest_stage_differs", "stage_dir"), ("latest_verify_differs", "verify")):
        ranks = cases.get(case, {})  # (each rank's message starts with its own call: its dir, its function)
        assert sorted(ranks) == list(range(nprocs)), (case, ranks)
        for status, message in ranks.values():
            assert status == CODES["CKPTIO_ERR_DECLARATION"], (case, ranks)
            assert f"{key} differs between ranks" in message and f"rank {nprocs - 1}" in message, (case, message)
    assert {s for s, _ in cases["latest_same"].values()} == {CODES["CKPTIO_OK"]}, cases["latest_same"]


@pytest.mark.parametrize("program", ["ckptio_test_c", "ckptio_test_f"])
def test_series_keeps_the_newest_and_restarts(build, tmp_path, program):
    nprocs = 2
    proc = run_program(nprocs, [build / program, "series", tmp_path], timeout=300)
    c = program.endswith("_c")
    prefix, steps = ("chk", (30, 40)) if c else ("state", (4, 5))
    assert f"SERIES OK {tmp_path}/run/{prefix}_{steps[1]:06d}" in proc.stdout
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [f"{prefix}_{s:06d}" for s in steps]
    case, words = ("series_negative_step", "step must not be negative") if c else ("series_keep_0", "keep must be")
    message = _failed_everywhere(error_lines(proc.stdout), case, nprocs, CODES["CKPTIO_ERR_ARGUMENT"])
    assert words in message
