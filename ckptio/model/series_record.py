"""The series identity a :class:`ckptio.Series` records in every checkpoint it writes (document key ``series``).

A checkpoint's place in its directory's history cannot be told from its name or from a counter that only means
something inside one directory (issue 23: a copy from another run, or checkpoints written without a Series,
made retention delete good checkpoints). Each Series checkpoint therefore says, in its own metadata (committed
atomically with it, copied with it)::

    "series": {"id": "9f0c...",        # the series (lineage): inherited by every run that continues it
               "run": "41aa...",       # this run (one Series object)
               "seq": 7,               # commit order inside the series: comparable only between equal ids
               "parent": "chk_000020", # the checkpoint this run restarted from (None: a cold start)
               "abandons": [{"name": "chk_000030", "created": "2026-11-25T10:00:00.123456Z"}, ...]}

``abandons`` lists the checkpoints of the directory that were newer than this run's first step when the run
started and that the ``seq`` rule cannot order (written without a Series: ``ckptio.create``, C/Fortran, older
ckptio; or of another series id), each by name and commit time, so a later file of the same name is not
mistaken for it. :mod:`ckptio.tiers.catalog` derives the timeline from these records. Pure data: no MPI, no files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_HEX_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Abandoned:
    """A checkpoint a run abandoned: its file name and the ``created`` time its metadata records (None for a
    file whose document has none)."""

    name: str
    created: str | None


@dataclass(frozen=True)
class SeriesRecord:
    """One checkpoint's series identity (see the module docstring)."""

    series_id: str
    run_id: str
    seq: int
    parent: str | None = None
    abandons: tuple[Abandoned, ...] = field(default=())

    def __post_init__(self) -> None:
        for what, value in (("id", self.series_id), ("run", self.run_id)):
            if not isinstance(value, str) or not _HEX_ID.fullmatch(value):
                raise ValueError(f"series {what} {value!r} is not 32 lower-case hex digits")
        if not isinstance(self.seq, int) or isinstance(self.seq, bool) or self.seq < 1:
            raise ValueError(f"series seq {self.seq!r} is not a positive integer")
        if self.parent is not None and not isinstance(self.parent, str):
            raise ValueError(f"series parent {self.parent!r} is not a file name")

    def to_json(self) -> dict[str, Any]:
        return {"id": self.series_id, "run": self.run_id, "seq": self.seq, "parent": self.parent,
                "abandons": [{"name": a.name, "created": a.created} for a in self.abandons]}

    @classmethod
    def from_json(cls, value: Any) -> SeriesRecord:
        """The record of a document's ``series`` entry; ValueError when it is not one."""
        if not isinstance(value, dict):
            raise ValueError(f"series record {value!r} is not an object")
        try:
            abandons = tuple(Abandoned(str(a["name"]), a["created"] if isinstance(a["created"], str) else None)
                             for a in value.get("abandons") or ())
            return cls(value["id"], value["run"], value["seq"], value.get("parent"), abandons)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"series record {value!r} is incomplete ({exc})") from None

    def next(self) -> SeriesRecord:
        """The record of the run's next checkpoint (one more in the series' commit order)."""
        return SeriesRecord(self.series_id, self.run_id, self.seq + 1, self.parent, self.abandons)
