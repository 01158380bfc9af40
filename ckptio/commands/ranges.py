"""Minimum and maximum of every variable (``ckptio inspect --verify``): one serial pass over the data in bounded
pieces, one process, COMM_SELF. NaNs are ignored (``nanmin``/``nanmax``) and counted."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .common import open_serial, progress, read_box, row_chunks


def variable_ranges(path: str) -> dict[str, dict[str, Any]]:
    """Local: ``{name: {"min", "max", "nan_count"}}`` for every numeric variable (bool and complex: none;
    an empty or all-NaN variable: ``None`` min/max). Raises CheckpointError if the data cannot be read."""
    out: dict[str, dict[str, Any]] = {}
    with open_serial(path) as reader:
        for name, info in progress(list(reader.variables.items()), desc="min/max", unit="var"):
            if info.dtype.kind not in "iuf":
                continue
            lo = hi = None
            nans = 0
            for offset, shape in row_chunks(info.shape, info.dtype.itemsize):
                if math.prod(shape) == 0:
                    continue
                a = read_box(reader, name, offset, shape)
                if a.dtype.kind == "f":
                    isnan = np.isnan(a)
                    nans += int(isnan.sum())
                    if nans and isnan.all():
                        continue
                    a_lo, a_hi = np.nanmin(a).item(), np.nanmax(a).item()
                else:
                    a_lo, a_hi = a.min().item(), a.max().item()
                lo = a_lo if lo is None else min(lo, a_lo)
                hi = a_hi if hi is None else max(hi, a_hi)
            out[name] = {"min": lo, "max": hi, "nan_count": nans}
    return out
