"""Fault injection for the fault tests (``tests/faults``): kill one rank at a chosen phase of a checkpoint.

:func:`point` marks a phase of :meth:`ckptio.writer.Writer.close`. It does nothing (one environment look-up)
unless ``CKPTIO_FAULT`` names that phase and the calling rank::

    CKPTIO_FAULT="write data:2"            rank 2 of the writer's communicator dies at "write data"
    CKPTIO_FAULT="rename:0,declare:3"      several faults, comma separated
    CKPTIO_FAULT="commit vote:*"           every rank dies there

The rank writes one line starting with :data:`MARKER` to stderr, then dies by ``SIGKILL`` sent to itself: no
exception handler, ``finally`` block or atexit hook runs, as when a node crashes or the batch system kills the
job. Open MPI's ``mpirun`` then aborts the whole job.

Phases, in the order :meth:`~ckptio.writer.Writer.close` reaches them (see its module docstring):

``declare``          before the declarations are gathered and validated (nothing on disk yet)
``create file``      before the backend creates the temporary file
``write data``       before the collective data write (the temporary file exists, its space reserved)
``checksum gather``  before block checksums are gathered and rank 0 builds the index (data written, synced)
``write index``      before the backend's commit (index/metadata, then completion mark)
``commit vote``      after this rank's part of the commit, before the ranks agree that it succeeded (the
                     temporary file may be complete, but it was never renamed)
``rename``           after the vote, before rank 0 renames the temporary file to the final name (killing a
                     rank other than 0 here races with the rename: the checkpoint may or may not appear,
                     and if it does it is complete)

``redundancy exchange`` a staged checkpoint with ``redundancy=`` (ckptio.tiers.redundancy): every piece staged,
                     before the node leaders exchange copies or parity
``redundancy chunk``  inside that exchange, on a node leader that just wrote the first chunk it received (a
                     partner copy or the parity file is half written; more chunks are in flight)

A misspelt phase in ``CKPTIO_FAULT`` raises ``ValueError`` at the first point reached, so a fault test can
never pass because its fault silently did not fire.
"""

from __future__ import annotations

import os
import signal

ENV = "CKPTIO_FAULT"
MARKER = "ckptio fault injected:"  # written to stderr (unbuffered) just before the kill, so tests see it fired
PHASES = ("declare", "create file", "write data", "checksum gather", "write index", "commit vote", "rename")
TIER_PHASES = ("redundancy exchange", "redundancy chunk")  # points of the tiers above Writer.close's protocol


def parse(spec: str) -> list[tuple[str, int | None]]:
    """``"phase:rank,phase:rank"`` -> ``[(phase, rank or None for '*')]``; ValueError when malformed."""
    faults: list[tuple[str, int | None]] = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        phase, sep, rank = item.rpartition(":")
        phase, rank = phase.strip(), rank.strip()
        if not sep or phase not in PHASES + TIER_PHASES or not (rank == "*" or rank.isdigit()):
            raise ValueError(f"{ENV}={spec!r}: expected 'phase:rank' items (rank a number or '*'), phase one of "
                             f"{', '.join(PHASES + TIER_PHASES)}; got {item!r}")
        faults.append((phase, None if rank == "*" else int(rank)))
    return faults


def point(phase: str, comm=None) -> None:
    """A fault point: SIGKILL this process if ``CKPTIO_FAULT`` selects ``phase`` and this rank of ``comm``
    (default ``MPI.COMM_WORLD``). Local, no communication."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    if phase not in PHASES + TIER_PHASES:
        raise ValueError(f"unknown fault point {phase!r}")
    selected = [rank for p, rank in parse(spec) if p == phase]
    if not selected:
        return
    if comm is None:
        from ckptio.coord.mpi import MPI

        comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    if None in selected or rank in selected:
        os.write(2, f"{MARKER} rank {rank} pid {os.getpid()} phase {phase!r}\n".encode())
        os.kill(os.getpid(), signal.SIGKILL)
