"""The layout the file system gave a checkpoint file, as its document records it (``layout.fs``; written by
:mod:`ckptio.engine.fslayout`, issue 26; older files have none). Pure data: no MPI, no files.

    {"type": "cephfs", "mode": "set", "method": "ceph.file.layout xattr",
     "asked": {"stripe_count": 4, "stripe_unit": 1048576, "object_size": 4194304},
     "got": {"stripe_count": 4, "stripe_unit": 1048576, "object_size": 4194304, "pool": "cephfs_data"},
     "reason": null}

``asked`` and ``got`` are what the file system's own interface names them (integers and strings: a Lustre or
CephFS layout); ``got`` is null where the file system has no readable layout; ``reason`` says why nothing (or not
what was asked) was set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_TEXT_FIELDS = ("type", "mode", "method", "reason")
_LAYOUT_FIELDS = ("asked", "got")


@dataclass(frozen=True)
class StripeLayout:
    """A stripe layout a file system reports (or is asked for): count and unit where it has them, the object
    size of CephFS; everything it reports in ``values`` (e.g. CephFS's ``pool``, GPFS's ``block_size``)."""

    values: Mapping[str, int | str]

    @property
    def stripe_count(self) -> int | None:
        return _positive(self.values.get("stripe_count"))

    @property
    def stripe_unit(self) -> int | None:
        return _positive(self.values.get("stripe_unit"))

    @property
    def object_size(self) -> int | None:
        return _positive(self.values.get("object_size"))

    def granule(self) -> int | None:
        """The smallest file range made of whole storage objects (None without a count and a unit): a
        contiguous range aligned to it touches no object (CephFS) or stripe (Lustre) that a range aligned the
        same way next to it touches. CephFS with ``stripe_count`` S > 1 interleaves units over S objects of
        ``object_size`` each: an object set is S x ``object_size`` bytes; S = 1: one object; Lustre: one stripe
        unit (one OST object piece)."""
        count, unit = self.stripe_count, self.stripe_unit
        if count is None or unit is None:
            return None
        size = self.object_size or unit
        if size == unit:
            return unit
        return size if count == 1 else count * size

    def to_json(self) -> dict[str, int | str]:
        return dict(self.values)

    @classmethod
    def from_json(cls, value: Any, what: str) -> StripeLayout:
        if not isinstance(value, Mapping) or not all(isinstance(v, (int, str)) and not isinstance(v, bool)
                                                     for v in value.values()):
            raise ValueError(f"layout fs {what!r} is {value!r}, expected an object of integers and strings")
        return cls(dict(value))


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class FsLayoutRecord:
    """What ckptio asked of the file system and what it reported back (see the module docstring)."""

    type: str | None = None
    mode: str | None = None
    method: str | None = None
    asked: StripeLayout | None = None
    got: StripeLayout | None = None
    reason: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys a newer ckptio added: kept as they were

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "mode": self.mode, "method": self.method,
                "asked": None if self.asked is None else self.asked.to_json(),
                "got": None if self.got is None else self.got.to_json(), "reason": self.reason, **self.extra}

    @classmethod
    def from_json(cls, value: Any) -> FsLayoutRecord:
        """The record of a document's ``layout.fs``; ValueError when it is not the typed record."""
        if not isinstance(value, Mapping):
            raise ValueError(f"layout 'fs' is {value!r}, expected an object")
        for key in _TEXT_FIELDS:
            if value.get(key) is not None and not isinstance(value.get(key), str):
                raise ValueError(f"layout fs {key!r} is {value.get(key)!r}, expected a string or null")
        layouts = {key: None if value.get(key) is None else StripeLayout.from_json(value.get(key), key)
                   for key in _LAYOUT_FIELDS}
        return cls(value.get("type"), value.get("mode"), value.get("method"), layouts["asked"], layouts["got"],
                   value.get("reason"), {k: v for k, v in value.items() if k not in (*_TEXT_FIELDS, *_LAYOUT_FIELDS)})

    def got_layout(self) -> StripeLayout | None:
        """What the file system reported, when it names a positive stripe count and unit (None otherwise)."""
        got = self.got
        return got if got is not None and got.stripe_count is not None and got.stripe_unit is not None else None
