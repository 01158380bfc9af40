"""Comparing what the ranks sent in an agreed phase (pure: rank 0 runs it on the gathered values)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def first_difference(gathered: Sequence[Mapping[str, Any]]) -> tuple[str, int] | None:
    """The first key (in rank 0's order) whose value differs between ranks, and the first rank where it differs
    from rank 0's; None when every rank sent the same."""
    for key in gathered[0]:
        for rank, values in enumerate(gathered):
            if values[key] != gathered[0][key]:
                return key, rank
    return None
