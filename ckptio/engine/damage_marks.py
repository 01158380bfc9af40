"""Marks of damaged checkpoints: what a verification found, kept beside the checkpoint so that every later
process, job and language binding acts on it. Local file operations of one process (rank 0 of a lookup or of
retention, the planning rank of a commit); no MPI.

A committed checkpoint whose metadata reads but whose data does not verify (a checksum mismatch, a lost or
truncated block: storage damage after the commit) is *damaged*. When a lookup (``ckptio.latest(verify=True)``,
``Series.latest()``, ``ckptio_latest_verified``) skips one, it leaves ``.{name}.ckptio-damaged`` beside it, a
small versioned JSON record (:class:`DamageMark`)::

    {"format": "ckptio-damage-mark", "version": 1, "checkpoint": "chk_000020",
     "size": 25165824, "mtime_ns": 1796688000123456789,
     "found": "2026-12-07T23:50:00Z", "reason": "checksum mismatch in block 3 of 'dens' ..."}

A mark applies only to the file it was written for (same name, size and modification time to the nanosecond):
a checkpoint committed later under that name is not marked by it, and a stale mark is removed by retention. A
copy of the directory that keeps modification times (``cp -a``, ``rsync -a``, an archive) keeps the marks valid
(the inode is not part of the identity for that reason). What a mark does:

* a lookup skips the checkpoint at once, naming the mark, without reading the file again (remove the mark to
  have the checkpoint checked again);
* retention never deletes a marked checkpoint, and it takes none of the ``keep`` places (a damaged file stays for
  the user to look at, like one whose metadata cannot be read);
* a checkpoint committed under its name first moves it aside to ``{name}.damaged`` (``{name}.damaged.1``, ...:
  names no series owns, so nothing chooses or deletes them), with its mark and a warning: a run that started over
  because every checkpoint was damaged does not destroy the evidence by writing the same steps again.

Writing a mark is best effort: in a read-only directory the lookup's warning is all there is.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass

FORMAT = "ckptio-damage-mark"
VERSION = 1
_MARK = re.compile(r"\.(?P<name>.+)\.ckptio-damaged")
_ASIDE = re.compile(r"\.damaged(\.[0-9]+)?(\.ckptio-damaged)?$")
_MAX_BYTES = 64 * 1024  # a mark is a few hundred bytes; anything larger is not one of ours


@dataclass(frozen=True)
class DamageMark:
    """What a verification found about one checkpoint file, and which file it was (its size and mtime)."""

    checkpoint: str  # the checkpoint's name in its directory
    size: int
    mtime_ns: int
    found: str  # UTC, ISO 8601
    reason: str

    def matches(self, st: os.stat_result) -> bool:
        return (self.size, self.mtime_ns) == (st.st_size, st.st_mtime_ns)

    def describe(self) -> str:
        return (f"marked damaged by ckptio at {self.found}: {self.reason} (the mark is "
                f"{mark_name(self.checkpoint)}; remove it to have the checkpoint checked again)")

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "version": VERSION, **asdict(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DamageMark | None:
        """The mark in ``text``, or None when it is not a mark this version understands."""
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict) or raw.get("format") != FORMAT or raw.get("version") != VERSION:
                return None
            mark = cls(str(raw["checkpoint"]), int(raw["size"]), int(raw["mtime_ns"]), str(raw["found"]),
                       str(raw["reason"]))
        except (ValueError, TypeError, KeyError):
            return None
        return mark


def is_set_aside(name: str) -> bool:
    """Whether ``name`` is one :func:`move_aside` gives a damaged checkpoint (``NAME.damaged[.N]``, or its mark)."""
    return _ASIDE.search(name) is not None


def mark_name(checkpoint: str) -> str:
    """The name of the mark of the checkpoint named ``checkpoint`` (in the same directory)."""
    return f".{checkpoint}.ckptio-damaged"


def mark(path: str, reason: str) -> DamageMark | None:
    """Leave a mark that the checkpoint ``path`` is damaged (``reason``: what the verification found). Best
    effort: returns None, and writes nothing, when the file is gone or the directory cannot be written."""
    directory, name = os.path.split(os.path.abspath(path))
    try:
        st = os.stat(path)
    except OSError:
        return None
    record = DamageMark(name, st.st_size, st.st_mtime_ns, _now(), reason[:2000])
    return record if _write(os.path.join(directory, mark_name(name)), record) else None


def _write(marker: str, record: DamageMark) -> bool:
    """Write ``record`` to ``marker`` atomically (a temporary renamed into place); False when it cannot be."""
    tmp = f"{marker}~{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(record.to_json())
        os.replace(tmp, marker)
    except OSError:
        _remove_quietly(tmp)
        return False
    return True


def find(path: str, st: os.stat_result, names: Collection[str] | None = None) -> DamageMark | None:
    """The mark of the checkpoint ``path`` (whose ``os.stat`` is ``st``) when one applies to this very file, else
    None. ``names``: the directory's names if the caller listed it already (saves a failed open per checkpoint)."""
    directory, name = os.path.split(os.path.abspath(path))
    marker = mark_name(name)
    if names is not None and marker not in names:
        return None
    record = _read(os.path.join(directory, marker))
    return record if record is not None and record.checkpoint == name and record.matches(st) else None


