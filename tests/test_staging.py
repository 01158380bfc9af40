"""Staged checkpoints on one node (issue 11 items 3 and 4, issue 14 item 3): copies named by their final
path, retention of staged copies as each checkpoint commits, a stage that cannot be used fails on every rank."""

from __future__ import annotations

import pytest
from mpi_helpers import PROGRAMS, run_mpi

PROGRAM = str(PROGRAMS / "staging.py")  # the MPI programs of these tests


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_runs_sharing_a_stage_keep_their_own_copies_and_retention_runs_at_commit(tmp_path):
    proc = run_mpi(2, [PROGRAM, "two_runs", str(tmp_path / "runs"), str(tmp_path / "stage")])
    assert proc.stdout.count("OK") == 2, proc.stdout


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("nprocs", [1, 2])
def test_stage_that_is_a_file_fails_on_every_rank(nprocs, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "stage").write_text("not a directory")
    proc = run_mpi(nprocs, [PROGRAM, "bad_stage", str(tmp_path / "out"), str(tmp_path / "stage")])
    assert proc.stdout.count("OK") == 2 * nprocs, proc.stdout


def test_stage_kind_decision_names_the_node_that_cannot_see():
    """ckptio.tiers.staging._decide (rank 0's part of locate): views are (host, node leader, probes seen) per rank."""
    from ckptio.errors import CheckpointIOError
    from ckptio.tiers import staging

    shared = [("a", 0, [0, 2]), ("a", 0, [0, 2]), ("b", 2, [0, 2])]
    local = [("a", 0, [0]), ("a", 0, [0]), ("b", 2, [2])]
    assert staging._decide("/s", shared) is True
    assert staging._decide("/s", local) is False
    assert staging._decide("/s", [("a", 0, [0])]) is True  # one node: shared and node-local alike
    blind = [("a", 0, [0]), ("a", 0, [0]), ("b", 2, [0])]  # node b sees node a's stage, not its own
    with pytest.raises(CheckpointIOError, match=r"node b \(ranks 2\) cannot see its own node's probe file in /s"):
        staging._decide("/s", blind)
    partial = [("a", 0, [0, 1]), ("b", 1, [0, 1]), ("c", 2, [2])]  # a and b share a stage, c has its own
    with pytest.raises(CheckpointIOError, match=r"node c \(ranks 2\) sees the stage of no other node out of a, b"):
        staging._decide("/s", partial)


def test_staged_copies_are_keyed_by_the_final_directory(tmp_path):
    from ckptio.tiers import stage_files

    a, b = stage_files.key_dir("/st", "/runs/A/chk_1"), stage_files.key_dir("/st", "/other/A/chk_1")
    assert a != b and a.startswith("/st/A-") and b.startswith("/st/A-")
    assert stage_files.key_dir("/st", "/runs/A/chk_2") == a
    assert stage_files.checkpoint_dir("/st", "/runs/A/chk_1", "t").startswith(a + "/chk_1/")


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_two_series_in_one_directory_never_remove_each_others_staged_copies(tmp_path):
    """Review finding: a staged commit removed EVERY older staged copy of its directory, so a series drained every
    checkpoint (plt) deleted another's newest checkpoint (chk, drain_every=2), which existed on the stage only;
    and a create(drain=...) that differs between ranks sent the ranks into different collectives."""
    (tmp_path / "out").mkdir()
    proc = run_mpi(2, [PROGRAM, "two_series", str(tmp_path / "out"), str(tmp_path / "stage")])
    assert proc.stdout.count("DRAIN") == 2 and proc.stdout.count("OK") == 2, proc.stdout + proc.stderr[-3000:]


@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_a_rank0_warning_turned_into_an_error_fails_every_rank_instead_of_hanging(tmp_path):
    """Review finding: warnings that rank 0 alone gives between two collectives (a weaker redundancy than asked, a
    staged copy not used) raised on rank 0 only under ``-W error`` and left the other ranks in the next collective;
    they are now given inside an agreed step (coord.warn_from_root)."""
    (tmp_path / "out").mkdir()
    proc = run_mpi(2, [PROGRAM, "warning_is_error", str(tmp_path / "out"), str(tmp_path / "stage")], timeout=120,
                   env={"PYTHONWARNINGS": "error::RuntimeWarning"})
    assert proc.stdout.count("FAILED") == 2 and proc.stdout.count("OK") == 2, proc.stdout + proc.stderr[-3000:]


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_staged_close_with_one_failing_rank_raises_everywhere_and_stages_nothing(tmp_path):
    (tmp_path / "out").mkdir()
    proc = run_mpi(3, [PROGRAM, "one_rank_fails", str(tmp_path / "out"), str(tmp_path / "stage")])
    assert proc.stdout.count("DECL") == 3 and proc.stdout.count("OK") == 3, proc.stdout
    assert proc.stdout.count("RAISED") == 1 and proc.stdout.count("OTHERS") == 2, proc.stdout


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("nprocs", [1, 3])
def test_restart_reads_the_stage_and_falls_back_on_a_corrupt_piece(nprocs, tmp_path):
    (tmp_path / "out").mkdir()
    proc = run_mpi(nprocs, [PROGRAM, "corrupt_piece", str(tmp_path / "out"), str(tmp_path / "stage")])
    assert proc.stdout.count("OK") == nprocs, proc.stdout


@pytest.mark.parametrize("nprocs", [2, 3])
def test_staged_reader_reads_like_a_reader_and_never_hangs_when_a_rank_leaves(nprocs, tmp_path):
    """The staged restart reader (outside trial o1): out= (strided, on one rank only), lazy slicing, repr, a bad
    request on one rank as ReadRequestError everywhere, and a rank leaving its with block meets the others in
    their read (they hung before)."""
    proc = run_mpi(nprocs, [PROGRAM, "staged_reader", str(tmp_path / "chk_000001"), str(tmp_path / "stage")],
                   timeout=240)
    assert proc.stdout.count("STAGED READER OK") == nprocs, proc.stdout + proc.stderr


@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_stray_files_and_a_read_only_stage_give_the_same_clear_error_and_lose_nothing(tmp_path):
    """What an outside trial found (issue 28): a stray file where the stage keeps a series' directory made
    latest() fail instead of falling back, and a write fail with a bare NotADirectoryError on some ranks only (the
    cleanup's own error replaced the agreed one); a read-only stage reported the probe's removal, not the stage."""
    import json

    (tmp_path / "out").mkdir()
    proc = run_mpi(2, [PROGRAM, "stray_files", str(tmp_path / "out"), str(tmp_path / "stage")])
    got = [json.loads(line[5:]) for line in proc.stdout.splitlines() if line.startswith("JSON ")]
    assert len(got) == 2, proc.stdout + proc.stderr[-3000:]
    assert all(g["found"] == str(tmp_path / "out" / "chk_000001") for g in got), got
    assert got[0]["errors"] == got[1]["errors"], got
    write = got[0]["errors"][0]
    assert write is not None and write.startswith("Collective") and "NotADirectoryError" in write, write
    assert all(g["stray"] == "not ckptio's" for g in got), got
    if got[0]["mounted"]:
        readonly = got[0]["errors"][1]
        assert readonly is not None and "cannot be used on" in readonly and "remove the probe" not in readonly, readonly
