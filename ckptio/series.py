"""A series of checkpoints in one directory, named by step, with retention and fallback on restart.

::

    series = ckptio.Series("run", comm, prefix="chk", keep=3)
    with series.create(step, attrs={"step": step}) as ck:      # run/chk_000100
        ck.write(...)
    path = series.latest()            # newest complete and checksum-verified checkpoint, or None

Retention runs after each commit (on rank 0, after the collective close returned everywhere): the newest
``keep`` complete checkpoints stay; older complete ones and older incomplete leftovers are deleted. Nothing
is ever deleted before a newer checkpoint committed. With ``stage_dir``, checkpoints are written to the
fast tier (shared or node-local) first and drained to ``directory`` in the background; a restart on the same
nodes drains a staged checkpoint whose drain was interrupted (see :mod:`ckptio.staging`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any

from . import catalog, staging
from .writer import Writer


class Series:
    """Checkpoints ``{directory}/{prefix}_{step:0{digits}d}``. Construct on every rank of ``comm``."""

    def __init__(self, directory: str | os.PathLike, comm, prefix: str = "chk", keep: int = 3,
                 backend: str = "mpiio", digits: int = 6, verify_on_restart: bool = True,
                 stage_dir: str | os.PathLike | None = None, **create_options: Any):
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.directory = os.fspath(directory)
        self.comm = comm
        self.prefix, self.keep, self.backend, self.digits = prefix, keep, backend, digits
        self.verify_on_restart = verify_on_restart
        self.stage_dir = os.fspath(stage_dir) if stage_dir is not None else None
        self.create_options = create_options
        self._previous: Writer | None = None
        if comm.Get_rank() == 0:
            os.makedirs(self.directory, exist_ok=True)
        comm.Barrier()

    def path(self, step: int) -> str:
        return os.path.join(self.directory, f"{self.prefix}_{step:0{self.digits}d}")

    def create(self, step: int, attrs: Mapping[str, Any] | None = None, **options: Any) -> Writer:
        """Start the checkpoint of ``step`` (collective at close, like :func:`ckptio.create`)."""
        series = self

        class _SeriesWriter(Writer):
            def close(self) -> None:
                was_closed = self._closed
                super().close()
                if not was_closed:
                    series._after_commit(self)

        if self._previous is not None and self.create_options.get("mode") != "async":
            self._previous.wait()
        writer = _SeriesWriter(self.path(step), self.comm, backend=self.backend, attrs=attrs,
                               stage_dir=self.stage_dir, **{**self.create_options, **options})
        self._previous = writer
        return writer

    def _after_commit(self, writer: Writer) -> None:
        """Retention once the new checkpoint is committed (asynchronous ones: when their thread finishes)."""
        if writer.handle is None:
            self.prune()

    def prune(self) -> list[str]:
        """Collective: delete all but the newest ``keep`` complete checkpoints (rank 0 deletes). Returns them."""
        removed: list[str] = []
        if self.comm.Get_rank() == 0:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                names = catalog.candidates(self.directory, self.prefix + "_")
                complete = [p for p in names if _complete(p)]
            kept = complete[: self.keep]
            oldest_kept = kept[-1] if kept else None
            for p in names:
                older = oldest_kept is not None and names.index(p) > names.index(oldest_kept)
                if p not in kept and (p in complete or older):
                    os.unlink(p)
                    removed.append(p)
        return self.comm.bcast(removed, root=0)

    def latest(self) -> str | None:
        """Collective: the newest valid checkpoint, falling back with a warning (with ``stage_dir``: after
        draining a staged checkpoint whose drain was interrupted, see :func:`ckptio.staging.recover`)."""
        if self.stage_dir:  # staged copies are retained by ckptio.staging as each drain commits
            staging.recover(self.comm, self.directory, self.prefix + "_", self.stage_dir)
        found = None
        if self.comm.Get_rank() == 0:
            found = catalog.latest(self.directory, self.prefix + "_", verify=self.verify_on_restart)
        return self.comm.bcast(found, root=0)

    def wait(self) -> None:
        """Local: wait for the last background checkpoint, then apply retention (collective)."""
        if self._previous is not None:
            self._previous.wait()
        self.prune()


def _complete(path: str) -> bool:
    try:
        catalog.check(path, verify=False)
        return True
    except Exception:
        return False
