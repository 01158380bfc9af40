"""``ckptio ls DIR``: every checkpoint-looking file of a run directory with its step, time, format, status and
size, and which one is the newest valid checkpoint of each series.

A file is listed when its name has a step (``{stem}_{digits}{suffix}``, ckptio.tiers.catalog's exact names), when it is
a ckptio temporary (``.{name}.ckptio-tmp-{hex}``: a write in progress or interrupted), or when its content is in
a checkpoint format whatever its name. Statuses: ``valid``, ``valid+verified`` (``--verify``), ``superseded``
(a later run restarted from an older step; ckptio.latest never chooses it), ``incomplete``, ``corrupt`` (also
a checkpoint a lookup marked damaged, :mod:`ckptio.engine.damage_marks`, and one moved aside as ``NAME.damaged``),
``unsupported version``, ``temporary``, ``unreadable here`` (a valid structure this installation cannot read,
e.g. an HDF5 feature that needs h5py), ``not a ckptio checkpoint`` (any other file with a step-like name, e.g. a
plain HDF5 or netCDF file such as the FLASH file ``convert --to flash`` writes: the same words ``inspect`` uses).
The newest valid checkpoint of each series (exactly what ``ckptio.latest(DIR, prefix)`` returns, given the same
``--verify``) is marked ``*``. Exit: 0 listed, 1 some checkpoint is damaged (incomplete, corrupt, unsupported
version: never a file that is not a ckptio checkpoint), 2 DIR missing or not a directory. One process, no MPI.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from typing import Any

from ckptio.engine import damage_marks
from ckptio.errors import (
    CapabilityError,
    CheckpointError,
    CorruptCheckpointError,
    FormatVersionError,
    IncompleteCheckpointError,
    UnknownFormatError,
)
from ckptio.model.series_record import SeriesRecord
from ckptio.model.units import format_bytes
from ckptio.tiers.catalog import _TEMP, identify, list_directory, superseded
from ckptio.tiers.catalog import Entry as CatalogEntry
from ckptio.tools.commands.common import EXIT_DIFFERENT, EXIT_OK, error_exit, guarded, progress

NAME = "ls"
STEP_NAME = re.compile(r"(?P<stem>.+_)(?P<step>[0-9]+)(?P<suffix>(\.[A-Za-z0-9]+)?)")
VALID = ("valid", "valid+verified")
NOT_CKPTIO = "not a ckptio checkpoint"  # = ckptio.tools.cli.NOT_CKPTIO, inspect's status for the same files
DAMAGED = ("incomplete", "corrupt", "unsupported version")


@dataclass
class ListedFile:
    """One row of the listing: the file (name, path, size, modification time), what its name says (the series it
    belongs to, as ``{stem}<step>{suffix}``, and its step; or a temporary), what reading it found (format, status,
    why not valid, the checkpoint's attributes, writer ranks, commit time and series identity) and whether it is
    the newest valid checkpoint of its series."""

    name: str
    path: str
    size: int
    mtime_ns: int
    series: str | None
    step: int | None
    temporary: bool
    newest_valid: bool = False
    format: str | None = None
    status: str | None = None
    error: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    nprocs: int | None = None
    created: str | None = None
    identity: SeriesRecord | None = None  # read for the timeline only (not listed)
    time: Any = None

    def found(self, status: str, error: str | None = None) -> None:
        self.status, self.error = status, error

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "series": self.series, "step": self.step, "time": self.time,
                "format": self.format, "status": self.status, "error": self.error, "size": self.size,
                "newest_valid": self.newest_valid, "nprocs": self.nprocs}


def examine(row: ListedFile, verify: bool) -> None:
    """Local, serial: format, status, attributes (step/time/sequence) of the file of ``row``, filled in."""
    from ckptio.backends import detect_backend
    from ckptio.verify import verify_blocks

    path = row.path
    try:
        backend = detect_backend(path)
    except CorruptCheckpointError as exc:
        row.format = getattr(exc, "backend", None)
        row.found("corrupt", str(exc))
        return
    except UnknownFormatError as exc:
        row.found(NOT_CKPTIO, str(exc))
        return
    except OSError as exc:  # e.g. no permission to read it
        row.found("unreadable", str(exc))
        return
    row.format = backend.name
    try:
        meta = backend.read_document(path)
        if verify:
            problems = verify_blocks(backend, path, meta)
            if problems:
                more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
                raise CorruptCheckpointError(f"{problems[0]}{more}")
    except UnknownFormatError as exc:  # the format's container, not written by ckptio (plain HDF5/netCDF): no damage
        row.found(NOT_CKPTIO, str(exc))  # format: the container's, as inspect shows it
        return
    except CapabilityError as exc:  # a valid structure the built-in reader does not implement: not damage
        row.found("unreadable here", str(exc))
        return
    except IncompleteCheckpointError as exc:
        row.found("incomplete", str(exc))
        return
    except FormatVersionError as exc:
        row.found("unsupported version", str(exc))
        return
    except (CheckpointError, OSError, ValueError) as exc:
        row.found("corrupt", str(exc))
        return
    row.found("valid+verified" if verify else "valid")
    row.attrs, row.nprocs, row.created, row.identity = dict(meta.attrs), meta.nprocs, meta.created, meta.series


def list_run(directory: str, verify: bool = False) -> list[ListedFile]:
    """Local: one row per listed file, sorted by series then step (newest last). Raises CheckpointIOError if
    ``directory`` is missing or not a directory."""
    rows: list[ListedFile] = []
    names = set(list_directory(directory))
    for name in sorted(names):
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        m, temp = STEP_NAME.fullmatch(name), _TEMP.fullmatch(name)
        named = m is not None and temp is None
        rows.append(ListedFile(name, path, st.st_size, st.st_mtime_ns,
                               f"{m.group('stem')}<step>{m.group('suffix')}" if named else None,
                               int(m.group("step")) if named else None, temp is not None))
    for row in progress(rows, desc="ls", unit="file"):
        if row.temporary:
            row.format, row.attrs = None, {}
            row.found("temporary", f"temporary of {_TEMP.fullmatch(row.name).group('name')} (a write in progress "
                                   "or interrupted)")
            continue
        examine(row, verify)
        if row.status in VALID:  # a lookup found its data damaged: what ckptio.latest skips (damage_marks)
            mark = damage_marks.mark_of(row.path, names)
            if mark is not None:
                row.found("corrupt", mark.describe())
            elif damage_marks.is_set_aside(row.name):  # (its mark removed: still no series' checkpoint)
                row.found("corrupt", "set aside by ckptio as damaged when a new checkpoint took its name")
    rows = [r for r in rows if r.series is not None or r.temporary or r.status != NOT_CKPTIO]
    for row in rows:
        row.time = row.attrs.get("time")
        if row.step is None and isinstance(row.attrs.get("step"), int):
            row.step = row.attrs.get("step")
    _mark_timeline(rows)
    rows.sort(key=lambda r: (r.series or "~", r.step if r.step is not None else -1, r.name))
    return rows


def _mark_timeline(rows: list[ListedFile]) -> None:
    """Per series: mark superseded checkpoints (ckptio.tiers.catalog's rule) and the newest valid one."""
    series: dict[str, list[ListedFile]] = {}
    for row in rows:
        if row.series is not None:
            series.setdefault(row.series, []).append(row)
    for members in series.values():
        entries = {}
        for r in members:  # the timeline as ckptio.latest sees it (catalog.identify)
            entry = CatalogEntry(r.path, r.step, None, r.mtime_ns)
            if r.status in VALID:  # (a damaged series record failed the read: "corrupt", never chosen)
                identify(entry, r.created, r.identity, r.attrs)
            entries[r.path] = entry
        gone = superseded(list(entries.values()))
        for r in members:
            if r.path in gone:
                r.found("superseded", f"by {os.path.basename(gone[r.path].path)}")
        valid = [r for r in members if r.status in VALID]
        if valid:
            max(valid, key=lambda r: r.step).newest_valid = True


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(NAME, help="list the checkpoints of a run directory with their status", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("directory")
    p.add_argument("--verify", action="store_true", help="read every block of every checkpoint, check checksums")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=run)


@guarded(NAME)
def run(args: argparse.Namespace) -> int:
    try:
        rows = list_run(args.directory, args.verify)
    except (CheckpointError, OSError) as exc:
        return error_exit(NAME, exc)
    code = EXIT_DIFFERENT if any(r.status in DAMAGED for r in rows) else EXIT_OK
    if args.json:
        json.dump({"directory": args.directory, "verified": args.verify, "files": [r.to_json() for r in rows]},
                  sys.stdout, indent=2, default=str)
        print()
        return code
    if not rows:
        print(f"{args.directory}: no checkpoint files")
        return code

    width = max(len(r.name) for r in rows)
    print(f"  {'name':<{width}}  {'step':>8}  {'time':>12}  {'format':<7}  {'size':>10}  status")
    for r in rows:
        mark = "*" if r.newest_valid else " "
        step = "" if r.step is None else str(r.step)
        time = "" if r.time is None else f"{r.time:.6g}" if isinstance(r.time, int | float) else str(r.time)
        status = r.status + (f" ({r.error})" if r.error and r.status not in VALID else "")
        print(f"{mark} {r.name:<{width}}  {step:>8}  {time:>12}  {r.format or '-':<7}  "
              f"{format_bytes(r.size):>10}  {status}")
    print("* newest valid checkpoint of its series (what ckptio.latest returns"
          + (", verified)" if args.verify else ")"))
    return code
