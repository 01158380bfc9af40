"""Verification of a whole checkpoint: read every stored block and check every checksum.

* :func:`verify_blocks`: one process, no MPI job needed (``ckptio inspect --verify``, ``latest(verify=True)``);
* :func:`verify_parallel`: collective over a communicator: each restart aggregator (the same ones, with the same
  file domains, as :func:`ckptio.open` would choose) verifies its own domains, and every rank gets every problem.
  From the shell: ``mpirun -n N python -m ckptio.verify [--json] PATH...`` (:mod:`ckptio.verify.__main__`), which
  prints what ``ckptio inspect --verify`` prints.

Both read at the storage's speed (:mod:`ckptio.engine.verify_scan`: large reads in file order, checksums computed
while the next piece is read) and report the same problems with the same messages (variable, block, writing rank).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckptio.engine import cpu_cache, verify_scan
from ckptio.errors import UnknownFormatError
from ckptio.model.document import CheckpointDocument, variables_of
from ckptio.model.plan import Extent

if TYPE_CHECKING:  # (an annotation only: backends/rawio.py imports this module)
    from ckptio.backends import Backend

PARALLEL_HINT = "mpirun -n N python -m ckptio.verify PATH"  # what `ckptio inspect --verify` suggests


@dataclass
class Problem:
    variable: str
    block: int | None
    rank: int | None
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"variable": self.variable, "block": self.block, "rank": self.rank, "message": self.message}

    def __str__(self) -> str:
        where = f"variable {self.variable!r}"
        if self.block is not None:
            where += f" block {self.block} (written by rank {self.rank})"
        return f"{where}: {self.message}"


@dataclass
class Verification:
    """What a verification found: the problems (file order) and, when asked, each integer and float variable's
    ``{"min", "max", "nan_count"}`` (what ``ckptio inspect --verify`` prints; meaningful when nothing failed)."""

    problems: list[Problem]
    ranges: dict[str, dict[str, Any]]
    aggregators: int = 1  # the ranks that read (verify_parallel: the restart aggregators)


def verify_blocks(backend: Backend, path: str, meta: CheckpointDocument | Mapping[str, Any], max_bytes: int = 256 << 20,
                  extents: Sequence[Extent] | None = None) -> list[Problem]:
    """Read every extent (or only ``extents``, some of ``backend.extents(meta)``) and compare the checksum of
    every writer block it holds. Local, serial. Returns the problems. (``max_bytes`` is kept for callers of the
    first version; the reads are :data:`ckptio.engine.verify_scan.WINDOW` bytes, a larger extent whole.)"""
    return verify_checkpoint(backend, path, meta, extents=extents).problems


def verify_rows(backend: Backend, path: str, meta: CheckpointDocument | Mapping[str, Any], table: Any,
                rows: Any) -> list[Problem]:
    """Local, serial: :func:`verify_blocks` of the rows ``rows`` (indices) of ``table``
    (``backend.extent_table(meta)``) without turning them into :class:`Extent` objects and back (the commit's
    checks of the extents a lost write may have touched)."""
    from ckptio.engine import readpipe

    return _verification(_scan_rows(backend, path, meta, table.take(rows), readpipe.helper_thread_allowed(),
                                     False)).problems


def verify_checkpoint(backend: Backend, path: str, meta: CheckpointDocument | Mapping[str, Any],
                      extents: Sequence[Extent] | None = None,
                      ranges: bool = False) -> Verification:
    """Local, serial: :func:`verify_blocks`, with each variable's minimum and maximum from the same pass when
    ``ranges``."""
    from ckptio.engine import readpipe
    from ckptio.model import extent_table

    table = backend.extent_table(meta) if extents is None else extent_table.from_extents(meta, extents)
    return _verification(_scan_rows(backend, path, meta, table, readpipe.helper_thread_allowed(), ranges))


def verify_parallel(path: str | os.PathLike, comm, aggregators: int | None = None,
                    ranges: bool = False) -> Verification:
    """Collective over ``comm``: verify every block of the checkpoint at ``path``, each restart aggregator (chosen
    as :func:`ckptio.open` chooses them: ``aggregators=`` overrides the count) reading and checking its own file
    domains; only the aggregators open the file. Every rank returns the same :class:`Verification` (the problems
    of every domain, in file order; ``ranges``: merged over the domains). An error (a missing or damaged file, a
    read failing on one aggregator) is the same :class:`~ckptio.CheckpointError` or CollectiveError on every
    rank, as for a read; a checkpoint ckptio did not write (no checksums) is an UnknownFormatError."""
    from ckptio import coord
    from ckptio.engine import readpipe
    from ckptio.engine.restart import Restart
    from ckptio.engine.restart_plan import resolve_options

    path = os.fspath(path)
    size = comm.Get_size()
    with coord.collective_section():
        restart = Restart(path, comm, lambda: resolve_options(size, None, aggregators, None), True)
        try:
            # the scans that share a last-level cache each read smaller windows (verify_scan.check_rows)
            sharing = coord.members_on_host(comm, comm.Get_rank() in restart.aggregators,
                                            cpu_cache.last_level_id())
            if not restart.verify:  # the same on every rank (from rank 0's document)
                raise UnknownFormatError(f"{path}: not a ckptio checkpoint (a plain file has no checksums to "
                                         "verify)")

            def own() -> verify_scan.Result:
                """Local: this rank's domains (nothing on a rank that is not an aggregator)."""
                if restart.table is None:
                    return verify_scan.Result([], {})
                restart.check_identity()
                result = _scan_rows(restart.backend, path, restart.meta, restart.table,
                                    readpipe.threads_allowed(), ranges, sharing)
                restart.check_identity()  # what was read is what rank 0 described
                return result

            merged = coord.merge_in_rank_order(comm, f"verify {path}", own, _merge)
        finally:
            restart.close()
    merged.findings.sort(key=lambda f: f.file_offset)
    out = _verification(merged)
    out.aggregators = len(restart.aggregators)
    return out


def _scan_rows(backend: Backend, path: str, meta: CheckpointDocument | Mapping[str, Any], table: Any, threaded: bool,
               ranges: bool, sharing: int = 1) -> verify_scan.Result:
    """Local: the rows through large reads of the file where the backend's serial reader says its extents are the
    file's own bytes (``file_bytes``: every format ckptio ships), else one extent at a time through that reader."""
    variables = variables_of(meta)
    reader = backend.serial_extents(path, meta)
    try:
        if getattr(reader, "file_bytes", False):
            return verify_scan.check_rows(path, variables, table, reader, threaded, ranges, sharing)
        return verify_scan.check_with_reader(reader, variables, table, ranges)
    finally:
        reader.close()


def _merge(a: verify_scan.Result, b: verify_scan.Result) -> verify_scan.Result:
    """Local: two ranks' results as one (problems concatenated, ranges combined)."""
    out = dict(a.ranges)
    for name, (lo, hi, nans) in b.ranges.items():
        if name not in out:
            out[name] = [lo, hi, nans]
            continue
        mine = out[name]
        out[name] = [lo if mine[0] is None else mine[0] if lo is None else min(lo, mine[0]),
                     hi if mine[1] is None else mine[1] if hi is None else max(hi, mine[1]), mine[2] + nans]
    return verify_scan.Result(a.findings + b.findings, out)


def _verification(result: verify_scan.Result) -> Verification:
    return Verification([Problem(f.variable, f.block, f.rank, f.message) for f in result.findings],
                        {name: {"min": lo, "max": hi, "nan_count": nans}
                         for name, (lo, hi, nans) in result.ranges.items()})
