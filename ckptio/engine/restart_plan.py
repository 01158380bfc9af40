"""The restart's open plan: the options every rank resolves alike, and what rank 0 does once at open.

Which ranks call what (everything here is local; :class:`ckptio.engine.restart.Restart` places it inside its
agreed phases):

* :func:`resolve_options`: every rank, on its own arguments and environment (the ``local`` of the open's gather);
* :func:`plan_open`: rank 0 only, on every rank's options and node: checks they agree, reads the metadata and
  the extent table, chooses the aggregators and partitions the table among them (:mod:`ckptio.model.readplan`);
  returns what every rank gets (the variables and the routing index, O(variables x aggregators)) and each rank's
  own payload (its default segments; an aggregator's rows of the table);
* :func:`file_identity`: any rank (rank 0 at open, the aggregators before and after opening the file).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio import settings
from ckptio.backends import detect_backend
from ckptio.coord import hints as hintsmod
from ckptio.engine import fslayout
from ckptio.errors import CheckpointIOError, DeclarationError, UnknownFormatError
from ckptio.model import readplan, units
from ckptio.model.document import CheckpointDocument
from ckptio.model.plan import choose_aggregators

DEFAULT_BUFFER_BYTES = 64 << 20
ENV_BUFFER_BYTES = "CKPTIO_BUFFER_BYTES"


@dataclass
class ReadOptions:
    """A Reader's options as this rank resolved them (``hints`` with the defaults filled in)."""

    hints: dict[str, Any]
    buffer_bytes: int
    aggregators: int | None
    read_io: str = "posix"  # CKPTIO_READ_IO, read once at open (its value is compared between ranks there)

    def agreed_part(self, path: str) -> dict[str, Any]:
        """What must be the same on every rank (checked by :func:`check_same_options` on rank 0): the read plan
        is computed from the buffer size and the aggregator count, and rank 0's metadata serves every rank's
        reads of the file (a different path on one rank made an aggregator read another checkpoint's bytes
        against rank 0's checksums: "corrupt", falsely)."""
        return {"path": os.path.abspath(path), "buffer_bytes": self.buffer_bytes, "aggregators": self.aggregators,
                "hints": dict(self.hints), "settings": settings.collective_snapshot()}


def resolve_options(size: int, hints: Mapping[str, Any] | None, aggregators: object,
                    buffer_bytes: object) -> ReadOptions:
    """Local, every rank: the options of ``ckptio.open`` resolved against the environment (``CKPTIO_*``) and the
    defaults; a DeclarationError (ValueError) for a bad value."""
    resolved = hintsmod.resolve_hints(size, hints)
    if buffer_bytes is not None:
        nbytes = units.parse_size(buffer_bytes, "buffer_bytes")
    elif settings.raw(ENV_BUFFER_BYTES):
        nbytes = units.parse_size(settings.raw(ENV_BUFFER_BYTES), ENV_BUFFER_BYTES)
    else:
        nbytes = DEFAULT_BUFFER_BYTES
    count = (units.parse_count(aggregators, "aggregators") if aggregators is not None
             else hintsmod.aggregator_override(hints))
    # local (it may differ between ranks) and used only when a read allocates an output, but checked here: a bad
    # value fails the open on every rank, not some later read, or none at all in a job that reads into out=
    settings.get("CKPTIO_RECYCLE_SECONDS")
    return ReadOptions(resolved, nbytes, count, settings.get("CKPTIO_READ_IO"))


def checked_verify(value: object) -> bool:
    """Local, every rank: ``verify=`` of ``ckptio.open`` as a bool; a DeclarationError for anything but a bool
    (``"false"`` would have turned checking on, ``None`` or ``0`` off). Agreed between ranks at open (in the
    options every rank must give alike): an aggregator that did not check would hand unchecked bytes to ranks that
    asked for checked ones."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise DeclarationError(f"ckptio.open: verify={value!r}: give True or False")


def file_identity(path: str) -> tuple[int, int, int]:
    """Local: (inode, size, modification time in ns) of ``path``: which file, in which state. Not the device
    number: each node's mount of a parallel file system has its own (and rank 0 may be on another node)."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def check_same_options(gathered: list[dict[str, Any]]) -> None:
    """Rank 0: rank 0 partitions the checkpoint for every rank with these options (and every aggregator plans
    its rounds with the buffer size), so they must be the same on every rank, and so must the collective
    CKPTIO_* settings (ckptio.settings)."""
    settings.check_same([g.pop("settings") for g in gathered], "ckptio.open")
    for key in gathered[0]:
        differ = [r for r, g in enumerate(gathered) if g[key] != gathered[0][key]]
        if differ and key == "path":
            raise DeclarationError(f"ckptio.open: the path differs between ranks (rank 0: {gathered[0][key]!r}, "
                                   f"rank {differ[0]}: {gathered[differ[0]][key]!r}); every rank must open the "
                                   "same checkpoint")
        if differ and key == "hints":  # the hints that differ, not every hint of both ranks
            raise DeclarationError(f"ckptio.open: hints differ between ranks (rank {differ[0]}: "
                                   f"{hintsmod.difference(gathered[differ[0]][key], gathered[0][key])} on rank 0); "
                                   f"they come from hints= and {hintsmod.ENV_HINTS}: give the same on every rank")
        if differ:
            sources = {"buffer_bytes": f"buffer_bytes= and {ENV_BUFFER_BYTES}", "verify": "verify="}.get(
                key, f"aggregators=, {hintsmod.ENV_AGGREGATORS}, and cb_nodes in hints= or {hintsmod.ENV_HINTS}")
            raise DeclarationError(f"ckptio.open: {key} differs between ranks (rank 0: {gathered[0][key]!r}, "
                                   f"rank {differ[0]}: {gathered[differ[0]][key]!r}); it comes from {sources}: "
                                   "give the same on every rank")


