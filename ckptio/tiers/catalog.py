"""Finding checkpoints in a directory by their exact name pattern, and the timeline they form.

Names. A checkpoint of a series is named exactly ``{stem}{step}{suffix}``: ``stem`` is ``prefix + "_"``,
``step`` a decimal number (a :class:`~ckptio.Series` writes it zero-padded to ``digits`` digits and accepts only
that spelling), ``suffix`` is fixed (``""`` or e.g. ``".h5"``). Anything else in the directory -- ``chk_notes.txt``,
``chk_000001.bak``, another series' ``chk_fine_000300``, Open MPI's ``NAME-<n>-<pid>.lock`` and ``.locktest.*``
-- is not a checkpoint of the series: it is never opened, chosen nor deleted. The temporaries of checkpoints
being written are ``.{name}.ckptio-tmp-{12 hex digits}`` (see ckptio.writer) and are never checkpoints either.

Timeline (issue 23). A checkpoint written through a Series records its series identity
(:class:`ckptio.model.series_record.SeriesRecord`, document key ``series``): the series id, inherited by every run
that continues the series, a commit sequence number ``seq`` that is comparable only between checkpoints of the same
series id, the checkpoint the run restarted from, and the checkpoints the run *abandoned*. A committed checkpoint
``X`` is *superseded* by a checkpoint ``Y`` when

* ``X`` and ``Y`` belong to the same series, ``seq(Y) > seq(X)`` and ``step(Y) <= step(X)``: a later run of the
  series went back to before ``X`` and wrote on; or
* ``Y``'s run abandoned ``X`` (same name, same commit time): ``X`` has no series record (``ckptio.create``, the
  C/Fortran API, an older ckptio) or another series id, and its step was at or above the run's first step when the
  run started.

Checkpoints of older ckptio versions that carry the per-directory counter attribute :data:`SEQ_ATTR` form one
series among themselves. Checkpoints of different series (a copy from another run's directory) never supersede
each other by ``seq``: they are placed by step. The *timeline* is every committed, not superseded checkpoint,
newest step first; :func:`latest` chooses only from it; retention (ckptio.series) deletes superseded checkpoints
first and never deletes a checkpoint of another series that no run of this one abandoned. A file whose metadata
cannot be read (truncated, damaged index), and an HDF5/netCDF file ckptio did not write (no checksums), cannot say
where it belongs: it supersedes nothing, is never chosen, never deleted. A committed checkpoint whose data a
lookup found damaged is marked (:mod:`ckptio.engine.damage_marks`): it stays in the timeline (it still places the
series' steps) but is never chosen nor deleted.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ckptio import _warn
from ckptio.backends import detect_backend
from ckptio.engine import damage_marks
from ckptio.errors import (
    CapabilityError,
    CheckpointError,
    CheckpointIOError,
    CorruptCheckpointError,
    DeclarationError,
    IncompleteCheckpointError,
)
from ckptio.model.document import CheckpointDocument
from ckptio.model.series_record import Abandoned, SeriesRecord

SEQ_ATTR = "ckptio_series_seq"
_TEMP = re.compile(r"\.(?P<name>.+)\.ckptio-tmp-[0-9a-f]{12}")


class NamePattern:
    """The exact names ``{stem}{step}{suffix}`` of one series. ``digits=None`` accepts any decimal step
    (``ckptio.latest``, which does not know the padding); an int accepts only ``f"{step:0{digits}d}"``."""

    def __init__(self, stem: str, suffix: str = "", digits: int | None = None):
        for what, text in (("prefix", stem), ("suffix", suffix)):
            if "/" in text or os.sep in text or "\0" in text:
                raise ValueError(f"{what} {text!r} must not contain a path separator or NUL")
        if digits is not None and (not isinstance(digits, int) or digits < 1):
            raise ValueError(f"digits={digits!r}: expected a positive int")
        self.stem, self.suffix, self.digits = stem, suffix, digits
        self._regex = re.compile(re.escape(stem) + r"([0-9]+)" + re.escape(suffix))

    @classmethod
    def for_prefix(cls, prefix: str, suffix: str = "", digits: int | None = None) -> NamePattern:
        """``prefix`` as ckptio.latest and Series take it: ``"chk"`` means ``chk_<step>``; a prefix that already
        ends in ``_`` (``"chk_"``) is the stem itself."""
        return cls(prefix if prefix.endswith("_") else prefix + "_", suffix, digits)

    def name(self, step: int) -> str:
        return f"{self.stem}{step:0{self.digits or 1}d}{self.suffix}"

    def step(self, name: str) -> int | None:
        """The step of ``name`` if it is exactly a name of this pattern, else None."""
        m = self._regex.fullmatch(name)
        if m is None:
            return None
        step = int(m.group(1))
        if self.digits is not None and f"{step:0{self.digits}d}" != m.group(1):
            return None
        return step

    def temp_of(self, name: str) -> str | None:
        """The checkpoint name whose write left the temporary ``name`` (ckptio's exact temporary pattern), or None."""
        m = _TEMP.fullmatch(name)
        if m is None or self.step(m.group("name")) is None:
            return None
        return m.group("name")

    def __repr__(self) -> str:
        width = f"{self.digits} digits" if self.digits else "digits"
        return f"{self.stem}<step, {width}>{self.suffix}"


LEGACY_SERIES = ""  # the series id given to checkpoints of older ckptio versions (attribute SEQ_ATTR)


@dataclass
class Entry:
    """One file of a series: its step and, when its metadata could be read, its series identity."""

    path: str
    step: int
    seq: int | None  # None: the metadata could not be read (``problem`` says why); 0: no series record
    mtime_ns: int
    problem: str | None = None
    series_id: str | None = None  # None: no series record; LEGACY_SERIES: an older ckptio's directory counter
    created: str | None = None  # the commit time its metadata records
    record: SeriesRecord | None = None
    damage: damage_marks.DamageMark | None = None  # a verification found its data damaged (never deleted)

    @property
    def committed(self) -> bool:
        return self.seq is not None

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def identity(self) -> Abandoned:
        """How a run's record names this checkpoint when it abandons it."""
        return Abandoned(self.name, self.created)


def list_directory(directory: str | os.PathLike) -> list[str]:
    """Names in ``directory``. A directory that does not exist, is not a directory or cannot be listed is a
    :class:`CheckpointIOError` naming it (a typo in a restart directory must not look like "no checkpoint")."""
    directory = os.fspath(directory)
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        raise CheckpointIOError(f"checkpoint directory {directory} does not exist") from None
    except NotADirectoryError:
        raise CheckpointIOError(f"checkpoint directory {directory} is not a directory") from None
    except OSError as exc:
        raise CheckpointIOError(f"checkpoint directory {directory} cannot be listed: {exc.strerror or exc}") from None


def scan(directory: str | os.PathLike, pattern: NamePattern, read: bool = True) -> list[Entry]:
    """Regular files of ``directory`` named exactly by ``pattern``, newest step first. With ``read``, each one's
    metadata is read (not its data) for its sequence number; a file that cannot be read gets ``seq=None``."""
    directory = os.fspath(directory)
    entries = []
    names = list_directory(directory)
    listed = set(names)
    for name in names:
        step = pattern.step(name)
        if step is None:
            continue
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)
        except OSError:
            continue  # vanished meanwhile
        if not stat.S_ISREG(st.st_mode):
            continue
        entry = Entry(path, step, None, st.st_mtime_ns, damage=damage_marks.find(path, st, listed))
        if read:
            try:
                describe(entry, read_metadata(path))
            except CapabilityError:
                raise  # a library this process lacks: never a reason to skip (or delete) a good checkpoint
            except (CheckpointError, OSError, ValueError) as exc:
                entry.problem = str(exc)
        entries.append(entry)
    return sorted(entries, key=lambda e: e.step, reverse=True)


