"""Where the native format puts every block (rank-major regions, stripe-aligned where a region is at least one
stripe): the placement rule of ``backends/mpiio.py``, pure, so that ``ckptio plan`` models the file with the same
code that writes it. No MPI, no files.
"""

from __future__ import annotations

import numpy as np

HEADER_SIZE = 4096  # the native header (magic, version, checksum) occupies the first 4 KiB
BLOCK_ALIGN = 8  # every block starts on an 8-byte boundary


def align(value: int, alignment: int) -> int:
    """``value`` rounded up to a multiple of ``alignment``."""
    return (value + alignment - 1) // alignment * alignment


def place_blocks(rank: np.ndarray, local_index: np.ndarray, stored: np.ndarray,
                 stripe_unit: int) -> tuple[np.ndarray, int, list[tuple[int, int]]]:
    """Pure: the native format's rank-major placement of blocks given as columns (one row per declared block:
    writing rank, position among that rank's declarations, stored bytes): each block's file offset, the data
    end and every rank's ``[start, end)`` region. Each rank's blocks in declaration order, 8-byte aligned; a
    rank's region starts on a stripe boundary when it is at least one stripe long. One Python step per rank,
    none per block (the write plan at 100,000 ranks has 2.4 million blocks); ``ckptio plan`` models the file
    with it too (:mod:`ckptio.tools.simulate`)."""
    rank, local_index, stored = (np.asarray(a, np.int64) for a in (rank, local_index, stored))
    offsets = np.zeros(len(rank), np.int64)
    if not len(rank):
        return offsets, HEADER_SIZE, []
    order = np.lexsort((local_index, rank))
    size = (stored[order] + BLOCK_ALIGN - 1) // BLOCK_ALIGN * BLOCK_ALIGN
    first = np.flatnonzero(np.concatenate(([True], rank[order][1:] != rank[order][:-1])))
    last = np.append(first[1:], len(order)) - 1
    region = np.add.reduceat(size, first)
    tail = size[last] - stored[order][last]  # the last block's alignment padding is not part of the region
    starts = np.empty(len(first), np.int64)
    regions: list[tuple[int, int]] = []
    pos = HEADER_SIZE
    for g, (r, t) in enumerate(zip(region.tolist(), tail.tolist(), strict=True)):
        if r >= stripe_unit:
            pos = align(pos, stripe_unit)
        start = pos
        starts[g] = align(start, BLOCK_ALIGN)
        pos = int(starts[g]) + r - t
        if pos > start:
            regions.append((start, pos))
    within = np.cumsum(size) - size
    group = np.repeat(np.arange(len(first)), np.diff(np.append(first, len(order))))
    offsets[order] = starts[group] + within - within[first][group]
    return offsets, pos, regions
