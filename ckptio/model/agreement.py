"""Comparing what the ranks sent in an agreed phase (pure: rank 0 runs it on the gathered values), and naming
the ranks in its messages (sorted runs, bounded however many ranks there are)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any


def first_difference(gathered: Sequence[Mapping[str, Any]]) -> tuple[str, int] | None:
    """The first key (in rank 0's order) whose value differs between ranks, and the first rank where it differs
    from rank 0's; None when every rank sent the same."""
    for key in gathered[0]:
        for rank, values in enumerate(gathered):
            if values[key] != gathered[0][key]:
                return key, rank
    return None


def ranks_by_value(values: Sequence[Any]) -> dict[Any, list[int]]:
    """``values[rank]`` grouped: each distinct value -> the ranks that sent it, in order of their first rank."""
    groups: dict[Any, list[int]] = {}
    for rank, value in enumerate(values):
        groups.setdefault(value, []).append(rank)
    return groups


def groups_text(groups: Mapping[Any, Sequence[int]], show: Callable[[Any], str] = repr, values_shown: int = 4) -> str:
    """``'posix' on ranks 0-2, 5; 'mpiio' on rank 3`` for :func:`ranks_by_value`'s groups (at most
    ``values_shown`` values; the others summed up: a message about 100,000 ranks stays short)."""
    items = list(groups.items())
    text = "; ".join(f"{show(value)} on {ranks_text(ranks)}" for value, ranks in items[:values_shown])
    if len(items) > values_shown:
        rest = sum(len(set(ranks)) for _, ranks in items[values_shown:])
        text += f"; {len(items) - values_shown} other value(s) on {rest:,} rank(s)"
    return text


def ranks_text(ranks: Iterable[int], runs_shown: int = 8) -> str:
    """``rank 3`` / ``ranks 0-2, 5`` (:func:`rank_runs`) / ``no rank``."""
    unique = sorted({int(r) for r in ranks})
    if len(unique) < 2:
        return f"rank {unique[0]}" if unique else "no rank"
    return f"ranks {rank_runs(unique, runs_shown)}"


def rank_runs(ranks: Iterable[int], runs_shown: int = 8) -> str:
    """Ranks as sorted runs, for messages: ``0-3, 5, 7, 8``; after ``runs_shown`` runs ``..., (N ranks)``."""
    unique = sorted({int(r) for r in ranks})
    runs: list[tuple[int, int]] = []
    for r in unique:
        if runs and r == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], r)
        else:
            runs.append((r, r))
    text = ", ".join(str(a) if a == b else f"{a}, {b}" if b == a + 1 else f"{a}-{b}" for a, b in runs[:runs_shown])
    return text + (f", ... ({len(unique):,} ranks)" if len(runs) > runs_shown else "")