def mark_of(path: str, names: Collection[str] | None = None) -> DamageMark | None:
    """:func:`find` for ``path`` as it is now (None also when it cannot be stat'ed): what ``ckptio ls`` and
    ``ckptio inspect`` report."""
    try:
        return find(path, os.stat(path), names)
    except OSError:
        return None


def move_aside(path: str, damaged: str | None = None) -> str | None:
    """Planning rank of a commit, right before a new checkpoint is renamed onto ``path``: when the file now at
    ``path`` is marked damaged, or ``damaged`` says why it is (its metadata does not read, see
    :func:`ckptio.engine.target_path.damaged_checkpoint`), rename it to the first free ``{path}.damaged[.N]`` with
    a mark (``ckptio ls`` still shows it damaged); returns the new path (None when nothing was moved). An error
    to move is raised: the new checkpoint must not replace the damaged one silently."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    record = find(path, st)
    if record is None and damaged is None:
        return None
    if record is None:
        record = DamageMark(os.path.basename(path), st.st_size, st.st_mtime_ns, _now(), damaged[:2000])
    aside = f"{path}.damaged"
    n = 0
    while os.path.lexists(aside):
        n += 1
        aside = f"{path}.damaged.{n}"
    os.rename(path, aside)
    directory = os.path.dirname(os.path.abspath(path))
    moved = dataclasses.replace(record, checkpoint=os.path.basename(aside))
    _write(os.path.join(directory, mark_name(moved.checkpoint)), moved)
    _remove_quietly(os.path.join(directory, mark_name(record.checkpoint)))
    return aside


def remove_stale(directory: str, names: Iterable[str]) -> list[str]:
    """Rank 0 of retention: remove the marks in ``directory`` (whose listing is ``names``) that no longer apply to
    any file (the checkpoint was deleted by hand, or a new one took its name). Only marks ckptio writes (their exact
    name and format) are touched; returns the removed paths."""
    removed = []
    for name in names:
        m = _MARK.fullmatch(name)
        if m is None:
            continue
        marker = os.path.join(directory, name)
        record = _read(marker)
        if record is None or record.checkpoint != m.group("name"):
            continue  # not a mark of ours: left alone
        try:
            st = os.stat(os.path.join(directory, record.checkpoint))
        except FileNotFoundError:
            st = None
        except OSError:
            continue
        if st is None or not record.matches(st):
            _remove_quietly(marker)
            removed.append(marker)
    return removed


def _now() -> str:
    """The time a mark records: UTC, ISO 8601, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _read(marker: str) -> DamageMark | None:
    try:
        with open(marker, encoding="utf-8") as f:
            text = f.read(_MAX_BYTES + 1)
    except (OSError, UnicodeDecodeError):
        return None
    return None if len(text) > _MAX_BYTES else DamageMark.from_json(text)


def _remove_quietly(path: str | None) -> None:
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass
