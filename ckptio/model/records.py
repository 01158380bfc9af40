"""The small records of a checkpoint's metadata document (see :mod:`ckptio.model.document`): how a backend stored a
variable, the stripe layout, the MPI-IO hints and the write statistics, each with its ``from_json`` (ValueError
naming the field when the JSON is not that record) and ``to_json``. Pure data: no MPI, no files. Keys a newer
ckptio adds are kept in each record's ``extra`` and written back unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ckptio.model.fs_layout_record import FsLayoutRecord


def json_object(value: Any, what: str) -> dict[str, Any]:
    """``value`` if it is a JSON object, else ValueError naming ``what``."""
    if not isinstance(value, dict):
        raise ValueError(f"{what} is {type(value).__name__}, expected an object")
    return value


def string_keyed(value: Any, what: str) -> dict[str, Any]:
    """An object whose keys are strings (MPI hints, a plain file's skipped variables)."""
    value = json_object(value, what)
    if not all(isinstance(k, str) for k in value):
        raise ValueError(f"{what} has keys that are not strings")
    return dict(value)


class _NoUnknownKeys(dict):
    """The empty ``extra`` of every record without unknown keys: one object, read-only (a caller's
    ``doc.extra["x"] = 1`` would otherwise reach every record and every document stored after it), pickled and
    copied as itself."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a record's extra keys are read-only (build a new record instead)")

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = __ior__ = _refuse  # type: ignore

    def __reduce__(self) -> str:
        return "NO_UNKNOWN_KEYS"  # (pickle and copy: the module's singleton)

    def __copy__(self) -> _NoUnknownKeys:
        return self

    def __deepcopy__(self, memo: dict) -> _NoUnknownKeys:
        return self


NO_UNKNOWN_KEYS: dict[str, Any] = _NoUnknownKeys()  # what unknown_keys gives in the usual case


def unknown_keys(value: Mapping[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    """The entries of ``value`` whose keys are not ``known``: a newer ckptio's additions, kept as they were. When
    there are none, the shared empty :data:`NO_UNKNOWN_KEYS` (records never modify their ``extra``): a document
    of 10,000 variables holds one empty dict instead of 10,000, and its pickled light copy, which every rank
    unpickles at open, says it once."""
    if isinstance(value, dict) and value.keys() <= _known_set(known):  # (the usual case, once per variable)
        return NO_UNKNOWN_KEYS
    return {k: v for k, v in value.items() if k not in known}


_KNOWN_SETS: dict[tuple[str, ...], frozenset[str]] = {}


def _known_set(known: tuple[str, ...]) -> frozenset[str]:
    found = _KNOWN_SETS.get(known)
    if found is None:
        found = _KNOWN_SETS[known] = frozenset(known)
    return found


@dataclass(frozen=True)
class StorageRecord:
    """How a backend stored a variable as one array (HDF5, netCDF, plain files): the backend's own object
    (``format``, ``dataset``, ``layout``... as it wrote them), of which the document defines two entries:
    ``file_offset`` (where the array starts; None where it has no single place) and ``file_dtype`` (its dtype in
    the file, e.g. big-endian in CDF files)."""

    fields: Mapping[str, Any]

    @property
    def file_offset(self) -> int | None:
        return self.fields.get("file_offset")

    @property
    def file_dtype(self) -> str | None:
        return self.fields.get("file_dtype")

    @property
    def format(self) -> str | None:
        return self.fields.get("format")

    def to_json(self) -> dict[str, Any]:
        return dict(self.fields)



@dataclass(frozen=True)
class LayoutRecord:
    """The file's stripe layout: what ckptio chose (the hints' ``striping_factor`` and ``striping_unit``) and,
    where recorded, what the file system gave (``fs``)."""

    stripe_count: int | None = None
    stripe_unit: int | None = None
    fs: FsLayoutRecord | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.stripe_count is not None:
            out["stripe_count"] = self.stripe_count
        if self.stripe_unit is not None:
            out["stripe_unit"] = self.stripe_unit
        if self.fs is not None:
            out["fs"] = self.fs.to_json()
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, value: Any) -> LayoutRecord:
        """The record of a document's ``layout``; ValueError when it is not one."""
        value = json_object(value, "field 'layout'")
        for key in ("stripe_count", "stripe_unit"):
            n = value.get(key)
            if n is not None and not (isinstance(n, int) and not isinstance(n, bool) and n >= 1):
                raise ValueError(f"layout {key!r} is {n!r}, expected an integer >= 1")
        fs = value.get("fs")
        return cls(value.get("stripe_count"), value.get("stripe_unit"),
                   None if fs is None else FsLayoutRecord.from_json(fs),
                   unknown_keys(value, ("stripe_count", "stripe_unit", "fs")))


@dataclass(frozen=True)
class HintsRecord:
    """The MPI-IO hints: ``requested`` (what ckptio set), ``effective`` (what the MPI library reported for the
    open file: an echo, not proof that a driver applied them) and ``io_component`` (which MPI-IO layer). All
    three are written."""

    requested: Mapping[str, str] = field(default_factory=dict)
    effective: Mapping[str, str] = field(default_factory=dict)
    io_component: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"requested": dict(self.requested), "effective": dict(self.effective),
                "io_component": self.io_component, **self.extra}

    @classmethod
    def from_json(cls, value: Any) -> HintsRecord:
        value = json_object(value, "field 'hints'")
        io = value.get("io_component")
        if io is not None and not isinstance(io, str):
            raise ValueError(f"hints 'io_component' is {io!r}, expected a string")
        return cls(string_keyed(value.get("requested", {}), "hints 'requested'"),
                   string_keyed(value.get("effective", {}), "hints 'effective'"), io,
                   unknown_keys(value, ("requested", "effective", "io_component")))


@dataclass(frozen=True)
class WriteStatsRecord:
    """The write's statistics: ``seconds`` per phase (the slowest rank's), ``bytes`` handed to the write
    (``total``, ``min`` and ``max`` of any rank) and ``placement`` (where the bytes went per node, see
    :mod:`ckptio.engine.placement_stats`; absent in a light copy). Format 1 kept other entries (``bytes_per_rank``):
    in ``extra``."""

    seconds: Mapping[str, float] = field(default_factory=dict)
    bytes: Mapping[str, int] | None = None
    placement: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seconds": dict(self.seconds)}
        if self.bytes is not None:
            out["bytes"] = dict(self.bytes)
        if self.placement is not None:
            out["placement"] = self.placement
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, value: Any) -> WriteStatsRecord:
        value = json_object(value, "stats 'write'")
        found = {key: None if value.get(key) is None else json_object(value.get(key), f"stats write {key!r}")
                 for key in ("seconds", "bytes", "placement")}
        return cls(found["seconds"] or {}, found["bytes"], found["placement"],
                   unknown_keys(value, ("seconds", "bytes", "placement")))


@dataclass(frozen=True)
class StatsRecord:
    """The document's ``stats``: the write's (:class:`WriteStatsRecord`)."""

    write: WriteStatsRecord | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**({"write": self.write.to_json()} if self.write is not None else {}), **self.extra}

    @classmethod
    def from_json(cls, value: Any) -> StatsRecord:
        value = json_object(value, "field 'stats'")
        write = value.get("write")
        return cls(None if write is None else WriteStatsRecord.from_json(write), unknown_keys(value, ("write",)))