def read_metadata(path: str) -> CheckpointDocument:
    return detect_backend(path).read_document(path)


def describe(entry: Entry, meta: CheckpointDocument) -> Entry:
    """Fill ``entry``'s identity from its metadata document ``meta`` (see the module docstring). A file ckptio did
    not write (a plain HDF5/netCDF document, no checksums) stays uncommitted: never chosen, never deleted."""
    if meta.plain:
        entry.problem = "not a ckptio checkpoint (an HDF5/netCDF file ckptio did not write)"
        return entry
    return identify(entry, meta.created, meta.series, meta.attrs)


def identify(entry: Entry, created: str | None, record: SeriesRecord | None, attrs: Mapping[str, Any]) -> Entry:
    """Fill ``entry``'s identity from what its document records: the commit time, the series record (None: the
    checkpoint has none) and the attributes (older ckptio: the sequence number attribute ``SEQ_ATTR``)."""
    entry.created = created
    if record is not None:
        entry.record = record
        entry.series_id, entry.seq = record.series_id, record.seq
        return entry
    value = attrs.get(SEQ_ATTR, 0)
    legacy = value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
    entry.seq, entry.series_id = legacy, (LEGACY_SERIES if legacy else None)
    return entry


def superseded(entries: list[Entry]) -> dict[str, Entry]:
    """{path of a superseded checkpoint: the checkpoint that superseded it} (see the module docstring)."""
    committed = [e for e in entries if e.committed]
    abandoned_by: dict[Abandoned, list[Entry]] = {}
    for y in committed:
        for gone in (y.record.abandons if y.record else ()):
            abandoned_by.setdefault(gone, []).append(y)
    out: dict[str, Entry] = {}
    for x in committed:
        later = [y for y in committed if x.seq and y.series_id == x.series_id and y.seq > x.seq  # type: ignore[operator]
                 and y.step <= x.step]
        later += abandoned_by.get(x.identity(), [])
        if later:
            out[x.path] = max(later, key=lambda y: (y.seq or 0, y.step))
    return out


