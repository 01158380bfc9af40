"""An aggregator's rounds of the aggregated native write (ckptio.engine.write_rounds), local and pure: its own
pieces are written from the caller's arrays (a strided interior as its rows, never copied into a round buffer), what
other ranks send lands in round buffers of at most ``round_bytes``, and the write calls' runs (in batches of
at most ``limit`` arrays) put exactly the bytes a contiguous copy would have at their file offsets."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from ckptio.coord import datatypes as memtypes
from ckptio.engine.write_rounds import AggregatorPlan, SenderPlan, StridedBytes, batches
from ckptio.model.write_domains import contiguous_domains


def _pieces(rank: int, base: int) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
    """Rank ``rank``'s pieces from file offset ``base`` (a halo'd interior, a contiguous array, a strided 2-D
    view) and the file image they make (their C-order bytes one after the other)."""
    full = np.full((9, 10, 11), -1.0)
    interior = full[2:-2, 2:-2, 2:-2]
    interior[...] = np.arange(interior.size).reshape(interior.shape) + 1000.0 * rank
    flat = np.arange(37, dtype=np.int32) + 100 * rank
    cols = (np.arange(8 * 9, dtype=np.int16).reshape(8, 9) + rank)[1:7, 2:6]
    pieces, at = [], base
    for a in (interior, flat, cols):
        pieces.append((at, a))
        at += a.nbytes
    return pieces, np.concatenate([np.ascontiguousarray(a).reshape(-1).view(np.uint8) for _, a in pieces])


def _write(runs, image: np.ndarray, limit: int, stage_bytes: int | None = None) -> int:
    """Write ``runs`` into ``image`` as a byte-range writer would, group by group; the number of groups. With
    ``stage_bytes``: short rows gathered into a staging buffer of that size (every row counts as short)."""
    calls = 0
    plain = {id(a) for _, parts in runs for a in parts if isinstance(a, np.ndarray)}
    stage = np.zeros(stage_bytes or 0, np.uint8)
    groups = batches(runs, limit, (lambda: stage) if stage_bytes else None, short=1 << 40)
    for group in groups:
        staged = [a for _, arrays in group for a in arrays if np.shares_memory(a, stage)]
        assert sum(a.nbytes for a in staged) <= len(stage)
        assert sum(id(a) not in plain for _, arrays in group for a in arrays) - len(staged) <= limit  # row views
        for offset, arrays in group:
            for a in arrays:
                assert a.dtype == np.uint8 and a.flags.c_contiguous
                image[offset:offset + a.nbytes] = a
                offset += a.nbytes
        calls += 1
    return calls


@pytest.mark.parametrize(("limit", "stage_bytes"), [(1, None), (3, None), (7, None), (512, None), (512, 5),
                                                   (512, 96), (512, 4096)])
@pytest.mark.parametrize("buffer_bytes", [256, 4096, 1 << 20])
def test_rounds_put_the_bytes_of_both_ranks_at_their_offsets(limit, stage_bytes, buffer_bytes):
    mine, image0 = _pieces(0, 0)
    theirs, image1 = _pieces(1, image0.nbytes + 24)  # rank 1's region after a gap
    start1 = theirs[0][0]
    spans = np.array([[0, image0.nbytes], [start1, start1 + image1.nbytes]])
    domains, own = contiguous_domains(spans, [0, 0], 1, 1, 64, buffer_bytes)  # one aggregator: rank 0
    assert domains.aggregators == (0,)
    sender1 = SenderPlan(theirs, domains, own[1], 1)
    sender0 = SenderPlan(mine, domains, own[0], 0)
    assert not len(sender1.own) and not len(sender0.sent)
    plan = AggregatorPlan({1: sender1.descriptors()[0]}, sender0, domains.round_bytes, domains.cell)
    assert plan.slot_bytes <= domains.round_bytes
    expected = np.zeros(start1 + image1.nbytes, np.uint8)
    expected[:image0.nbytes] = image0
    expected[start1:] = image1
    got = np.zeros_like(expected)
    nrounds = max(plan.nrounds, sender1.nrounds)
    received = [k for k in range(nrounds) if plan.receives(k)]
    for k in range(nrounds):
        if k in received:  # rank 1's message of round k, as the exchange delivers it: its rows in order
            message = sender1.sent.take(np.flatnonzero(sender1.sent.round == k))
            data = np.concatenate([expected[o:o + n] for o, n in zip(message.offset, message.length, strict=True)])
            stream = plan.receives(k)[1]
            assert stream.nbytes == data.nbytes
            at = 0
            for addr, n in zip(stream.addrs.tolist(), stream.lengths.tolist(), strict=True):
                slot = plan.slot(k)
                assert memtypes.address(slot) <= addr and addr + n <= memtypes.address(slot) + slot.nbytes
                ctypes.memmove(addr, memtypes.address(data) + at, n)
                at += n
        runs = plan.runs(k)
        for _, parts in runs:  # a round buffer's bytes, or rank 0's own: views of its arrays
            for part in parts:
                memory = part.span if isinstance(part, StridedBytes) else part
                assert any(np.shares_memory(memory, s) for s in plan._slots.values()) != \
                    any(np.shares_memory(memory, a) for _, a in mine)
        _write(runs, got, limit, stage_bytes)
    assert (got == expected).all()
    assert len(plan._slots) == min(2, len({k % 2 for k in received}))  # only rounds that receive use a buffer
    assert all(s.nbytes >= plan.slot_bytes for s in plan._slots.values()) and plan.slot_bytes <= domains.round_bytes
    # rank 0's own region comes first in the round: no hole for it in the buffer (at most one cell of alignment)
    assert plan.slot_bytes <= min(domains.round_bytes, image1.nbytes + 2 * domains.cell)


def test_own_pieces_alone_need_no_round_buffer():
    """An aggregator that receives nothing (every rank its own aggregator) allocates no round buffer: its
    strided interior is written as its rows straight from the caller's array."""
    mine, image = _pieces(0, 40)
    domains, own = contiguous_domains(np.array([[40, 40 + image.nbytes]]), [0], 1, None, 64, 1 << 20)
    plan = AggregatorPlan({}, SenderPlan(mine, domains, own[0], 0), domains.round_bytes)
    assert plan.slot_bytes == 0
    got = np.zeros(40 + image.nbytes, np.uint8)
    runs = plan.runs(0)
    assert len(runs) == 1 and runs[0][0] == 40  # the three pieces follow each other: one run
    strided = [p for p in runs[0][1] if isinstance(p, StridedBytes)]
    assert [len(p) for p in strided] == [5 * 6, 6]  # one run per interior row, per row of the 2-D view
    assert _write(runs, got, 4) == -(-(5 * 6 + 6) // 4)  # the contiguous piece rides along
    assert not plan._slots
    assert (got[40:] == image).all()
    got[:] = 0
    strided_bytes = sum(p.nbytes for p in strided)
    assert _write(runs, got, 4, 100) == -(-strided_bytes // 100)  # gathered: one group per full staging buffer
    assert (got[40:] == image).all()
