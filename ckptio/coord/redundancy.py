"""The messages of node-local redundancy (issue 28, :mod:`ckptio.tiers.redundancy`): byte streams between node
leaders, cut into chunks, point-to-point on a private duplicate of the job's communicator.

* :func:`transfer`: streams to and from some peers (partner copies; a lost node's parts during a rebuild);
* :func:`xor_ring`: the XOR parity of a set, passed around the set's ring (SCR's XOR encoding).

Both are point-to-point only, among the ranks that take part (the others call nothing), on a communicator made by
:func:`ckptio.coord.comms.duplicate`. Neither raises from the local work it calls back (reading a file, writing
one): the first such error is kept, the messages go on with zeros (so no peer waits for a message that never
comes) and the error is returned for the agreement the caller runs next over the whole communicator
(:func:`ckptio.coord.agree`). A rank killed during the exchange is not survived: its peers wait in MPI until the
job is ended (as for every collective of ckptio).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

CHUNK = 4 << 20  # bytes per message; internal (a test may lower it to exercise many chunks)

Reader = Callable[[int, int], np.ndarray]      # (offset, nbytes) -> that many bytes (uint8)
Writer = Callable[[int, np.ndarray], None]     # (offset, bytes) -> None


def transfer(comm, sends: Sequence[tuple[int, int, Reader]], recvs: Sequence[tuple[int, int, Writer]],
             tag: int) -> BaseException | None:
    """Collective over the ranks that move bytes, point-to-point on ``comm`` (a private duplicate; only the ranks
    with something to move call it, with matching sides): send ``(peer, nbytes, read)`` streams and receive
    ``(peer, nbytes, write)`` streams, at most one stream per direction and peer, in chunks of :data:`CHUNK`:
    round ``c`` posts every stream's chunk ``c`` (nonblocking) and waits for them, so every round completes
    whatever the order of the peers. Returns the first error of a ``read``/``write`` callback (the chunk was
    sent as zeros, or dropped), or None."""
    from ckptio.coord.mpi import MPI

    chunk = CHUNK
    rounds = max([-(-n // chunk) for _, n, _ in (*sends, *recvs)] + [0])
    error: BaseException | None = None
    for c in range(rounds):
        lo = c * chunk
        requests, landed = [], []
        for peer, nbytes, _write in recvs:
            if lo < nbytes:
                buf = np.empty(min(chunk, nbytes - lo), np.uint8)
                requests.append(comm.Irecv([buf, MPI.BYTE], peer, tag))
                landed.append((_write, buf))
        held = []
        for peer, nbytes, read in sends:
            if lo < nbytes:
                n = min(chunk, nbytes - lo)
                try:
                    buf = np.ascontiguousarray(read(lo, n), np.uint8) if error is None else np.zeros(n, np.uint8)
                except BaseException as exc:  # agreed by the caller; the peer still gets its chunk
                    error, buf = exc, np.zeros(n, np.uint8)
                held.append(buf)
                requests.append(comm.Isend([buf, MPI.BYTE], peer, tag))
        MPI.Request.Waitall(requests)
        for write, buf in landed:
            if error is None:
                try:
                    write(lo, buf)
                except BaseException as exc:
                    error = exc
    return error


def xor_ring(comm, left: int, right: int, steps: int, nbytes: int, own: Callable[[int, int, int], np.ndarray],
             done: Writer, tag: int) -> BaseException | None:
    """Collective over the members of one XOR set, point-to-point on ``comm`` (a private duplicate; every member
    calls it, with its ring neighbours): ``steps`` is the set's size ``n``; ``own(step, offset, count)`` this
    member's bytes for ring step ``step`` (``0 .. n-2``); ``done(offset, parity)`` receives this member's
    parity, ``nbytes`` long, chunk by chunk. Per chunk, ``n - 1`` ``Sendrecv`` passes (send right, receive from
    the left, XOR in, pass on). Returns the first error of a callback (the ring goes on with zeros), or None."""
    from ckptio.coord.mpi import MPI

    error: BaseException | None = None

    def mine(step: int, lo: int, n: int) -> np.ndarray:
        """Local: this member's bytes for a step (zeros once a callback failed)."""
        nonlocal error
        if error is None:
            try:
                return np.ascontiguousarray(own(step, lo, n), np.uint8)
            except BaseException as exc:
                error = exc
        return np.zeros(n, np.uint8)

    for lo in range(0, nbytes, CHUNK):
        n = min(CHUNK, nbytes - lo)
        partial = mine(0, lo, n)
        got = np.empty(n, np.uint8)
        for step in range(1, steps):
            comm.Sendrecv([partial, MPI.BYTE], right, tag, [got, MPI.BYTE], left, tag)
            if step < steps - 1:
                partial = np.bitwise_xor(got, mine(step, lo, n))
        if error is None:
            try:
                done(lo, got)
            except BaseException as exc:
                error = exc
    return error
