"""The library formats' collective write calls cut to one round of Open MPI's OMPIO collective buffering
(``backends.collective_calls``, ``coord.hints.library_rounds``, ``backends.pnetcdf_steps.within_calls``): a
one-client write error in a call of several rounds left the other ranks waiting in the next round
(``tests/faults/test_one_client_write_error.py`` runs the real thing). Every cut call is checked here against this
file's own model of OMPIO's rounds, written from ``fcoll_vulcan_file_write_all.c`` (Open MPI 4.1.4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ckptio.backends import collective_calls
from ckptio.backends.base import BlockToWrite
from ckptio.backends.collective_calls import VariableCut, calls, clip, one_round, runs, variable_calls
from ckptio.backends.pnetcdf_steps import _TABLES, block_parts, data_groups, within_calls

from ckptio.coord.hints import library_rounds
from ckptio.model.layout import Box
from ckptio.model.variable_plan import VariablePlan

MiB = 1 << 20


def c_order_span(shape: tuple[int, ...], box: Box) -> tuple[int, int]:
    """[first, last + 1) element index of ``box`` in C order of ``shape``."""
    first = int(np.ravel_multi_index(box.offset, shape)) if shape else 0
    last = int(np.ravel_multi_index(tuple(e - 1 for e in box.end), shape)) if shape else 0
    return first, last + 1


def vulcan_rounds(ranges: list[tuple[int, int]], aggregators: int, round_bytes: int, file_offset: int = 0) -> int:
    """OMPIO fcoll/vulcan's rounds for one collective write call whose ranks write these [start, end) byte ranges
    of a variable that starts at ``file_offset`` in the file: stripes of ``D = ceil(extent / aggregators)`` bytes
    from the FILE's offset 0 (``mca_fcoll_vulcan_minmax``), stripe ``j`` to aggregator ``j % aggregators``
    (``mca_fcoll_vulcan_break_file_view``), ``cycles = max over aggregators of ceil(their bytes /
    bytes_per_cycle)``, ``bytes_per_cycle`` = half of ``cb_buffer_size`` (= ``round_bytes``)."""
    lo = min(a for a, _ in ranges) + file_offset
    hi = max(b for _, b in ranges) + file_offset
    stripe = -(-(hi - lo) // aggregators)
    held = [0] * aggregators
    for a, b in ranges:
        a, b = a + file_offset, b + file_offset
        while a < b:
            end = min(b, (a // stripe + 1) * stripe)
            held[(a // stripe) % aggregators] += end - a
            a = end
    return max(-(-h // round_bytes) for h in held)


def offsets(span: int, seed: int) -> list[int]:
    """Where a variable may start in the file: 0, evenly spread points and random ones over ``span`` bytes."""
    rng = np.random.default_rng(seed)
    return [0, *range(1, span, max(1, span // 13)), *rng.integers(0, max(1, span), 12).tolist()]


@pytest.mark.parametrize("shape,itemsize,run", [
    ((1000, 16, 16, 16), 8, 8 * MiB),   # FLASH-like: ranges of blocks
    ((3, 5, 1 << 20), 8, 3 * MiB),      # rows of the last two axes (40 MiB) too large: ranges of the second axis
    ((2, 1 << 22), 8, 5 * MiB),         # rows of 32 MiB: ranges of the last axis within each row
    ((7,), 8, 16),                      # 2 elements per run
    ((4, 4), 8, 8),                     # one element per run
])
def test_runs_tile_the_variable_in_c_order_each_contiguous_and_within_the_limit(shape, itemsize, run):
    parts = runs(shape, itemsize, run)
    assert len(parts) > 1
    position = 0
    for part in parts:  # consecutive, contiguous: each run's extent in the file is its bytes
        first, end = c_order_span(shape, part)
        assert first == position and end - first == part.size, (part, shape)
        assert part.size * itemsize <= run
        position = end
    assert position == math.prod(shape)


def test_no_limit_a_small_variable_and_a_scalar_are_one_call():
    assert variable_calls((1000, 16), 8, 0, 0).calls == [[Box((0, 0), (1000, 16))]]
    assert variable_calls((1000, 16), 8, 4, 32 * 1024).calls == [[Box((0, 0), (1000, 16))]]  # 125 KiB <= 4 x 32 KiB
    assert variable_calls((), 8, 1, 4).calls == [[Box((), ())]]
    assert variable_calls((0, 5), 8, 2, 4).calls == [[Box((0, 0), (0, 5))]]  # nothing to write: one (empty) call


SHAPES = [((8000, 64, 64), 8), ((1001, 7, 13), 4), ((3, 5, 1 << 18), 8), ((2, 1 << 22), 8), ((100_003,), 2),
          ((5120, 1024), 8)]


@pytest.mark.parametrize("aggregators,round_bytes", [(3, 8 * MiB), (4, 8 * MiB), (1, 2 * MiB), (7, 1 * MiB),
                                                     (80, 64 * 1024)])
@pytest.mark.parametrize("shape,itemsize", SHAPES, ids=[str(s) for s, _ in SHAPES])
def test_every_call_is_one_vulcan_round_and_the_calls_write_every_byte_once(shape, itemsize, aggregators,
                                                                          round_bytes):
    cut = variable_calls(shape, itemsize, aggregators, round_bytes).calls
    nbytes = math.prod(shape) * itemsize
    if nbytes <= aggregators * round_bytes:
        assert len(cut) == 1
    else:  # (the whole variable in one call would have needed more)
        assert vulcan_rounds([(0, nbytes)], aggregators, round_bytes) > 1
        assert len(cut) <= 2 * math.ceil(nbytes / (aggregators * round_bytes)) * max(1, math.prod(shape[:1]))
    covered = np.zeros(math.prod(shape), np.int8)
    for k, call in enumerate(cut):
        spans = [c_order_span(shape, run) for run in call]
        assert spans == sorted(spans)  # file order
        ranges = [(a * itemsize, b * itemsize) for a, b in spans]
        for offset in offsets(2 * aggregators * round_bytes, k):  # wherever the variable lies in the file
            assert vulcan_rounds(ranges, aggregators, round_bytes, offset) == 1, (call, offset)
        for a, b in spans:
            covered[a:b] += 1
    assert (covered == 1).all()


def test_one_round_agrees_with_vulcan_wherever_the_variable_lies():
    """The backends' check (``one_round``, from no file offset) against this file's model at many offsets: a call
    it passes is one round at every offset; the calls of the first dealing, runs of a whole round each, are not,
    and it says so. That dealing hung an outside trial (3 ranks, one 40 MiB variable, 8 MiB rounds: the first
    and the last stripe of a call belong to one aggregator, which then held two runs)."""
    shape, itemsize, aggregators, round_bytes = (5120, 1024), 8, 3, 8 * MiB
    eight = runs(shape, itemsize, round_bytes)  # 5 runs of 8 MiB, dealt as before: [0, 2, 4], [1, 3]
    first = [eight[0], eight[2], eight[4]]
    ranges = [(a * itemsize, b * itemsize) for a, b in (c_order_span(shape, run) for run in first)]
    assert max(vulcan_rounds(ranges, aggregators, round_bytes, o) for o in offsets(6 * round_bytes, 1)) == 2
    assert not one_round(first, shape, itemsize, aggregators, round_bytes)
    rng = np.random.default_rng(5)
    for _ in range(300):
        shape = tuple(int(n) for n in rng.integers(1, 24, rng.integers(1, 4)))
        itemsize, aggregators = int(rng.choice([1, 4, 8])), int(rng.integers(1, 8))
        round_bytes = int(rng.integers(itemsize, max(itemsize + 1, math.prod(shape) * itemsize // 2)))
        parts = runs(shape, itemsize, int(rng.integers(itemsize, 2 * round_bytes + 1)))
        call = sorted(rng.choice(len(parts), min(len(parts), aggregators), replace=False).tolist())
        call = [parts[i] for i in call]
        ranges = [(a * itemsize, b * itemsize) for a, b in (c_order_span(shape, run) for run in call)]
        if one_round(call, shape, itemsize, aggregators, round_bytes):
            assert all(vulcan_rounds(ranges, aggregators, round_bytes, o) == 1
                       for o in offsets(2 * aggregators * round_bytes + 1, 0)), (shape, itemsize, call)


def test_a_dealt_call_that_would_take_two_rounds_goes_out_run_by_run(monkeypatch):
    """Not seen with runs of half a round (a random search of 19,643 dealt calls at 552,628 offsets found none
    that took two rounds); the guard, with runs of a whole round dealt instead."""
    shape, itemsize, aggregators, round_bytes = (5120, 1024), 8, 3, 8 * MiB
    whole_rounds = runs(shape, itemsize, round_bytes)
    monkeypatch.setattr(collective_calls, "runs", lambda *args: whole_rounds)
    cut = variable_calls(shape, itemsize, aggregators, round_bytes)
    assert [len(call) for call in cut.calls] == [1, 1, 1, 2]  # [0], [2], [4] run by run; [1, 3] passes
    assert all(run in cut.calls[call] for call, run in zip(cut.call_of, cut.runs, strict=True))
    for k, call in enumerate(cut.calls):
        ranges = [(a * itemsize, b * itemsize) for a, b in (c_order_span(shape, run) for run in call)]
        assert all(vulcan_rounds(ranges, aggregators, round_bytes, o) == 1 for o in offsets(6 * round_bytes, k))


def cut_of(shape: tuple[int, ...], calls_: list[list[Box]]) -> VariableCut:
    """A VariableCut of these calls (whose runs tile ``shape``), as variable_calls makes them."""
    order = sorted((np.ravel_multi_index(run.offset, shape), k, run) for k, call in enumerate(calls_) for run in call)
    return VariableCut(shape, calls_, [run for _, _, run in order], np.array([s for s, _, _ in order], np.int64),
                       [k for _, k, _ in order])


def test_a_blocks_parts_are_found_among_the_runs_it_spans_only():
    shape, itemsize = (1000, 30), 8
    cut = variable_calls(shape, itemsize, 3, 20 * 30 * 8)  # runs of 10 rows (half a round), dealt to 34 calls
    data = np.arange(25 * 7.0).reshape(25, 7)
    got = list(cut.parts(Box((95, 3), (25, 7)), data))  # rows 95-119: runs 9, 10 and 11
    assert [box for _, box, _ in got] == [Box((95, 3), (5, 7)), Box((100, 3), (10, 7)), Box((110, 3), (10, 7))]
    assert [call for call, _, _ in got] == [cut.call_of[9], cut.call_of[10], cut.call_of[11]]
    assert all(run in cut.calls[call] for call, run in zip(cut.call_of, cut.runs, strict=True))
    assert np.array_equal(np.concatenate([d for _, _, d in got]), data)


def test_clip_is_a_view_of_the_part_inside_the_run():
    data = np.arange(40.0).reshape(10, 4)
    box = Box((20, 0), (10, 4))
    part = clip(box, data, Box((25, 0), (100, 4)))
    assert part is not None and part[0] == Box((25, 0), (5, 4))
    assert np.shares_memory(part[1], data) and np.array_equal(part[1], data[5:])
    assert clip(box, data, Box((30, 0), (5, 4))) is None
    whole = clip(box, data, Box((0, 0), (100, 4)))
    assert whole is not None and whole[1] is data
    halo = np.zeros((12, 6))  # a strided view stays one
    view = clip(box, halo[1:-1, 1:-1], Box((22, 0), (3, 4)))
    assert view is not None and np.shares_memory(view[1], halo) and view[1].shape == (3, 4)
    scalar = np.array(3.0)
    assert clip(Box((), ()), scalar, Box((), ())) == (Box((), ()), scalar)


def test_every_rank_makes_ncalls_calls_per_cut_call_with_its_pieces_in_file_order_or_none():
    """HDF5: a rank with two groups of blocks (two blocks sharing rows) and one with none make the same number of
    calls; a call of several runs gets a rank's pieces in file order (what one H5Dwrite's buffer must be)."""
    a = (Box((0, 0), (6, 2)), np.zeros((6, 2)))
    b = (Box((4, 2), (4, 2)), np.ones((4, 2)))  # rows 4-7: shares rows 4-5 with a, so a group of its own
    cut = cut_of((8, 4), [[Box((0, 0), (2, 4)), Box((4, 0), (2, 4))], [Box((2, 0), (2, 4)), Box((6, 0), (2, 4))]])
    got = list(calls([a, b], [[0], [1]], 2, cut))
    assert len(got) == 4 == len(list(calls([], [], 2, cut)))  # 2 calls x 2 groups, also with nothing to write
    assert [[box for box, _ in call] for call in got] == [
        [Box((0, 0), (2, 2)), Box((4, 0), (2, 2))], [Box((4, 2), (2, 2))],
        [Box((2, 0), (2, 2))], [Box((6, 2), (2, 2))]]
    assert all(np.shares_memory(data, a[1]) for _, data in got[0] + got[2])
    interleaved = cut_of((6, 2), [[Box((4, 0), (2, 2)), Box((0, 0), (2, 2))], [Box((2, 0), (2, 2))]])
    one = list(calls([a], [[0]], 1, interleaved))
    assert [box for box, _ in one[0]] == [Box((0, 0), (2, 2)), Box((4, 0), (2, 2))]  # in file order
    two = list(calls([(Box((0, 0), (2, 2)), np.ones((2, 2))), (Box((4, 0), (2, 2)), np.ones((2, 2)))], [[0, 1]], 1,
                     interleaved))
    assert [box for box, _ in two[0]] == [Box((0, 0), (2, 2)), Box((4, 0), (2, 2))]


def test_the_rounds_are_ompios_and_none_under_romio():
    hints = {"cb_nodes": "80", "cb_buffer_size": str(16 * MiB)}
    assert library_rounds(hints, 7, romio=False) == (7, 8 * MiB)  # cb_nodes beyond the ranks: one per rank
    assert library_rounds({**hints, "cb_nodes": "2"}, 7, romio=False) == (2, 8 * MiB)
    assert library_rounds(hints, 7, romio=True) == (0, 0)
    assert library_rounds(hints, 2, romio=False) == (0, 0)  # OMPIO's "individual" writes: no rounds at all
    assert library_rounds(hints, 3, romio=False) == (3, 8 * MiB)


def plans(sizes: dict[str, int]) -> dict[str, VariablePlan]:
    return {name: VariablePlan(name, "uint8", (n,), "array") for name, n in sizes.items()}


def test_pnetcdf_steps_keep_a_cut_variables_calls_apart_and_groups_within_the_rounds():
    v = plans({"a": 5 * MiB, "b": 1 * MiB, "c": 1 * MiB, "d": 2 * MiB, "e": 3 * MiB})
    names = list(v)
    groups = data_groups(v, names, 0)  # no write-back: one group
    rounds = (2, 2 * MiB)  # 4 MiB a call
    cuts = {n: variable_calls(v[n].shape, 1, *rounds) for n in names}
    assert len(cuts["a"].calls) == 3 and all(len(cuts[n].calls) == 1 for n in "bcde")  # a: 5 runs of 1 MiB
    steps = within_calls(groups, v, cuts, rounds, 512, 1000)
    assert steps == [[("a", 0)], [("a", 1)], [("a", 2)], [("b", 0), ("c", 0)], [("d", 0)], [("e", 0), _TABLES]]
    for step in steps:  # whole variables: their extent within the rounds together
        whole = [n for n, _ in step if n]
        if whole and len(cuts[whole[0]].calls) == 1:
            assert sum(v[n].nbytes for n in whole) + 512 * (len(whole) - 1) <= 4 * MiB
    # no cut: the groups as they were, each variable one part, the tables with the last
    uncut = {n: variable_calls(v[n].shape, 1, 0, 0) for n in names}
    assert within_calls(groups, v, uncut, (0, 0), 512, 1000) == [[(n, 0) for n in names] + [_TABLES]]
    # tables that do not fit beside the last step: one of their own
    assert within_calls([["e"]], v, cuts, rounds, 512, MiB)[-1] == [_TABLES]
    assert within_calls([[]], v, {}, rounds, 512, 1000) == [[_TABLES]]  # nothing stored: the tables alone


def test_pnetcdf_puts_are_each_block_in_each_run_it_meets():
    data = np.arange(24.0).reshape(6, 4)
    blocks = [BlockToWrite("v", 0, Box((1, 0), (6, 4)), data), BlockToWrite("empty", 1, Box((0,), (0,)), np.zeros(0)),
              BlockToWrite("unstored", 2, Box((0,), (3,)), np.zeros(3))]
    cuts = {"v": cut_of((8, 4), [[Box((0, 0), (3, 4)), Box((6, 0), (2, 4))], [Box((3, 0), (3, 4))]]),
            "empty": variable_calls((0,), 8, 1, 96)}
    got = block_parts(blocks, cuts)
    assert [(key, box) for key, box, _ in got] == [(("v", 0), Box((1, 0), (2, 4))), (("v", 1), Box((3, 0), (3, 4))),
                                                   (("v", 0), Box((6, 0), (1, 4)))]  # in file order
    assert all(np.shares_memory(d, data) for _, _, d in got)
