"""Finding checkpoints in a directory: :func:`latest` returns the newest complete and valid one."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterator

from .backends import detect_backend
from .errors import CheckpointError

_TRAILING_NUMBER = re.compile(r"(\d+)(?!.*\d)")


def _step_of(name: str) -> int:
    m = _TRAILING_NUMBER.search(name)
    return int(m.group(1)) if m else -1


def candidates(directory: str | os.PathLike, prefix: str = "chk") -> list[str]:
    """Checkpoint-looking paths in ``directory``, newest first (by the step number in the name, then mtime).

    Temporary files of checkpoints being written (``.NAME.ckptio-tmp-*``) never qualify.
    """
    directory = os.fspath(directory)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    paths = []
    for name in names:
        full = os.path.join(directory, name)
        if name.startswith(prefix) and not name.startswith(".") and "ckptio-tmp" not in name and os.path.isfile(full):
            paths.append(full)
    return sorted(paths, key=lambda p: (_step_of(os.path.basename(p)), os.path.getmtime(p)), reverse=True)


def check(path: str, verify: bool = False) -> None:
    """Raise a CheckpointError if ``path`` is not a complete checkpoint (with ``verify``: every checksum)."""
    from .verify import verify_blocks

    backend = detect_backend(path)
    meta = backend.read_metadata(path)
    if verify:
        problems = verify_blocks(backend, path, meta)
        if problems:
            from .errors import CorruptCheckpointError

            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            raise CorruptCheckpointError(f"{path}: {problems[0]}{more}")


def iter_valid(directory: str | os.PathLike, prefix: str = "chk", verify: bool = False) -> Iterator[str]:
    """Complete (and, with ``verify``, checksum-clean) checkpoints, newest first; warns about skipped ones."""
    for path in candidates(directory, prefix):
        try:
            check(path, verify)
        except (CheckpointError, OSError) as exc:
            warnings.warn(f"ckptio: skipping {path}: {exc}", stacklevel=3)
            continue
        yield path


def latest(directory: str | os.PathLike, prefix: str = "chk", verify: bool = False, comm=None,
           stage_dir: str | os.PathLike | None = None) -> str | None:
    """The newest complete and valid checkpoint in ``directory`` whose name starts with ``prefix``, or None.

    Incomplete (no completion mark), truncated or damaged-index checkpoints are skipped with a warning;
    ``verify=True`` also reads every block and checks its checksum. With ``comm``, rank 0 looks and broadcasts the
    answer (collective); without, the calling process looks by itself. With ``comm`` and ``stage_dir``, a staged
    checkpoint newer than anything valid in ``directory`` (its drain was interrupted) is drained first, when
    every rank's piece is present and verified on its own node (see :func:`ckptio.staging.recover`); without
    ``comm``, ``stage_dir`` is ignored (one process cannot see every node's stage).
    """
    if comm is not None:
        if stage_dir is not None:  # a staged checkpoint whose drain did not finish: drain it now, if possible
            from . import staging

            staging.recover(comm, os.fspath(directory), prefix, os.fspath(stage_dir))
        found = latest(directory, prefix, verify) if comm.Get_rank() == 0 else None
        return comm.bcast(found, root=0)
    return next(iter_valid(directory, prefix, verify), None)
