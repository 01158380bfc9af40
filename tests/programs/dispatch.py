"""The command line of the MPI programs in tests/programs: ``python PROGRAM.py CASE ARG...`` runs
``CASES[CASE](MPI.COMM_WORLD, *ARGS)`` of that program on every rank. Imported from a program's ``__main__`` block
(the program's directory is then first on ``sys.path``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def run_case(cases: dict[str, Callable[..., Any]], argv: list[str]) -> int:
    """Collective over MPI_COMM_WORLD: run case ``argv[0]`` with the world communicator and ``argv[1:]``."""
    from mpi4py import MPI

    cases[argv[0]](MPI.COMM_WORLD, *argv[1:])
    return 0
