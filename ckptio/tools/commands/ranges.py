"""Minimum and maximum of every variable (``ckptio inspect --verify``): one serial pass over the data in bounded
pieces (:mod:`ckptio.tools.commands.stream`, checksums verified again), one process, no MPI. NaNs are ignored and
counted."""

from __future__ import annotations

from typing import Any

import numpy as np

from ckptio.tools.commands.common import progress
from ckptio.tools.commands.stream import Source


def variable_ranges(path: str) -> dict[str, dict[str, Any]]:
    """Local: ``{name: {"min", "max", "nan_count"}}`` for every integer and float variable (an empty or all-NaN
    one: ``None`` min/max). Raises CheckpointError if the data cannot be read or fails verification."""
    out: dict[str, dict[str, Any]] = {}
    with Source(path) as src:
        for name in progress(list(src.variables), desc="min/max", unit="var"):
            if src.dtype(name).kind not in "iuf":
                continue
            lo = hi = None
            nans = 0
            for _box, a in src.pieces(name):
                if a.dtype.kind == "f":
                    isnan = np.isnan(a)
                    nans += int(isnan.sum())
                    a = a[~isnan] if nans else a
                if a.size == 0:
                    continue
                a_lo, a_hi = a.min().item(), a.max().item()
                lo = a_lo if lo is None else min(lo, a_lo)
                hi = a_hi if hi is None else max(hi, a_hi)
            out[name] = {"min": lo, "max": hi, "nan_count": nans}
    return out
