"""The restart exchange: what the two-phase restart (:mod:`ckptio.engine.restart`) and the staged reader
(:mod:`ckptio.tiers.staged_reader`) send each other, and nothing else. Numbers are int64 records (rows of a fixed
width); data moves straight between the callers' memory as :class:`ckptio.coord.datatypes.Stream` runs.

* :func:`exchange_records`: every rank sends rows to some ranks: an ``Alltoall`` of counts, then one
  ``Alltoallv`` (ROMIO's two-phase pattern; the counts are P integers per rank, which MPI needs).
* :func:`sparse_records`: the same with O(peers) per rank, for exchanges where P integers per rank would be the
  largest thing a rank receives (the staged reader's directory): synchronous sends, probes and a nonblocking
  barrier (Hoefler, Siebert, Lumsdaine: "Scalable communication protocols for dynamic sparse data exchange",
  PPoPP 2010, the NBX algorithm).
* :func:`max_over_ranks`: the number of rounds every rank takes part in (:func:`maxima_over_ranks`: several such
  numbers in one reduction); :func:`exclusive_prefix_sum`: where each rank's rows of a per-rank segment start.
* :func:`move_pieces`: one round's pieces, after an ``Allreduce`` of the ranks' status (a rank that failed
  preparing its side makes every rank skip the data movement together), as matched nonblocking point-to-point
  messages.

None of these agrees on a failure itself: the caller runs the local work that can fail before (inside a
:func:`ckptio.coord.run`) or passes its failure to :func:`move_pieces` and agrees right after
(:func:`ckptio.coord.agree`), so an exception on any rank is the same error on every rank and no rank waits in
a collective another left.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ckptio.coord import datatypes as memtypes

# MPI counts and displacements are C ints: no rank sends or receives this much in one message. Internal; a test
# lowers it (inside its MPI program) to exercise the split exchange without gigabytes of data. Read at every
# call, so setting ``ckptio.coord.exchange.MAX_MESSAGE_BYTES`` takes effect at the next read.
MAX_MESSAGE_BYTES = 2**31
# How the exchange cuts what one rank sends another in a round into messages (ckptio.coord.datatypes.message_starts)
MESSAGE_SMALL = 256 << 10
MESSAGE_GROUP = 64 << 20


def exchange_records(comm, send: Mapping[int, np.ndarray], width: int) -> list[np.ndarray]:
    """Collective over ``comm``: int64 records (rows of ``width``) to the ranks in ``send``; returns what every
    rank sent this one, by source rank. An Alltoall of counts, then one Alltoallv (the per-rank arrays of counts
    are what MPI needs; the payload is this rank's own)."""
    from ckptio.coord.mpi import MPI

    size = comm.Get_size()
    counts = np.zeros(size, np.int64)
    for dest, rows in send.items():
        counts[dest] = rows.size
    rcounts = np.zeros(size, np.int64)
    comm.Alltoall(counts, rcounts)
    sendbuf = (np.concatenate([send[d].reshape(-1) for d in sorted(send)]).astype(np.int64)
               if send else np.zeros(0, np.int64))
    recvbuf = np.empty(int(rcounts.sum()), np.int64)
    sdispl = np.concatenate(([0], np.cumsum(counts)[:-1]))
    rdispl = np.concatenate(([0], np.cumsum(rcounts)[:-1]))
    comm.Alltoallv([sendbuf, (counts, sdispl), MPI.INT64_T], [recvbuf, (rcounts, rdispl), MPI.INT64_T])
    return [recvbuf[int(rdispl[r]):int(rdispl[r] + rcounts[r])].reshape(-1, width) for r in range(size)]


def sparse_records(comm, send: Mapping[int, np.ndarray], width: int, tag: int) -> dict[int, np.ndarray]:
    """Collective over ``comm`` (use a private duplicate, :func:`ckptio.coord.comms.duplicate`): int64 records
    (rows of ``width``) to the ranks in ``send`` (no empty arrays); returns ``{source: rows}`` of the ranks that
    sent this one something. What a rank receives and stores is O(its rows + the ranks that send it some), never
    O(P).

    NBX: each rank sends with synchronous-mode ``Issend`` (complete once received), receives whatever arrives
    (matched probe, any source), and once its own sends completed enters a nonblocking barrier; when the barrier
    completes every rank's sends were received, so the exchange is over everywhere. ``tag`` must differ between
    two consecutive calls on one communicator (a rank that finished may start the next exchange while another
    still probes for this one); alternating two tags suffices."""
    from ckptio.coord.mpi import MPI

    me = comm.Get_rank()
    received: dict[int, np.ndarray] = {}
    pending = []
    buffers = []
    for dest in sorted(send):
        rows = np.ascontiguousarray(send[dest], np.int64).reshape(-1, width)
        if dest == me:
            received[me] = rows
            continue
        buffers.append(rows)
        pending.append(comm.Issend([rows, MPI.INT64_T], dest, tag))
    barrier = None
    status = MPI.Status()
    while True:
        message = comm.Improbe(MPI.ANY_SOURCE, tag, status)  # matched probe: safe beside other threads' MPI calls
        if message is not None:
            rows = np.empty(status.Get_count(MPI.INT64_T), np.int64)
            message.Recv([rows, MPI.INT64_T])
            received[status.Get_source()] = rows.reshape(-1, width)
            continue
        if barrier is None:
            if MPI.Request.Testall(pending):
                barrier = comm.Ibarrier()
        elif barrier.Test():
            return received


def exclusive_prefix_sum(comm, values: np.ndarray) -> np.ndarray:
    """Collective over ``comm`` (every rank passes as many values; none: no call): per element, the sum of the
    values of the ranks before this one, zeros on rank 0 (an ``Exscan``: where each rank's rows of the per-rank
    segments start)."""
    from ckptio.coord.mpi import MPI

    values = np.ascontiguousarray(values, np.int64)
    out = np.zeros_like(values)
    if len(values):
        comm.Exscan(values, out, op=MPI.SUM)
        if comm.Get_rank() == 0:  # MPI leaves rank 0's result undefined
            out[:] = 0
    return out


def max_over_ranks(comm, value: int) -> int:
    """Collective over ``comm``: the largest ``value`` of any rank (the rounds every rank takes part in)."""
    return maxima_over_ranks(comm, (value,))[0]


def maxima_over_ranks(comm, values: Sequence[int]) -> tuple[int, ...]:
    """Collective over ``comm`` (every rank passes as many values): per element, the largest value of any rank, in
    one ``Allreduce`` (e.g. the rounds every rank takes part in, and whether any rank moves data to another)."""
    from ckptio.coord.mpi import MPI

    out = np.array(values, np.int64)
    comm.Allreduce(MPI.IN_PLACE, out, op=MPI.MAX)
    return tuple(int(v) for v in out)


def move_pieces(comm, messages, tag: int, send: Mapping[int, memtypes.Stream],
                recv: Mapping[int, memtypes.Stream], error: BaseException | None) -> tuple[BaseException | None, int]:
    """Collective over ``comm`` (an ``Allreduce`` of the ranks' status), then point-to-point over ``messages``
    (a duplicate of ``comm``, :func:`ckptio.coord.comms.duplicate`, so no user's pending receive can match
    ckptio's messages): move one round's pieces.

    ``send``/``recv``: by peer rank, the streams this rank sends and receives (both sides describe a peer's
    pieces in the same canonical order and cut them alike into messages,
    :meth:`ckptio.coord.datatypes.Stream.messages`).
    ``error``: this rank's failure so far in the round (reading, verifying, preparing the streams). When any rank
    failed, every rank skips the data movement and this rank's error (or None) is returned for the agreement the
    caller runs next; otherwise ``(None, messages this rank sent or received)``.

    Zero-copy: a message that is one run on a side is a plain contiguous buffer there (MPI moves large ones with a
    single copy, e.g. Open MPI's CMA), otherwise an hindexed datatype at ``MPI_BOTTOM``; ckptio packs nothing. No
    message reaches ``MAX_MESSAGE_BYTES``."""
    from ckptio.coord.mpi import MPI

    status = np.array([0 if error is None else 1], np.int64)
    comm.Allreduce(MPI.IN_PLACE, status, op=MPI.MAX)
    if status[0]:
        return error, 0
    limit = MAX_MESSAGE_BYTES - 1
    requests: list[Any] = []
    types: list[Any] = []
    try:
        for peers, post in ((recv, messages.Irecv), (send, messages.Isend)):
            for peer, stream in peers.items():
                for addrs, lens in stream.messages(MESSAGE_SMALL, MESSAGE_GROUP, limit):
                    if len(addrs) == 1:
                        requests.append(post([memtypes.buffer_at(int(addrs[0]), int(lens[0])), int(lens[0]),
                                              MPI.BYTE], peer, tag))
                    elif len(addrs):
                        types.append(memtypes.datatype(addrs, lens))
                        requests.append(post([MPI.BOTTOM, 1, types[-1]], peer, tag))
        MPI.Request.Waitall(requests)
    finally:
        for dtype in types:
            dtype.Free()
    return None, len(requests)
