"""Series retention and restart timelines, latest() on exact names, background failures (issue 11: items 1, 2,
3 (async), 5, 6, 7, 11, 15).

The MPI scripts build adversarial directories (files named like checkpoints, a second series, Open MPI
leftovers, stale and fresh ckptio temporaries) and check, on every rank, exactly which files survive.
"""

from __future__ import annotations

import re

import pytest
from mpi_helpers import PROGRAMS, run_mpi

# ------------------------------------------------------------------------------------------ pure rules


def test_exact_name_pattern():
    from ckptio.tiers.catalog import NamePattern

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
    from ckptio.tiers.catalog import Entry

    return Entry(f"d/chk_{step:06d}", step, seq, 0)


def test_restart_from_older_step_supersedes_the_abandoned_newer_ones():
    from ckptio.series import plan_retention
    from ckptio.tiers import catalog

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


# ------------------------------------------------------------------------------------------ MPI programs
PROGRAM = str(PROGRAMS / "retention.py")


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["sync", "async", "staged"])
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_series_owns_only_its_exact_names_and_applies_keep_at_each_commit(nprocs, mode, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    proc = run_mpi(nprocs, [PROGRAM, "adversarial", str(d), mode], timeout=100)
    assert proc.stdout.count("OK") == nprocs


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["rerun", "fallback"])
@pytest.mark.parametrize("keep", [1, 2, 10])
def test_restart_from_older_step_keeps_the_source_and_supersedes_newer(keep, how, tmp_path):
    nprocs = {1: 2, 2: 4, 10: 1}[keep]
    proc = run_mpi(nprocs, [PROGRAM, "restart", str(tmp_path / "run"), str(keep), how], timeout=100)
    assert proc.stdout.count("OK") == nprocs


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("nprocs", [1, 3])
def test_damaged_checkpoints_stop_a_restart_job_and_are_never_deleted(nprocs, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    proc = run_mpi(nprocs, [PROGRAM, "all_damaged", str(d)], timeout=100)
    assert proc.stdout.count("OK") == nprocs


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_missing_directory_is_an_error_on_every_rank(nprocs, tmp_path):
    proc = run_mpi(nprocs, [PROGRAM, "missing_directory", str(tmp_path / "run")], timeout=60)
    assert proc.stdout.count("OK") == nprocs


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_suffix_and_step_order(tmp_path):
    proc = run_mpi(2, [PROGRAM, "suffix", str(tmp_path / "run")], timeout=100)
    assert proc.stdout.count("OK") == 2


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("nprocs", [1, 3])
def test_failed_background_checkpoint_is_raised_by_series_wait(nprocs, tmp_path):
    proc = run_mpi(nprocs, [PROGRAM, "async_failure", str(tmp_path / "run"), "0"], timeout=100)
    assert proc.stdout.count("OK") == nprocs


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_failed_background_checkpoint_is_raised_by_a_later_close_once(tmp_path):
    proc = run_mpi(2, [PROGRAM, "async_failure", str(tmp_path / "run"), "close"], timeout=100)
    assert proc.stdout.count("OK") == 2


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_failed_background_checkpoint_is_reported_at_exit(tmp_path):
    proc = run_mpi(2, [PROGRAM, "async_failure", str(tmp_path / "run"), "1"], timeout=100, check=False)
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
    proc = run_mpi(1, [PROGRAM, "--user-exit-handler", "async_failure", str(tmp_path / "run"), "1"], timeout=100,
                   check=False)
    assert "USER HANDLER RAN" in proc.stdout, (proc.stdout, proc.stderr)
    assert "chk_000003" in proc.stderr and "exit status cannot be changed safely" in proc.stderr, proc.stderr
    assert proc.returncode == 0




@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_series_arguments_that_differ_between_ranks_are_refused_everywhere(tmp_path):
    """Outside trial: keep= differing between ranks was silently rank 0's; an empty prefix was accepted."""
    proc = run_mpi(2, [PROGRAM, "series_args", str(tmp_path / "run")], timeout=100)
    assert "ACCEPTED" not in proc.stdout and proc.stdout.count("REFUSED") == 6, proc.stdout
    assert proc.stdout.count("EMPTY") == 2 and proc.stdout.count("OK") == 2, proc.stdout


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("nprocs", [1, 3])
def test_a_restart_job_with_must_exist_refuses_a_misspelt_directory(nprocs, tmp_path):
    proc = run_mpi(nprocs, [PROGRAM, "must_exist", str(tmp_path / "run")], timeout=100)
    assert proc.stdout.count("OK") == nprocs


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_an_async_failure_caused_by_the_ranks_own_exception_is_not_reported_again_at_exit(tmp_path):
    """The rank whose exception failed the background checkpoint got that exception: its handled program must
    not end with "never asked" and status 1 (outside trial)."""
    proc = run_mpi(3, [PROGRAM, "own_exception_async", str(tmp_path / "chk")], timeout=100, check=False)
    assert proc.stdout.count("HANDLED") == 3, proc.stdout + proc.stderr
    assert "never asked" not in proc.stderr and proc.returncode == 0, (proc.returncode, proc.stderr)
