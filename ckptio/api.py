"""The public entry points. Everything here is collective over ``comm`` unless said otherwise."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ckptio.reader import Reader
from ckptio.tiers.staged_reader import StagedReader, open_staged
from ckptio.writer import Writer


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
        from mpi4py import MPI

        comm = MPI.COMM_SELF
    if stage_dir is not None:
        staged = open_staged(os.fspath(path), comm, os.fspath(stage_dir), verify=verify)
        if staged is not None:
            return staged
    return Reader(path, comm, hints=hints, aggregators=aggregators, buffer_bytes=buffer_bytes, verify=verify)
