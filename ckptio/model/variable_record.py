"""One variable of a checkpoint's metadata document, typed: :class:`VariableRecord` (and the read-only
JSON-form view every record of :mod:`ckptio.model.document` shares). Pure: no MPI, no files; the document's
module docstring describes the stored form and the two ways to read a record."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ckptio.model.block_table import BlockTable, as_table
from ckptio.model.dims_attrs import default_dims
from ckptio.model.layout import itemsize_of
from ckptio.model.records import NO_UNKNOWN_KEYS, StorageRecord, unknown_keys

_ABSENT: Any = object()  # a view key the record does not have


class _JsonView(Mapping):
    """A record that also reads as its JSON-form dict (see the module docstring): ``_VIEW`` maps each key to a
    getter that returns the key's value or ``_ABSENT``; keys of ``extra`` follow."""

    _VIEW: Mapping[str, Callable[[Any], Any]] = {}
    extra: Mapping[str, Any]

    def __getitem__(self, key: str) -> Any:
        getter = self._VIEW.get(key)
        if getter is not None:
            value = getter(self)
            if value is not _ABSENT:
                return value
        return self.extra[key]

    def __iter__(self) -> Iterator[str]:
        shown = [key for key, getter in self._VIEW.items() if getter(self) is not _ABSENT]
        yield from shown
        yield from (key for key in self.extra if key not in shown)

    def __len__(self) -> int:
        return sum(1 for _ in self)


