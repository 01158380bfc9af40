"""The ``ckptio`` subcommands other than ``inspect`` and ``plan``: ``ls``, ``diff``, ``dump``, ``convert``.

Every command runs as ONE process without ``mpirun`` (``MPI.COMM_SELF``, a singleton MPI initialisation);
nothing here is collective across processes. Each command has its own module with ``add_parser(sub)`` and a
``run(args) -> int``; :mod:`ckptio.tools.cli` registers them. Exit codes (h5diff-like): 0 success / identical,
1 differences or a damaged checkpoint, 2 usage error, missing file, not a checkpoint, unknown variable.
"""

from __future__ import annotations

from ckptio.tools.commands import convert, diff, dump, ls

COMMANDS = (ls, diff, dump, convert)

__all__ = ["COMMANDS"]