def stripe_unit(meta: Mapping[str, Any]) -> int:
    """Local: the checkpoint's stripe unit as recorded at write (the default where it is not)."""
    return int(meta.get("layout", {}).get("stripe_unit", hintsmod.DEFAULT_STRIPING_UNIT))


def own_segments(meta: CheckpointDocument, nreaders: int) -> list[dict[str, tuple[int, int]]]:
    """Rank 0: for every reading rank, ``{segment variable: (start, length)}`` (in rows) of the segments it
    reads by default: those of writer ranks ``[r*W//P, (r+1)*W//P)``, concatenated (empty at the end of the ones
    before when it has none)."""
    out: list[dict[str, tuple[int, int]]] = [{} for _ in range(nreaders)]
    writers = int(meta.nprocs)
    readers = np.arange(nreaders, dtype=np.int64)
    first, last = readers * writers // nreaders, (readers + 1) * writers // nreaders
    for name, var in meta.variables.items():
        if not var.is_segment:
            continue
        blocks = var.block_table()  # validated: in rank order, end to end from 0
        brank = blocks.rank
        ends_before = np.zeros(len(blocks) + 1, np.int64)  # the end of blocks[:i] is where block i starts
        np.cumsum(blocks.shape[:, 0], out=ends_before[1:])
        start = ends_before[np.searchsorted(brank, first)]
        stop = ends_before[np.searchsorted(brank, last)]
        for r in range(nreaders):
            out[r][name] = (int(start[r]), int(stop[r] - start[r]))
    return out


@dataclass(frozen=True)
class OpenPlan:
    """What every rank gets of :func:`plan_open`: the backend's name, the light copy of the document (no block
    tables), the routing index and the file's identity (checked again before each read)."""

    backend: str
    meta: CheckpointDocument
    routing: readplan.Routing
    identity: tuple[int, int, int]


def plan_open(path: str, size: int, gathered: list[tuple[dict[str, Any], int]], aggregators: int | None,
              per_rank: list[dict[str, Any]]) -> OpenPlan:
    """Rank 0, once at open: ``gathered`` holds every rank's ``(ReadOptions.agreed_part, node leader)``;
    ``aggregators`` is the requested count (None: the default rule). Fills ``per_rank`` with each rank's own
    payload (``segments``, and ``table``: an aggregator's rows of the extent table as arrays, else None) and
    returns what every rank gets: the backend's name, the metadata without its block lists, the routing index
    and the file's identity."""
    check_same_options([g[0] for g in gathered])
    backend = detect_backend(path, thorough=True)  # one file, opened on purpose: diagnose damage
    before = file_identity(path)  # (after detect_backend, which names a missing or unfollowable path)
    try:
        meta = backend.read_document(path)
    except UnknownFormatError:  # an HDF5 or netCDF file some other program wrote: read it unchecked
        meta = backend.plain_document(path)
    if file_identity(path) != before:
        raise CheckpointIOError(f"checkpoint {path} was replaced or changed while its metadata was "
                                "read (another job writing the same name?); open it again")
    table = backend.extent_table(meta)
    # the real layout where the file system reported one (domains of whole objects), else the hints'
    stripe_count, alignment = fslayout.restart_layout(meta)
    chosen = choose_aggregators(size, [g[1] for g in gathered], stripe_count, aggregators)
    owner, routing = readplan.partition(table, chosen, alignment)
    rows = readplan.rows_of_aggregators(owner, len(chosen))
    per_rank.extend({"segments": seg, "table": None} for seg in own_segments(meta, size))
    for a, rank in enumerate(chosen):
        per_rank[rank]["table"] = table.take(rows[a]).to_arrays()
    return OpenPlan(backend.name, meta.without_blocks(), routing, before)
