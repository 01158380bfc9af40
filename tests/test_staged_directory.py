"""The staged restart's distributed directory (ckptio.model.staged_directory) without MPI: every exchange of
ckptio.tiers.staged_reader is simulated by handing each simulated rank what ``coord.exchange.sparse_records`` would
give it, so what a rank receives is counted for a job of any size.

The scale property: for a weak-scaled job (each rank writes a fixed amount and reads a fixed amount, in boxes
that straddle its neighbours' blocks) every figure a rank receives (block descriptions at open, requests as a
directory rank, piece descriptors, data, peers) is the same at 16, 64 and 1024 ranks. The old staged reader
allgathered every rank's block list onto every rank: P lists each."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ckptio.model import staged_directory as sd

CUBE = 8        # each rank owns a CUBE^3 box of "dens", written as two blocks (halves along the first axis)
TRAILING = 4    # "tracers": a per-rank segment of 5 + r % 3 rows of TRAILING values


def _grid(p: int) -> tuple[int, int, int]:
    """p = 2^k ranks as a near-cubic px x py x pz grid."""
    k = int(math.log2(p))
    a = [k // 3 + (1 if i < k % 3 else 0) for i in range(3)]
    return 2 ** a[0], 2 ** a[1], 2 ** a[2]


def _job(p: int):
    """Per rank: its blocks ``[k, var, lo, shape]`` (padded to 3 axes) and its requests ``[qi, var, lo, shape]``;
    the variables' global shapes."""
    px, py, pz = _grid(p)
    shapes = [(px * CUBE, py * CUBE, pz * CUBE), (sum(5 + q % 3 for q in range(p)), TRAILING)]
    seg_start = np.concatenate([[0], np.cumsum([5 + q % 3 for q in range(p)])])
    blocks, requests = [], []
    for q in range(p):
        i, j, k = np.unravel_index(q, (px, py, pz))
        lo = np.array([i, j, k]) * CUBE
        half = CUBE // 2
        rows = [[0, 0, *lo, half, CUBE, CUBE], [1, 0, lo[0] + half, lo[1], lo[2], half, CUBE, CUBE],
                [2, 1, seg_start[q], 0, 0, 5 + q % 3, TRAILING, 1]]
        blocks.append(np.array(rows, np.int64))
        shifted = np.minimum(lo + CUBE // 2, np.array(shapes[0]) - CUBE)  # straddles up to 8 writers' cubes
        nxt = (q + 1) % p
        requests.append(np.array([[0, 0, *shifted, CUBE, CUBE, CUBE],
                                  [1, 1, seg_start[q], 0, 0, 5 + q % 3, TRAILING, 1],
                                  [2, 1, seg_start[nxt], 0, 0, 5 + nxt % 3, TRAILING, 1]], np.int64))
    return shapes, blocks, requests


def _deliver(p: int, sends: list[dict[int, np.ndarray]]) -> list[dict[int, np.ndarray]]:
    """What every rank receives: ``{source: rows}`` (sparse_records' result)."""
    got: list[dict[int, np.ndarray]] = [{} for _ in range(p)]
    for src, by_dest in enumerate(sends):
        for dest, rows in by_dest.items():
            got[dest][src] = rows
    return got


def _with_source(received: dict[int, np.ndarray], width: int) -> np.ndarray:
    parts = [np.column_stack([np.full(len(r), s, np.int64), r]) for s, r in sorted(received.items())]
    return np.concatenate(parts) if parts else np.zeros((0, 1 + width), np.int64)


def simulate(p: int) -> dict[str, int]:
    """The staged reader's open and one read on ``p`` simulated ranks: checks the pieces, returns the largest
    figure any rank receives."""
    shapes, blocks, requests = _job(p)
    directory = sd.Directory.build(shapes, p)
    nd = directory.ndim
    assert nd == 3
    published = _deliver(p, [directory.route(b, 1) for b in blocks])
    known = [_with_source(published[q], 2 + 2 * nd) for q in range(p)]
    asked = _deliver(p, [directory.route(r, 1) for r in requests])
    pieces = [sd.match(directory, q, known[q], _with_source(asked[q], 2 + 2 * nd)) for q in range(p)]
    told = _deliver(p, [sd.piece_descriptors(x) for x in pieces])
    mine = [sd.canonical_order(np.concatenate(list(t.values())), nd) for t in told]
    # every request is covered exactly once by the pieces reported for it (blocks tile each variable)
    for q in range(p):
        got = mine[q][mine[q][:, 0] == sd.RECV]
        for qi, rec in enumerate(requests[q]):
            sel = got[got[:, 2] == qi]
            assert sel[:, 4 + nd:].prod(axis=1).sum() == rec[2 + nd:].prod(), (p, q, qi)
            assert len({tuple(x) for x in sel[:, [1, *range(4, 4 + nd)]].tolist()}) == len(sel)  # no duplicate
    # an owner sends a requester's pieces in the order the requester receives them
    for owner in range(p):
        sent = mine[owner][mine[owner][:, 0] == sd.SEND]
        for requester in np.unique(sent[:, 1]).tolist():
            out = sent[sent[:, 1] == requester][:, [2, *range(4, 4 + 2 * nd)]]
            back = mine[requester][(mine[requester][:, 0] == sd.RECV) & (mine[requester][:, 1] == owner)]
            assert np.array_equal(out, back[:, [2, *range(4, 4 + 2 * nd)]]), (owner, requester)
    recv = [m[(m[:, 0] == sd.RECV) & (m[:, 1] != q)] for q, m in enumerate(mine)]
    send = [m[(m[:, 0] == sd.SEND) & (m[:, 1] != q)] for q, m in enumerate(mine)]
    return {
        "open: block rows received": max(sum(len(r) for r in x.values()) for x in published),
        "read: request rows received": max(sum(len(r) for r in x.values()) for x in asked),
        "read: piece descriptors received": max(len(m) for m in mine),
        "read: data elements received": max(int(r[:, 4 + nd:].prod(axis=1).sum()) for r in recv),
        "read: peers (records and data)": max(len(set(published[q]) | set(asked[q]) | set(told[q]) |
                                                  set(recv[q][:, 1].tolist()) | set(send[q][:, 1].tolist()))
                                              for q in range(p)),
    }


def test_tiles_follow_the_data_and_never_outnumber_the_ranks():
    assert sd.tiles_per_axis((1024 * 8, 16, 16), 1024).tolist() == [1024, 1, 1]
    assert sd.tiles_per_axis((128, 64, 64), 1024).tolist() == [16, 8, 8]  # cubes of 8^3
    assert sd.tiles_per_axis((3,), 1024).tolist() == [2]                  # at least two cells per tile
    assert sd.tiles_per_axis((), 64).tolist() == []
    assert sd.tiles_per_axis((1000, 1000), 6).tolist() == [2, 2]          # P/2 < tiles <= P
    d = sd.Directory.build([(16, 4), (5,), ()], 4)
    assert d.ndim == 2 and d.ranks_of(0, np.array([0, 0]), np.array([16, 4])).tolist() == [0, 1, 2, 3]
    assert d.ranks_of(0, np.array([3, 0]), np.array([0, 4])).tolist() == []  # an empty box: no directory
    assert len(d.ranks_of(2, np.array([0, 0]), np.array([1, 1]))) == 1       # a scalar: one tile


@pytest.mark.parametrize("p", [1, 2, 16])
def test_every_request_gets_each_piece_once_in_the_same_order_on_both_sides(p):
    simulate(p)  # the checks are inside


def test_what_a_rank_receives_does_not_grow_with_the_job():
    """Weak scaling: every figure a rank receives is the same at 16, 64 and 1024 ranks (and the old allgather's
    block lists, P of them on every rank, grow 64x between 16 and 1024)."""
    figures = {p: simulate(p) for p in (16, 64, 1024)}
    assert figures[1024] == figures[64], figures
    for key, value in figures[16].items():
        assert value <= figures[64][key], (key, figures)
    assert figures[1024]["open: block rows received"] < 3 * 1024 / 64  # the allgather: 3 x 1024 rows per rank
