"""How a format library's (HDF5's, PnetCDF's) collective data write of one variable is cut into calls that Open
MPI's OMPIO writes in one round each: pure and local, the same on every rank.

OMPIO (its default ``vulcan`` component, on 3 ranks or more outside Lustre) writes a collective call in rounds of
at most half of ``cb_buffer_size`` per aggregator, and an aggregator whose write fails in a round leaves the call
at once while the other ranks wait for it in the next round's exchange: a write error on one client (its node's
I/O error, a file size limit, a quota) hung the whole job inside the library's write, with HDF5 and PnetCDF
checkpoints of some 30 MB and more on 3 ranks (Open MPI 4.1.4, ``fcoll_vulcan_file_write_all.c``; the failure
never reached the engine's agreement). A call of ONE round has no later exchange: the failing rank returns its
error, the others return, and the engine's agreement after the step fails every rank.

How ``vulcan`` deals a call's bytes: stripes of ``D = ceil(extent / cb_nodes)`` bytes counted from the start of
the FILE (not of the call), stripe ``j`` to aggregator ``j % cb_nodes`` (ckptio sets ``cb_nodes``; OMPIO takes its
count of aggregators from it); a call is one round when no aggregator holds more than a round's bytes
(:func:`ckptio.coord.hints.library_rounds` gives the two figures). A call's extent meets at most ``cb_nodes + 1``
stripes, so only its first and its last stripe can belong to the same aggregator.

A variable larger than the aggregators' rounds together is cut into :func:`runs` of at most HALF a round (whole
C-order runs: each a box, contiguous in the file), dealt out to calls: the runs in as many consecutive stretches as
there are aggregators, call ``k`` the ``k``-th run of each stretch (:func:`variable_calls`). Each call then spans
the variable with one run per stripe, and an aggregator holds at most one run, or two (its first and last
stripe), a round's bytes, wherever the variable lies in the file; :func:`one_round` checks every call so, and one
that would not be one round goes out run by run (never seen with half-round runs: a guard). The first version
dealt runs of a whole round and hung an outside trial (3 ranks, one 40 MiB variable: the first and the last stripe
of a call went to one aggregator).

What this does not cover: a rank that writes nothing in a call gives ``mca_fcoll_vulcan_minmax`` a lowest offset
of 0, so the call's stripes then span the file from its start and one aggregator may hold several runs (found
when contiguous slices of the variable were tried instead: most slices leave most ranks empty, and they hung the
outside trial's cases). Dealt calls spread over the whole variable, which kept every rank in every call in the cases
the trials hung, but not always: with more ranks than aggregators (beyond ``cb_nodes``, 80 by ckptio's default) a
call of one run per aggregator leaves most ranks out (a model of an 8 GiB variable on 160 ranks and more: every call,
up to 11 rounds where the variable starts far into the file); some even decompositions on fewer ranks, uneven ones
and a variable only some ranks hold leave a rank out too. Making that exact needs every rank's blocks and the
variable's file offset in one place (the planning rank, after the file's structures exist): not done. (OMPIO also
returns success where the write failed, so the engine reads such checkpoints back before their commit:
:func:`ckptio.engine.commit.read_back`.)

ROMIO goes on with its rounds after a failed write and reports the error at the end, so under ROMIO (and MPICH)
nothing is cut.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import product

import numpy as np

from ckptio.model.layout import Box

Call = list[Box]  # the runs one collective call of a variable writes, in file order


def runs(shape: tuple[int, ...], itemsize: int, run_bytes: int) -> list[Box]:
    """The variable of ``shape`` as consecutive C-order runs of at most ``run_bytes`` bytes (where one element
    allows), each a box contiguous in the file: ranges of the first axis whose rows (the axes after it) fit, with
    every index of the axes before it on its own. The whole variable when it fits, ``run_bytes`` is 0 or it is a
    scalar. Local."""
    if not run_bytes or not shape or math.prod(shape) * itemsize <= run_bytes:
        return [Box((0,) * len(shape), tuple(shape))]
    ndim = len(shape)
    axis = next(k for k in range(ndim) if math.prod(shape[k + 1:]) * itemsize <= run_bytes)
    rows = max(1, run_bytes // (math.prod(shape[axis + 1:]) * itemsize))
    out: list[Box] = []
    for index in product(*(range(n) for n in shape[:axis])):
        for start in range(0, shape[axis], rows):
            length = min(rows, shape[axis] - start)
            out.append(Box(tuple(index) + (start,) + (0,) * (ndim - axis - 1),
                           (1,) * axis + (length,) + tuple(shape[axis + 1:])))
    return out


def byte_range(run: Box, shape: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    """[first, end) bytes of a C-order run (a box contiguous in C order) from the variable's start. Local."""
    first = int(np.ravel_multi_index(run.offset, shape)) if shape and run.size else 0
    return first * itemsize, (first + run.size) * itemsize