def timeline(entries: list[Entry]) -> list[Entry]:
    """Committed, not superseded checkpoints, newest step first."""
    gone = superseded(entries)
    return sorted((e for e in entries if e.committed and e.path not in gone), key=lambda e: e.step, reverse=True)


def max_seq(entries: list[Entry], series_id: str) -> int:
    """The largest sequence number of series ``series_id`` among ``entries`` (0 if it has none)."""
    return max((e.seq for e in entries if e.series_id == series_id and e.seq is not None), default=0)


def check(path: str, verify: bool = False) -> None:
    """Raise a CheckpointError if ``path`` is not a complete checkpoint (with ``verify``: every checksum)."""
    from ckptio.verify import verify_blocks

    backend = detect_backend(path)
    meta = backend.read_document(path)
    if verify:
        problems = verify_blocks(backend, path, meta)
        if problems:
            from ckptio.errors import CorruptCheckpointError

            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            raise CorruptCheckpointError(f"{path}: {problems[0]}{more}")


def candidates(directory: str | os.PathLike, prefix: str = "chk", suffix: str = "") -> list[str]:
    """Paths named exactly like checkpoints of ``prefix``/``suffix`` in ``directory``, newest step first
    (no file is opened). Raises CheckpointIOError if ``directory`` is missing or not a directory."""
    return [e.path for e in scan(directory, NamePattern.for_prefix(prefix, suffix), read=False)]


def iter_valid(directory: str | os.PathLike, prefix: str = "chk", verify: bool = False,
               suffix: str = "") -> Iterator[str]:
    """Timeline checkpoints that pass :func:`check`, newest first; warns about every skipped one."""
    yield from _iter_valid(scan(directory, NamePattern.for_prefix(prefix, suffix)), verify)


def _iter_valid(entries: list[Entry], verify: bool, skipped: list[str] | None = None) -> Iterator[str]:
    """Checkpoints by step, newest first. Unreadable, superseded, marked damaged or (with ``verify``) damaged
    files are skipped with a warning; a committed checkpoint that fails :func:`check` with damage is marked
    (:mod:`ckptio.engine.damage_marks`). ``skipped`` collects the paths skipped as unreadable or damaged (not the
    superseded ones, which a later run replaced on purpose)."""
    gone = superseded(entries)
    for e in sorted(entries, key=lambda e: e.step, reverse=True):
        if e.path in gone:
            _skip(e.path, f"superseded by {os.path.basename(gone[e.path].path)}, committed later by a run that "
                          f"restarted from an older step")
            continue
        why = None
        if not e.committed:
            why = e.problem or "unreadable"
        elif e.damage is not None:
            why = e.damage.describe()
        else:
            try:
                check(e.path, verify)
            except CapabilityError:
                raise  # see scan()
            except (CorruptCheckpointError, IncompleteCheckpointError) as exc:
                e.damage = damage_marks.mark(e.path, str(exc))
                why = str(exc) + (f" (marked: {damage_marks.mark_name(e.name)})" if e.damage is not None else
                                  f" (it could NOT be marked as damaged in {os.path.dirname(e.path)}: it is not "
                                  "protected from retention nor from a new checkpoint of its step)")
            except (CheckpointError, OSError) as exc:
                why = str(exc)
        if why is None:
            yield e.path
            continue
        _skip(e.path, why)
        if skipped is not None:
            skipped.append(e.path)


def _skip(path: str, why: str) -> None:
    _warn.warn(f"ckptio: skipping {path}: {why}")


