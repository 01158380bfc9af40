"""The public entry points. Everything here is collective over ``comm`` unless said otherwise."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ckptio.reader import Reader
from ckptio.tiers import catalog, staging
from ckptio.tiers.staged_reader import StagedReader, open_staged
from ckptio.writer import Writer, restaging_writer


def create(path: str | os.PathLike, comm, backend: str = "mpiio", attrs: Mapping[str, Any] | None = None,
           hints: Mapping[str, Any] | None = None, compression: object = None, mode: str = "sync",
           stage_dir: str | os.PathLike | None = None) -> Writer:
    """Start a checkpoint at ``path`` (a single shared file). Called by every rank of ``comm``.

    Returns a :class:`Writer`: declare blocks with ``write()`` (local), then ``close()`` or leave the
    ``with`` block (collective: validation, I/O, atomic commit). ``backend`` is ``"mpiio"`` (native),
    ``"hdf5"`` or ``"pnetcdf"``; ``hints`` override the MPI-IO hints (see :mod:`ckptio.coord.hints`);
    ``compression`` (native backend) is ``"zstd"``, ``"zstd+shuffle"``, optionally with ``":LEVEL"``.
    ``mode="async"`` returns from ``close()`` once the blocks are copied to staging buffers; an I/O thread
    writes and commits (``writer.wait()``/``writer.done()``). ``stage_dir`` (a fast tier, one directory every
    rank sees or one per node at the same path; created if missing) is written first, each rank its own piece,
    and drained to ``path`` in the background, checksums verified (see :mod:`ckptio.tiers.staging`).

    Local (no communication) and it never raises for its arguments: an argument may be bad on one rank only,
    and a rank that raised here would leave the others waiting in ``close()``. An argument wrong in itself (an
    unknown ``backend`` or ``mode``, bad ``hints`` or ``compression``, an ``attrs`` value the backend cannot
    store) and a ``path``, ``backend``, ``mode``, ``stage_dir`` or ``compression`` that differs between ranks
    are raised by ``close()`` on every rank, in its first phase, before anything is written. A
    :class:`ckptio.Series` checks its options once, collectively, when it is constructed.
    """
    return Writer(path, comm, backend=backend, attrs=attrs, hints=hints, compression=compression, mode=mode,
                  stage_dir=stage_dir)


def open(path: str | os.PathLike, comm=None, hints: Mapping[str, Any] | None = None, aggregators: int | None = None,
         buffer_bytes: int | str | None = None, verify: bool = True, stage_dir: str | os.PathLike | None = None
         ) -> Reader | StagedReader:
    """Open a committed checkpoint for restart (collective over ``comm``). The backend is detected from the file.

    Without ``comm`` (``None``): this process alone (``MPI.COMM_SELF``), as in a notebook or a serial analysis
    script, with or without mpirun; then ``ck["dens"][3:5]`` reads lazily (:mod:`ckptio.lazy`) and every read
    is this process's own.

    Rank 0 reads the metadata and broadcasts it; reads are two-phase aggregated: only ``aggregators``
    ranks (default ``min(nprocs, stripe count, 80)``, also set by ``CKPTIO_AGGREGATORS`` or ``cb_nodes`` in
    ``CKPTIO_HINTS``) open the file, in rounds of at most ``buffer_bytes`` (default 64 MiB, also
    ``CKPTIO_BUFFER_BYTES``; bytes or a size such as ``"64M"``, see :mod:`ckptio.model.units`). Both must be the same
    on every rank (checked). ``verify`` checks the checksum of every whole block read.

    ``stage_dir`` (the one the checkpoint was written with): when the newest staged copy of ``path`` is usable
    (same rank count, every rank's piece on its own node, checksums verified, not older than ``path``), the
    restart reads from the stages (a :class:`ckptio.tiers.staged_reader.StagedReader`, same read API); otherwise,
    with a warning naming what is missing, from ``path``.
    """
    if comm is None:
        from ckptio.coord.mpi import MPI

        comm = MPI.COMM_SELF
    if stage_dir is not None:
        staged = open_staged(os.fspath(path), comm, os.fspath(stage_dir), verify=verify)
        if staged is not None:
            return staged
    return Reader(path, comm, hints=hints, aggregators=aggregators, buffer_bytes=buffer_bytes, verify=verify)


def latest(directory: str | os.PathLike, prefix: str = "chk", verify: bool = False, comm=None,
           stage_dir: str | os.PathLike | None = None, suffix: str = "") -> str | None:
    """The newest valid checkpoint named exactly ``{prefix}_{step}{suffix}`` in ``directory``, or None.

    Raises :class:`CheckpointIOError` (naming the path) when ``directory`` does not exist or is not a directory;
    an existing directory without a valid checkpoint gives None. Only the series' timeline is considered
    (checkpoints superseded by a restart from an older step are never chosen, see :mod:`ckptio.tiers.catalog`);
    the step is the number of the exact pattern (``chk_000010.h5`` is newer than ``chk_000005.h5``). Incomplete,
    truncated or damaged-index checkpoints are skipped with a warning; ``verify=True`` also reads every block and
    checks its checksum, and marks a damaged one (never chosen nor deleted again, see
    :mod:`ckptio.engine.damage_marks`). With ``comm``: collective, rank 0 looks and every rank gets its answer or
    its error; without, the calling process looks by itself. With ``comm`` and ``stage_dir``, a staged checkpoint
    newer than anything valid in ``directory`` (its drain was interrupted) is drained first, when every rank's
    piece is present and verified on its own node (see :func:`ckptio.tiers.staging.recover`); without ``comm``,
    ``stage_dir`` is ignored (one process cannot see every node's stage).
    """
    def recover(comm, directory: str, pattern, stage_dir: str) -> None:
        staging.recover(comm, directory, pattern, stage_dir, restaging_writer)

    return catalog.latest(directory, prefix, verify, comm, stage_dir, suffix, recover=recover)
