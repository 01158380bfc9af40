"""The PnetCDF data write's steps: which variables (or which calls of a cut one) each collective ``wait_all`` writes.
Pure and local; the same on every rank (from the plan's global shapes and agreed settings only), which is what
makes each step a collective call every rank makes. :mod:`ckptio.backends.pnetcdf_write` posts the puts."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from ckptio.backends.base import BlockToWrite, VariablePlan
from ckptio.backends.collective_calls import VariableCut

from ckptio.model.layout import Box

_TABLES = ("", 0)  # the block tables' requests (no variable has an empty name)
Part = tuple[str, int]  # (variable, call index): what one step holds of a variable


def data_groups(variables: Mapping[str, VariablePlan], names: Sequence[str], group_bytes: int) -> list[list[str]]:
    """``names`` (the stored variables, in definition order) as the groups of the data write's steps: consecutive
    variables until a group holds ``group_bytes`` in the file (every rank's blocks: from the plan's global shapes,
    so the same groups on every rank), the rest with the last; one group when ``group_bytes`` is 0 (no early
    write-back) or there are no variables. At most ``len(names)`` groups, and at most the data's bytes /
    ``group_bytes``: 10,000 variables of 1 KiB make a few steps, not 10,000."""
    if group_bytes <= 0 or not names:
        return [list(names)]
    groups: list[list[str]] = []
    current: list[str] = []
    held = 0
    for name in names:
        var = variables[name]
        current.append(name)
        held += math.prod(var.shape) * np.dtype(var.dtype).itemsize
        if held >= group_bytes:
            groups.append(current)
            current, held = [], 0
    if current:
        if groups:
            groups[-1].extend(current)  # a small tail joins the group before it
        else:
            groups.append(current)
    return groups


def within_calls(groups: Sequence[Sequence[str]], variables: Mapping[str, VariablePlan],
                 cuts: Mapping[str, VariableCut], rounds: tuple[int, int], pad: int,
                 table_bytes: int) -> list[list[Part]]:
    """The parts each data write step holds: ``groups`` (:func:`data_groups`) with the block tables
    (:data:`_TABLES`, ``table_bytes``) in the last, each variable as one part, (name, 0). Where collective calls
    are cut to one round of OMPIO's collective buffering (``rounds``: aggregators, bytes per round; (0, 0): not
    cut), a variable cut into several calls (``cuts``, :func:`ckptio.backends.collective_calls.variable_calls`)
    is one step per call, and a group of whole variables is cut wherever it would span more of the file than the
    aggregators' rounds together (their bytes, and ``pad`` bytes of alignment before each further variable):
    such a call is one round whatever its domains hold. The tables go on their own when they do not fit. The
    same on every rank (global shapes, the agreed figures). Local."""
    limit = rounds[0] * rounds[1]
    out: list[list[Part]] = []
    for names in groups:
        current: list[Part] = []
        extent = 0
        for name in names:
            if len(cuts[name].calls) > 1:  # (only where there is a limit)
                if current:
                    out.append(current)
                    current, extent = [], 0
                out.extend([(name, k)] for k in range(len(cuts[name].calls)))
                continue
            span = variables[name].nbytes + (pad if current else 0)
            if limit and current and extent + span > limit:
                out.append(current)
                current, extent, span = [], 0, variables[name].nbytes
            current.append((name, 0))
            extent += span
        if current or not names:  # (no stored variable: still one, empty, collective step)
            out.append(current)
    last = out[-1]
    whole = all(len(cuts[name].calls) == 1 for name, _ in last)
    if not limit or (whole and sum(variables[n].nbytes + pad for n, _ in last) + table_bytes + 2 * pad <= limit):
        last.append(_TABLES)  # (the block table and its checksums, each a variable of its own)
    else:
        out.append([_TABLES])
    return out


def block_parts(blocks: Sequence[BlockToWrite],
                cuts: Mapping[str, VariableCut]) -> list[tuple[Part, Box, np.ndarray]]:
    """This rank's non-empty blocks of the stored variables (those ``cuts`` has), each as its part in every run of
    its variable's calls it meets: (variable, call index), the part's box, a view of its elements. Local."""
    return [((block.var, call), box, data) for block in blocks if block.box.size and block.var in cuts
            for call, box, data in cuts[block.var].parts(block.box, block.data)]


def in_small_steps(steps: Sequence[Sequence[Part]], variables: Mapping[str, VariablePlan], below: int) -> set[str]:
    """The variables of the data write's collective steps (:func:`within_calls`) whose variables hold fewer than
    ``below`` bytes together: a step's extent in the file is at least that, and a cut variable's step is one call of
    it, spread over the variable (:meth:`ckptio.backends.base.WriteHandle.in_small_calls`). Local."""
    out: set[str] = set()
    for parts in steps:
        names = {name for name, _ in parts if name}  # (not the block tables: _TABLES)
        if sum(variables[name].nbytes for name in names) < below:
            out |= names
    return out