def one_round(call: Call, shape: tuple[int, ...], itemsize: int, aggregators: int, round_bytes: int) -> bool:
    """Whether OMPIO's ``vulcan`` writes this call in one round wherever the variable lies in the file: vulcan cuts
    the file into stripes of ``D = ceil(extent / aggregators)`` bytes from offset 0 of the FILE (not of the call)
    and gives stripe ``j`` to aggregator ``j % aggregators`` (``mca_fcoll_vulcan_minmax``,
    ``mca_fcoll_vulcan_break_file_view``), so the call's extent meets at most ``aggregators + 1`` stripes and only
    the first and the last can share an aggregator. One round when, for every position of that grid, no stripe,
    nor the first and the last together, holds more than ``round_bytes`` of the call's runs (every element of a
    variable is some rank's: the plan refuses holes). Local; numpy over O(runs) breakpoints."""
    spans = np.array([byte_range(run, shape, itemsize) for run in call], np.int64).reshape(-1, 2)
    starts, ends = spans[:, 0] - spans[0, 0], spans[:, 1] - spans[0, 0]
    extent = int(ends[-1])
    total = int((ends - starts).sum())
    stripe = max(1, -(-extent // aggregators))

    def held(x: np.ndarray) -> np.ndarray:
        """The call's bytes in [its first byte, + x), for each x."""
        return np.clip(x[:, None] - starts[None, :], 0, (ends - starts)[None, :]).sum(axis=1)

    bounds = np.concatenate([starts, ends])
    windows = np.concatenate([bounds, bounds - stripe])  # a window's start or end meets a run's boundary
    one = held(windows + stripe) - held(windows)
    shift = (aggregators - 1) * stripe  # from the first stripe's end to the start of the one after the last
    firsts = np.concatenate([bounds, bounds - shift, [stripe]])
    firsts = firsts[(firsts > 0) & (firsts <= stripe)]
    both = held(firsts) + total - held(firsts + shift) if len(firsts) else np.zeros(1, np.int64)
    return bool(max(int(one.max()), int(both.max())) <= round_bytes)


@dataclass(frozen=True, eq=False)
class VariableCut:
    """The collective calls that write one variable (:func:`variable_calls`), with its runs in file order to find
    the few a block meets."""

    shape: tuple[int, ...]
    calls: list[Call]  # each call's runs, in file order
    runs: list[Box]  # every run, in file order (they tile the variable)
    starts: np.ndarray  # each run's first element, C order (int64, increasing)
    call_of: list[int]  # each run's call

    def parts(self, box: Box, data: np.ndarray) -> Iterator[tuple[int, Box, np.ndarray]]:
        """A non-empty block (``box``, its elements ``data``) as (call, part, view of its elements) for each run it
        meets, in file order: only the runs between its first and last element (a block of whole rows meets one
        or two). Local."""
        if len(self.runs) == 1:
            yield 0, box, data
            return
        first = int(np.ravel_multi_index(box.offset, self.shape))
        last = int(np.ravel_multi_index(tuple(e - 1 for e in box.end), self.shape))
        lo = int(np.searchsorted(self.starts, first, side="right")) - 1
        hi = int(np.searchsorted(self.starts, last, side="right"))
        for i in range(lo, hi):
            part = clip(box, data, self.runs[i])
            if part is not None:
                yield self.call_of[i], *part


def variable_calls(shape: tuple[int, ...], itemsize: int, aggregators: int, round_bytes: int) -> VariableCut:
    """The collective calls that write a variable of ``shape``, each one round of OMPIO's collective buffering
    with ``aggregators`` aggregators of ``round_bytes`` each (0: no limit; the whole variable in one call), as
    the module docstring says. The same on every rank (the global shape, the agreed figures). Local."""
    shape = tuple(shape)
    if not round_bytes or not shape or math.prod(shape) * itemsize <= aggregators * round_bytes:
        whole = Box((0,) * len(shape), shape)
        return VariableCut(shape, [[whole]], [whole], np.zeros(1, np.int64), [0])
    parts = runs(shape, itemsize, max(itemsize, round_bytes // 2))  # (a first and a last stripe may share one)
    stretch = -(-len(parts) // aggregators)
    calls: list[Call] = []
    call_of = [0] * len(parts)
    for k in range(stretch):
        members = [i * stretch + k for i in range(aggregators) if i * stretch + k < len(parts)]
        call = [parts[i] for i in members]
        split = not one_round(call, shape, itemsize, aggregators, round_bytes)
        for i in members:
            call_of[i] = len(calls) + (members.index(i) if split else 0)
        calls.extend([[run] for run in call] if split else [call])
    starts = np.array([np.ravel_multi_index(run.offset, shape) for run in parts], np.int64)
    return VariableCut(shape, calls, parts, starts, call_of)


def clip(box: Box, data: np.ndarray, run: Box) -> tuple[Box, np.ndarray] | None:
    """The part of a block (``box``, its elements ``data`` of the box's shape) inside ``run``, with a view of its
    elements (no copy), or None when they do not meet. Local."""
    if box.ndim == 0:
        return box, data
    part = box.intersect(run)
    if part is None:
        return None
    if part == box:
        return box, data
    return part, data[tuple(slice(lo - o, lo - o + n) for lo, o, n in zip(part.offset, box.offset, part.shape,
                                                                            strict=True))]


def calls(pieces: Sequence[tuple[Box, np.ndarray]], groups: Sequence[Sequence[int]], ncalls: int,
          cut: VariableCut) -> Iterator[list[tuple[Box, np.ndarray]]]:
    """This rank's pieces of each collective call of one variable: for each call of ``cut``, ``ncalls`` calls (the
    most any rank needs, the same on every rank), call ``k`` with the blocks of group ``k`` of ``groups`` (indices
    into ``pieces``, this rank's non-empty boxes and elements) clipped to the call's runs, none where this rank has
    fewer groups or nothing there. In file order, the order of the selection's elements that one buffer must have:
    a group's blocks are sorted and disjoint along the first axis (``hdf5_lib.write_groups``) and each block's
    parts come in file order. Local."""
    held: dict[tuple[int, int], list[tuple[Box, np.ndarray]]] = {}
    for k, group in enumerate(groups[:ncalls]):
        for i in group:
            for call, box, data in cut.parts(*pieces[i]):
                held.setdefault((call, k), []).append((box, data))
    for call in range(len(cut.calls)):
        for k in range(ncalls):
            yield held.get((call, k), [])