# ---------------------------------------------------------------------------------------------- variables
@dataclass(frozen=True)
class VariableRecord(_JsonView):
    """One variable of a checkpoint: its global array (``dtype`` as numpy's ``str`` of it, ``shape``), its kind
    (``"array"``: N-d blocks at global offsets; ``"segment"``: one run of leading rows per writer rank, end to end
    in rank order), the writers' blocks, and the optional ``dims``, ``attrs`` and backend ``storage``.

    ``blocks`` is None in a light copy (:meth:`CheckpointDocument.without_blocks`); ``nblocks`` is always the
    number of blocks. As a Mapping it reads as the variable's dict of the JSON form (``"blocks"``, or
    ``"nblocks"`` in a light copy)."""

    dtype: str
    shape: tuple[int, ...]
    kind: str
    blocks: BlockTable | None
    nblocks: int
    dims: tuple[str, ...] | None = None
    attrs: Mapping[str, Any] | None = None
    storage: StorageRecord | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    _KNOWN = ("dtype", "shape", "kind", "blocks", "dims", "attrs", "storage")

    @property
    def is_light(self) -> bool:
        return self.blocks is None

    @property
    def is_segment(self) -> bool:
        return self.kind == "segment"

    @property
    def nbytes(self) -> int:
        """The bytes of the whole global array."""
        return math.prod(self.shape) * itemsize_of(self.dtype)

    @property
    def file_offset(self) -> int | None:
        """Where a backend that stores the variable as one array put it (``storage.file_offset``; None: no single
        place, or no storage record)."""
        return None if self.storage is None else self.storage.file_offset

    @property
    def file_dtype(self) -> str:
        """Its dtype in the file: ``storage.file_dtype`` where recorded (e.g. big-endian in CDF files), else the
        declared ``dtype``."""
        stored = None if self.storage is None else self.storage.file_dtype
        return self.dtype if stored is None else stored

    @property
    def itemsize(self) -> int:
        return itemsize_of(self.dtype)

    @property
    def stored_nbytes(self) -> int:
        """The bytes its blocks occupy in the file (raises on a light copy, which has no blocks)."""
        return int(self._table().stored_nbytes.sum())

    def dim_names(self, name: str) -> tuple[str, ...]:
        """The dimension names of this variable, called ``name``: declared, or ``<name>_d0``, ``<name>_d1``, ..."""
        return self.dims if self.dims else tuple(default_dims(name, len(self.shape)))

    def block_table(self) -> BlockTable:
        """The blocks; ValueError on a light copy (only rank 0 and the restart aggregators hold tables)."""
        return self._table()

    def _table(self) -> BlockTable:
        if self.blocks is None:
            raise ValueError("a light copy of the document has no block table (only nblocks)")
        return self.blocks

    def without_blocks(self) -> VariableRecord:
        """This record without its block table (``nblocks`` kept). A field copy, not ``dataclasses.replace``
        (which re-runs the constructor): rank 0 makes one per variable of every checkpoint it writes or opens."""
        light = object.__new__(VariableRecord)
        light.__dict__.update(self.__dict__)
        light.__dict__["blocks"] = None
        return light

    def entry_json(self) -> dict[str, Any]:
        """The variable's entry in the stored document, without its blocks (schema 2 keeps them in the columns)."""
        out: dict[str, Any] = {"dtype": self.dtype, "shape": list(self.shape), "kind": self.kind}
        if self.dims is not None:
            out["dims"] = list(self.dims)
        if self.attrs is not None:
            out["attrs"] = dict(self.attrs)
        if self.storage is not None:
            out["storage"] = self.storage.to_json()
        out.update(self.extra)
        return out

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> VariableRecord:
        """The typed form of a variable entry in the in-memory dict form (blocks a BlockTable or a schema-1
        list; a light copy's ``nblocks`` instead), taken as it is: no checks (it comes from ckptio itself,
        e.g. the write side's document; a parsed file goes through :meth:`CheckpointDocument.from_json`)."""
        if isinstance(entry, VariableRecord):
            return entry
        if type(entry) is dict and entry.keys() == _PLAIN_KEYS and type(entry["blocks"]) is BlockTable:
            # (the usual small variable: dtype, shape, kind and its table; no dims, attrs, storage or newer keys)
            record = object.__new__(cls)
            record.__dict__.update(
                dtype=_shared(entry["dtype"]), shape=tuple(map(int, entry["shape"])), kind=_shared(entry["kind"]),
                blocks=entry["blocks"], nblocks=len(entry["blocks"]), dims=None, attrs=None, storage=None,
                extra=NO_UNKNOWN_KEYS)
            return record
        shape = tuple(map(int, entry["shape"]))
        light = "blocks" not in entry
        blocks = None if light else as_table(entry["blocks"], len(shape))
        dims = entry.get("dims")
        storage = entry.get("storage")
        # every field given, as the constructor would set them (without a frozen dataclass's object.__setattr__
        # per field: this runs once per variable of every document read or written)
        record = object.__new__(cls)
        record.__dict__.update(
            dtype=_shared(entry["dtype"]), shape=shape, kind=_shared(entry["kind"]), blocks=blocks,
            nblocks=int(entry["nblocks"]) if light else len(blocks), dims=None if dims is None else tuple(dims),
            attrs=entry.get("attrs"), storage=None if storage is None else StorageRecord(dict(storage)),
            extra=unknown_keys(entry, _LIGHT_KEYS if light else cls._KNOWN))
        return record

    _VIEW = {
        "dtype": lambda v: v.dtype,
        "shape": lambda v: list(v.shape),
        "kind": lambda v: v.kind,
        "blocks": lambda v: _ABSENT if v.blocks is None else v.blocks,
        "nblocks": lambda v: v.nblocks if v.blocks is None else _ABSENT,
        "dims": lambda v: _ABSENT if v.dims is None else list(v.dims),
        "attrs": lambda v: _ABSENT if v.attrs is None else v.attrs,
        "storage": lambda v: _ABSENT if v.storage is None else v.storage.to_json(),
    }


_LIGHT_KEYS = (*VariableRecord._KNOWN, "nblocks")
_PLAIN_KEYS = frozenset(("dtype", "shape", "kind", "blocks"))
_SHARED: dict[Any, Any] = {}


def _shared(value: Any) -> Any:
    """One object for equal dtype and kind strings of a document's variables (a parsed document has one string
    object per occurrence): the pickled light copy then says each once, and every rank unpickles one."""
    try:
        return _SHARED.setdefault(value, value) if len(_SHARED) < 4096 else value
    except TypeError:  # (unhashable: a document taken as it is, unchecked, never a parsed one)
        return value
