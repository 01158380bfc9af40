"""The one place ckptio imports mpi4py's ``MPI`` module (issue 24 item 5).

Every other module takes it from here, inside the function that needs it (``from ckptio.coord.mpi import MPI``),
so that importing ckptio never initializes MPI: ``ckptio inspect``, ``ckptio plan`` and the restart planning
run without an MPI job, and a program that never checkpoints never pays MPI's start-up for ckptio. Whatever must
hold for every use of MPI inside ckptio (a check of the MPI library, a setting of ``mpi4py.rc`` before the first
import) belongs here. Local: importing this module is ``MPI_Init`` if nothing initialized MPI before.
"""

from __future__ import annotations

from mpi4py import MPI

__all__ = ["MPI"]
