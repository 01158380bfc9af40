"""Running a backend's collective steps (:data:`ckptio.backends.base.Step`) one agreed phase at a time.

A backend's ``write``, ``write_document`` and ``mark_complete`` return the library collectives they need as steps,
and never agree themselves; here each step runs inside its own agreement, so that an I/O error reaching some ranks
only (with collective buffering, ENOSPC reaches the aggregators) stops every rank before the next collective call.

Every rank must make the same number of steps. The engine does not trust that: each agreement also counts the
ranks whose steps ran out, and when some ran out while others did not, every rank raises (instead of the others
entering a collective the finished ones never will). A rank that holds no handle (not a write aggregator, when
the engine aggregates the data itself: ckptio.engine.write_aggregate) is a *bystander*: it makes no step, joins
every agreement and is not counted among the ranks that must make the same number.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from ckptio import coord
from ckptio.backends.base import Step
from ckptio.errors import CheckpointError


def run_steps(comm, phase: str, make_steps: Callable[[], Iterable[Step]] | None) -> int:
    """Collective over ``comm``: run every step that ``make_steps()`` gives this rank, each in one agreed phase
    (``phase`` names it; the step's own error names what failed); return how many ran. Raises the same error on
    every rank when a step failed anywhere or when the numbers of steps of the ranks that make steps differ.
    ``make_steps`` None: this rank is a bystander (it holds no handle): it takes part in every agreement only.

    What a backend does to PREPARE a step (``make_steps()`` itself, and the code of a generator up to the step it
    yields) runs in the agreed phase BEFORE the one that runs the step: a failure there, on any rank, stops every
    rank before any of them enters the step's collective call. (A step that fails on one rank before making its
    collective call cannot be rescued: the others are inside the library's collective by then. The contract says
    so: prepare in the iterator, call the library in the step.) So ``n`` steps cost ``n + 1`` agreements."""
    steps: list[Iterator[Step]] = []
    upcoming: list[Step | None] = [None]  # the step fetched (prepared) in the previous agreed phase
    done = 0
    size = comm.Get_size()

    def advance() -> tuple[bool, bool]:
        if make_steps is None:
            return False, True
        if not steps:
            steps.append(iter(make_steps()))
        elif upcoming[0] is not None:
            upcoming[0][1]()  # the step prepared in the previous phase, on every rank alike
        upcoming[0] = next(steps[0], None)
        return upcoming[0] is None, False

    while True:
        finished, bystanders = coord.count_ranks(comm, phase, advance)
        if finished == size - bystanders:
            return done
        if finished:
            raise CheckpointError(f"{phase}: the storage backend made {done} collective step(s) on {finished} of "
                                  f"{size - bystanders} ranks and more on the others (a backend defect: every rank "
                                  "must make the same calls); the checkpoint is abandoned")
        done += 1
