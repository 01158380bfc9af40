"""What a held signal's handler raises inside a collective operation (ckptio.coord.held_signals), in one process
over MPI.COMM_SELF: at the agreement point it is this rank's failure, the same CollectiveError every rank raises
(so an operation that falls back on such an error, staging.recover trying an older staged copy, does so on every
rank alike); when the outermost collective section ends, the rank raises the handler's own exception (outside
trial, 2026-12-06: a batch script's ``except Preempted`` never saw it). SystemExit ends the operation as it is."""

from __future__ import annotations

import os
import signal

import pytest

from ckptio import coord
from ckptio.errors import CollectiveError


class Preempted(Exception):
    pass


@pytest.fixture
def handler():
    def preempted(signum, frame):
        raise Preempted("the batch system's warning")

    before = signal.signal(signal.SIGUSR1, preempted)
    yield
    signal.signal(signal.SIGUSR1, before)


def test_the_handlers_exception_fails_the_phase_then_ends_the_operation(handler):
    from mpi4py import MPI

    phases = []
    with pytest.raises(Preempted, match="batch system"):
        with coord.collective_section():
            os.kill(os.getpid(), signal.SIGUSR1)  # held: _record only
            with pytest.raises(CollectiveError, match="Preempted: the batch system's warning"):
                coord.run(MPI.COMM_SELF, "drain the newest staged copy", lambda: phases.append("newest"))
            coord.run(MPI.COMM_SELF, "drain an older copy", lambda: phases.append("older"))  # the fallback
    assert phases == ["newest", "older"], "the operation went on after the agreed failure, as every rank would"


def test_a_signal_not_consumed_by_an_agreement_is_delivered_at_the_end(handler):
    with pytest.raises(Preempted):
        with coord.collective_section():
            os.kill(os.getpid(), signal.SIGUSR1)  # no agreement point follows


def test_sys_exit_ends_the_operation_as_it_is(handler):
    from mpi4py import MPI

    with pytest.raises(SystemExit):
        with coord.collective_section():
            os.kill(os.getpid(), signal.SIGUSR1)
            with pytest.raises(CollectiveError):
                coord.run(MPI.COMM_SELF, "a phase", lambda: None)
            raise SystemExit(3)