def latest(directory: str | os.PathLike, prefix: str = "chk", verify: bool = False, comm=None,
           stage_dir: str | os.PathLike | None = None, suffix: str = "",
           recover: Callable[[Any, str, NamePattern, str], Any] | None = None) -> str | None:
    """The newest valid checkpoint named exactly ``{prefix}_{step}{suffix}`` in ``directory``, or None.

    Raises :class:`CheckpointIOError` (naming the path) when ``directory`` does not exist or is not a directory;
    an existing directory without a valid checkpoint gives None. Only the series' timeline is considered
    (checkpoints superseded by a restart from an older step are never chosen, see the module docstring); the step
    is the number of the exact pattern (``chk_000010.h5`` is newer than ``chk_000005.h5``). Incomplete, truncated
    or damaged-index checkpoints are skipped with a warning; ``verify=True`` also reads every block and checks its
    checksum. With ``comm``: collective, rank 0 looks and every rank gets its answer or its error (ckptio.coord);
    without, the calling process looks by itself. With ``comm`` and ``stage_dir``, a staged checkpoint newer than
    anything valid in ``directory`` (its drain was interrupted) is drained first, when every rank's piece is
    present and verified on its own node (``recover(comm, directory, pattern, stage_dir)``: what
    :func:`ckptio.latest` passes, :func:`ckptio.tiers.staging.recover`); without ``comm``, ``stage_dir`` is ignored
    (one process cannot see every node's stage).
    """
    if comm is None:
        return find_latest(directory, NamePattern.for_prefix(prefix, suffix), verify)
    from ckptio import coord

    # the arguments are checked (and compared) inside the first agreed phase: one rank's bad prefix is the same
    # error on every rank, not a hang of the others in the broadcast below
    pattern = coord.gather_and_plan(
        comm, f"latest checkpoint in {os.fspath(directory)}: arguments",
        lambda: (os.path.abspath(os.fspath(directory)), prefix, suffix, bool(verify),
                 None if stage_dir is None else os.path.abspath(os.fspath(stage_dir)), _checked_prefix(prefix, suffix)),
        _same_latest_arguments)
    if stage_dir is not None and recover is not None:  # a staged checkpoint whose drain did not finish: drain it
        recover(comm, os.fspath(directory), pattern, os.fspath(stage_dir))
    return coord.bcast_from_root(comm, f"latest checkpoint in {os.fspath(directory)}",
                                 lambda: find_latest(directory, pattern, verify))


def _checked_prefix(prefix: str, suffix: str) -> None:
    """Local: a DeclarationError when ``prefix``/``suffix`` cannot name checkpoints."""
    pattern_of(prefix, suffix)


def pattern_of(prefix: str, suffix: str = "") -> NamePattern:
    """Local: the pattern of ``prefix``/``suffix`` as :func:`latest` takes them; a DeclarationError when they
    cannot name checkpoints."""
    try:
        return NamePattern.for_prefix(prefix, suffix)
    except (TypeError, ValueError, AttributeError) as exc:
        raise DeclarationError(f"ckptio.latest: prefix={prefix!r}, suffix={suffix!r}: {exc}") from None


def _same_latest_arguments(gathered: list[tuple]) -> NamePattern:
    """Rank 0: the pattern of :func:`latest`'s arguments, which every rank must pass alike."""
    for rank, args in enumerate(gathered):
        if args != gathered[0]:
            raise DeclarationError(f"ckptio.latest: the arguments differ between rank 0 {gathered[0][:5]!r} and rank "
                             f"{rank} {args[:5]!r}; pass the same directory, prefix, suffix, verify and stage_dir "
                             "on every rank")
    _, prefix, suffix, *_ = gathered[0]
    return NamePattern.for_prefix(prefix, suffix)


def find_latest(directory: str | os.PathLike, pattern: NamePattern, verify: bool = False,
                skipped: list[str] | None = None) -> str | None:
    """Local: :func:`latest` for an explicit pattern (Series uses this). When nothing is named by ``pattern``
    but files are named like checkpoints of a near pattern (another case, padding or suffix), warns naming them:
    a restart with a misspelt pattern must not look like a first run. ``skipped`` collects the newer files
    skipped as unreadable or damaged (see :func:`_iter_valid`)."""
    entries = scan(directory, pattern)
    found = next(_iter_valid(entries, verify, skipped), None)
    if not entries:
        misses = near_misses(directory, pattern)
        if misses:
            _warn.warn(near_miss_message(directory, pattern, misses))
    return found


def near_misses(directory: str | os.PathLike, pattern: NamePattern, shown: int = 3) -> list[str]:
    """Local: up to ``shown`` names in ``directory`` that look like checkpoints of ``pattern`` but are not named
    by it: the stem in another case, another number of digits, another suffix (never ckptio temporaries)."""
    loose = re.compile(re.escape(pattern.stem.rstrip("_")) + r"_?([0-9]+)(.*)", re.IGNORECASE)
    names = sorted(n for n in list_directory(directory) if loose.fullmatch(n) and pattern.step(n) is None
                   and _TEMP.fullmatch(n) is None and not damage_marks.is_set_aside(n))
    return names[:shown]


def near_miss_message(directory: str | os.PathLike, pattern: NamePattern, misses: list[str]) -> str:
    return (f"ckptio: no checkpoint named {pattern!r} in {os.fspath(directory)}, but it holds files named like "
            f"checkpoints of another pattern ({', '.join(misses)}): check prefix=, suffix= and digits= (this is "
            "not taken as a first run's empty directory)")
