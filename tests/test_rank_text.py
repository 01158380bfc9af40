"""ckptio.model.agreement's rank lists for messages: sorted runs, bounded however many ranks there are (pure)."""

from __future__ import annotations

from ckptio.errors import CollectiveError
from ckptio.model.agreement import groups_text, rank_runs, ranks_by_value, ranks_text


def test_runs_of_ranks():
    assert rank_runs([5, 0, 1, 2, 3, 7, 8]) == "0-3, 5, 7, 8"
    assert ranks_text([4]) == "rank 4" and ranks_text([4, 4]) == "rank 4" and ranks_text([]) == "no rank"
    assert ranks_text(range(100_000)) == "ranks 0-99999"


def test_a_message_about_100000_ranks_stays_short():
    odd = ranks_text(range(1, 100_000, 2))
    assert odd.startswith("ranks 1, 3, 5, 7, 9, 11, 13, 15, ...") and odd.endswith("(50,000 ranks)"), odd
    values = [r % 7 for r in range(100_000)]  # seven values, each on a comb of ranks
    text = groups_text(ranks_by_value(values))
    assert len(text) < 400, text
    assert text.startswith("0 on ranks 0, 7, 14") and text.endswith("; 3 other value(s) on 42,856 rank(s)"), text


def test_a_collective_error_names_a_rank_once():
    """Outside trial, 2026-12-06: "rank 2: CheckpointIOError: ... (on rank 2) (on vm)"."""
    error = CollectiveError("write", {2: ("CheckpointIOError", "disk full (on rank 2)", "vm")})
    assert str(error).splitlines()[1] == "  rank 2: CheckpointIOError: disk full (on vm)"
    other = CollectiveError("write", {2: ("CheckpointIOError", "ranks differ (on rank 1)", "")})
    assert "ranks differ (on rank 1)" in str(other)  # another rank's name is the message's own
