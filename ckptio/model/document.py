"""The checkpoint's metadata document, typed: :class:`CheckpointDocument` and its parts. Pure: no MPI, no files.

One document describes a checkpoint in every backend. The native format stores it as the footer index; HDF5 and
PnetCDF store the same document (as JSON text) next to their own native structures, so ``ckptio inspect`` and the
restart planner see every backend the same way. :meth:`CheckpointDocument.from_json` and
:meth:`CheckpointDocument.to_json` are its only JSON boundary (plain JSON types, never pickle); the checks of a
parsed document (:mod:`ckptio.model.schema_checks`) run inside ``from_json``, so a document that exists passed
them. :mod:`ckptio.model.meta` turns the JSON into the stored text and back (sorted keys, compact: the text the
formats checksum).

Stored form (``schema`` = :data:`SCHEMA_VERSION` = 2)::

    {"schema": 2, "ckptio_version": "...", "backend": "mpiio", "backend_format_version": 1,
     "created": "2026-11-23T10:00:00Z", "nprocs": 4, "byteorder": "little",
     "checksum": "xxh3_64", "attrs": {...},
     "layout": {"stripe_count": 4, "stripe_unit": 1048576,     # what ckptio chose (the hints)
                "fs": {...the layout the file system gave, see ckptio.model.fs_layout_record; absent in older
                       files}},
     "hints": {"requested": {...}, "effective": {...}, "io_component": "..."},
     "stats": {"write": {"seconds": {...}, "bytes": {...}, "placement": {...}}},
     "series": {...the series identity, see ckptio.model.series_record; only checkpoints of a Series},
     "variables": {"dens": {"dtype": "<f8", "shape": [64, 16, 16, 16], "kind": "array",
                            "dims": ["block", "z", "y", "x"], "attrs": {"units": "g/cm**3"},
                            "storage": {...backend specific...}}},
     "variable_blocks": {...every variable's blocks as integer columns, see ckptio.model.block_table...}}

Each :class:`VariableRecord` holds its blocks as a :class:`~ckptio.model.block_table.BlockTable` (rank, offset,
shape, the xxh3-64 checksum as ``uint64``, file offset, stored size, codec: columns, no Python object per block).
Schema 1 (ckptio before format version 2) stored one JSON object per block in the variable's ``"blocks"``::

    "blocks": [{"rank": 0, "offset": [0,0,0,0], "shape": [16,16,16,16], "checksum": "8f3a...",
                "file_offset": 4096, "stored_nbytes": 524288, "codec": null}]

Schema-1 documents are still read (their lists become tables); ``to_json`` writes schema 1 only for a document
that says ``schema=1`` (tests of old files). ``dims`` and ``attrs`` of a variable are optional (older documents
have none): see :mod:`ckptio.model.dims_attrs`. The layout, hints, statistics and storage records are in
:mod:`ckptio.model.records`. Keys this ckptio does not know (a newer minor addition) are kept in each record's
``extra`` and written back unchanged.

**Two ways to read a document.** Attribute access is the typed API (``doc.variables["dens"].shape``, a tuple;
``doc.hints.requested``); ckptio's own code uses it. ``doc[key]`` is the JSON-form view for user code and tests
written against the dict ckptio used to hand out: a :class:`CheckpointDocument` (and each
:class:`VariableRecord`) is also a read-only :class:`~collections.abc.Mapping` with exactly that dict's keys and
values (``doc["variables"]["dens"]["shape"]`` is a list, ``["blocks"]`` the BlockTable, ``doc["layout"]`` a
dict). **Light copies** (:meth:`CheckpointDocument.without_blocks`: no block tables, each variable's ``nblocks``
instead) are what every rank but rank 0 holds: the tables grow with the job.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ckptio.errors import FormatVersionError
from ckptio.model import block_table
from ckptio.model.block_table import BlockTable, as_table
from ckptio.model.dims_attrs import default_dims
from ckptio.model.fs_layout_record import FsLayoutRecord
from ckptio.model.layout import itemsize_of
from ckptio.model.records import (
    HintsRecord,
    LayoutRecord,
    StatsRecord,
    StorageRecord,
    WriteStatsRecord,
    json_object,
    string_keyed,
    unknown_keys,
)
from ckptio.model.schema_checks import CHECKSUM_ALGORITHM, validate
from ckptio.model.series_record import SeriesRecord

SCHEMA_VERSION = 2
CKPTIO_VERSION = "0.1.0"
NO_CHECKSUM = "none"  # the ``checksum`` of a plain HDF5/netCDF file's document (ckptio.model.plain): nothing to verify

__all__ = ["CHECKSUM_ALGORITHM", "CKPTIO_VERSION", "NO_CHECKSUM", "SCHEMA_VERSION", "CheckpointDocument",
           "FsLayoutRecord", "HintsRecord", "LayoutRecord", "SeriesRecord", "StatsRecord", "StorageRecord",
           "VariableRecord", "WriteStatsRecord", "as_document", "check_schema", "light_dict", "stored_json",
           "variables_of"]

_ABSENT: Any = object()  # a view key the record does not have


def check_schema(meta: Mapping[str, Any]) -> None:
    """FormatVersionError unless ``meta["schema"]`` is a schema version this ckptio reads (1 ..
    :data:`SCHEMA_VERSION`)."""
    version = meta.get("schema")
    if not isinstance(version, int) or version > SCHEMA_VERSION or version < 1:
        raise FormatVersionError(
            f"checkpoint metadata schema version {version} is not supported by ckptio {CKPTIO_VERSION} "
            f"(supports schema 1..{SCHEMA_VERSION})"
        )


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
        shape = tuple(map(int, entry["shape"]))
        light = "blocks" not in entry
        blocks = None if light else as_table(entry["blocks"], len(shape))
        dims = entry.get("dims")
        storage = entry.get("storage")
        # every field given, as the constructor would set them (without a frozen dataclass's object.__setattr__
        # per field: this runs once per variable of every document read or written)
        record = object.__new__(cls)
        record.__dict__.update(
            dtype=entry["dtype"], shape=shape, kind=entry["kind"], blocks=blocks,
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


# ------------------------------------------------------------------------------------------------ document
_DOCUMENT_KEYS = ("schema", "ckptio_version", "backend", "backend_format_version", "created", "nprocs", "byteorder",
                  "checksum", "attrs", "layout", "hints", "stats", "variables", "series", "plain", "plain_skipped")


def _present(value: Any) -> Any:
    return _ABSENT if value is None else value


def _json_or_absent(record: Any) -> Any:
    return _ABSENT if record is None else record.to_json()


@dataclass(frozen=True)
class CheckpointDocument(_JsonView):
    """A checkpoint's metadata document (see the module docstring): typed attributes, and a read-only Mapping
    over the JSON-form dict ckptio handed out before (``doc["variables"]["dens"]["dtype"]``) for user code.

    ``plain`` marks the document :mod:`ckptio.model.plain` builds for an HDF5 or netCDF file ckptio did not write
    (``checksum`` is :data:`NO_CHECKSUM`; ``plain_skipped`` names the variables it cannot read, with why): such a
    document exists in memory only. Equality is field by field (block tables column by column); documents are
    not hashable (their attributes are dicts)."""

    schema: int
    backend: str
    nprocs: int
    checksum: str
    attrs: Mapping[str, Any]
    variables: Mapping[str, VariableRecord]
    ckptio_version: str | None = None
    backend_format_version: int | None = None
    created: str | None = None
    byteorder: str | None = None
    layout: LayoutRecord | None = None
    hints: HintsRecord | None = None
    stats: StatsRecord | None = None
    series: SeriesRecord | None = None
    plain: bool = False
    plain_skipped: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    _VIEW = {
        "schema": lambda d: d.schema,
        "ckptio_version": lambda d: _present(d.ckptio_version),
        "backend": lambda d: d.backend,
        "backend_format_version": lambda d: _present(d.backend_format_version),
        "created": lambda d: _present(d.created),
        "nprocs": lambda d: d.nprocs,
        "byteorder": lambda d: _present(d.byteorder),
        "checksum": lambda d: d.checksum,
        "attrs": lambda d: d.attrs,
        "layout": lambda d: _json_or_absent(d.layout),
        "hints": lambda d: _json_or_absent(d.hints),
        "stats": lambda d: _json_or_absent(d.stats),
        "variables": lambda d: d.variables,
        "series": lambda d: _json_or_absent(d.series),
        "plain": lambda d: True if d.plain else _ABSENT,
        "plain_skipped": lambda d: dict(d.plain_skipped) if d.plain else _ABSENT,
    }

    # ---------------------------------------------------------------------------------- typed reading
    @property
    def is_light(self) -> bool:
        """True for a light copy (no block tables: every rank but rank 0 holds one)."""
        return any(v.blocks is None for v in self.variables.values())

    @property
    def checksummed(self) -> bool:
        """Whether the blocks carry checksums to verify (False for a plain HDF5/netCDF file's document)."""
        return self.checksum != NO_CHECKSUM

    def joined_blocks(self) -> block_table.JoinedBlocks:
        """Every variable's block table joined into one set of columns, variables in document order (not for a
        light copy): checks over all blocks of a checkpoint as a few numpy calls, not a loop over its variables."""
        ndims = [len(v.shape) for v in self.variables.values()]
        return block_table.JoinedBlocks.of([v.block_table() for v in self.variables.values()], ndims,
                                           max(ndims, default=0))

    def without_blocks(self) -> CheckpointDocument:
        """The light copy: every variable without its block table (``nblocks`` says how many): what every rank
        holds of a checkpoint it writes or reads (the tables grow with the job; rank 0 and the restart
        aggregators hold them)."""
        return dataclasses.replace(self, variables={n: v.without_blocks() for n, v in self.variables.items()})

    # ---------------------------------------------------------------------------------- the JSON boundary
    @classmethod
    def from_json(cls, obj: Any) -> CheckpointDocument:
        """The document of a parsed JSON object (``json.loads`` of the stored text). Refuses a schema newer than
        this ckptio reads (FormatVersionError), then checks the structure (ValueError naming the field: the
        backends report it as :class:`~ckptio.CorruptCheckpointError`). Every variable's blocks become a
        :class:`BlockTable`, from either schema. ``obj`` is not modified."""
        if not isinstance(obj, dict) or "schema" not in obj:
            raise ValueError("metadata is not a ckptio document")
        check_schema(obj)
        meta = dict(obj)
        if meta["schema"] >= 2:
            variables = {name: dict(var) if isinstance(var, dict) else var
                         for name, var in json_object(meta.get("variables"), "field 'variables'").items()}
            for name, var in variables.items():
                if not isinstance(var, dict) or "blocks" in var:
                    raise ValueError(f"variable {name!r}: the entry is not a schema-{meta['schema']} variable")
            if "variable_blocks" not in meta:
                raise ValueError("field 'variable_blocks' is missing")
            for name, table in block_table.decode(meta.pop("variable_blocks"), variables).items():
                variables[name]["blocks"] = table
            meta["variables"] = variables
        validate(meta)
        return cls._build(meta, {name: VariableRecord.of(var) for name, var in meta["variables"].items()})

    def to_json(self) -> dict[str, Any]:
        """The stored form: plain JSON types (schema 2: the blocks as ``variable_blocks`` columns; schema 1: one
        object per block). ValueError for a light copy, which has no blocks to store."""
        if self.is_light:
            raise ValueError("a light copy of the document (no block tables) cannot be stored")
        out: dict[str, Any] = {"schema": self.schema, "backend": self.backend, "nprocs": self.nprocs,
                               "checksum": self.checksum, "attrs": dict(self.attrs)}
        for key in ("ckptio_version", "backend_format_version", "created", "byteorder"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        for key in ("layout", "hints", "stats", "series"):
            record = getattr(self, key)
            if record is not None:
                out[key] = record.to_json()
        if self.plain:
            out.update(plain=True, plain_skipped=dict(self.plain_skipped))
        out.update(self.extra)
        entries = {name: var.entry_json() for name, var in self.variables.items()}
        if self.schema == 1:
            for name, var in self.variables.items():
                entries[name]["blocks"] = var._table().to_dicts()
        else:
            out["variable_blocks"] = block_table.encode_tables({n: v._table() for n, v in self.variables.items()})
        out["variables"] = entries
        return out

    @classmethod
    def listed(cls, obj: Any) -> CheckpointDocument:
        """A light copy of a parsed JSON document taken as it is, unchecked: its schema, backend, nprocs and
        checksum, and each variable's dtype, shape, kind and storage record (``nblocks`` 0: no blocks are read).
        Only for a check whose caller compares the stored bytes with its own right after (the HDF5 commit's check
        of every dataset): anything else goes through :meth:`from_json`. KeyError, TypeError or ValueError when
        ``obj`` is not that shape."""
        variables = {name: VariableRecord.of({"dtype": v["dtype"], "shape": v["shape"], "kind": v["kind"],
                                              "nblocks": 0, **({"storage": v["storage"]} if "storage" in v else {})})
                     for name, v in obj["variables"].items()}
        return cls(obj["schema"], obj["backend"], obj["nprocs"], obj["checksum"], {}, variables)

    @classmethod
    def of(cls, meta: Mapping[str, Any]) -> CheckpointDocument:
        """The typed form of a document held in memory in the dict form (the write side's, its light copies,
        tests' documents), taken as it is: the variables and the top-level fields unchecked (ckptio built them),
        the small records (layout, hints, stats, series) through their ``from_json``. A file's document goes
        through :meth:`from_json`."""
        if isinstance(meta, CheckpointDocument):
            return meta
        return cls._build(meta, {name: VariableRecord.of(var) for name, var in meta["variables"].items()})

    @classmethod
    def _build(cls, meta: Mapping[str, Any], variables: dict[str, VariableRecord]) -> CheckpointDocument:
        def record(key: str, parse: Callable[[Any], Any]) -> Any:
            value = meta.get(key)
            return None if value is None else parse(value)

        plain = bool(meta.get("plain"))
        return cls(meta["schema"], meta["backend"], meta["nprocs"], meta["checksum"], dict(meta["attrs"]), variables,
                   meta.get("ckptio_version"), meta.get("backend_format_version"), meta.get("created"),
                   meta.get("byteorder"), record("layout", LayoutRecord.from_json),
                   record("hints", HintsRecord.from_json), record("stats", StatsRecord.from_json),
                   record("series", SeriesRecord.from_json), plain,
                   string_keyed(meta.get("plain_skipped") or {}, "field 'plain_skipped'") if plain else {},
                   unknown_keys(meta, _DOCUMENT_KEYS))


# ------------------------------------------------------------------------------------ the dict form, for now
def as_document(meta: CheckpointDocument | Mapping[str, Any]) -> CheckpointDocument:
    """``meta`` as a :class:`CheckpointDocument`: itself, or the typed form of the in-memory dict form
    (:meth:`CheckpointDocument.of`). For functions that take a document from the write side, which still builds
    it as a dict."""
    return meta if isinstance(meta, CheckpointDocument) else CheckpointDocument.of(meta)


def variables_of(meta: CheckpointDocument | Mapping[str, Any]) -> Mapping[str, VariableRecord]:
    """The typed variables of a document or of the in-memory dict form (only its ``variables`` are looked at:
    the planners' tests hand over documents that have nothing else)."""
    if isinstance(meta, CheckpointDocument):
        return meta.variables
    return {name: VariableRecord.of(var) for name, var in meta["variables"].items()}


def stored_json(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The stored form of a document in the in-memory dict form, as it is (no checks): schema 2 (and later) puts
    the variables' blocks into the columnar ``variable_blocks`` entry; a document that says ``"schema": 1``
    keeps one object per block. A document already in its stored form passes unchanged. Gives the same JSON as
    :meth:`CheckpointDocument.to_json` of the same content (the formats checksum the text); variable entries may
    be :class:`VariableRecord` views (``{**doc, "schema": 1}`` of a typed document)."""
    if isinstance(meta, CheckpointDocument):
        return meta.to_json()
    variables = meta.get("variables")
    if isinstance(variables, dict) and meta.get("schema") == 1:
        return {**meta, "variables": {name: {**v, "blocks": [dict(b) for b in v["blocks"]]}
                                      if isinstance(v, Mapping) and "blocks" in v else v
                                      for name, v in variables.items()}}
    if isinstance(variables, dict) and "variable_blocks" not in meta:  # (also with no variables at all)
        return {**meta, "variable_blocks": block_table.encode(variables),
                "variables": {name: {k: x for k, x in v.items() if k != "blocks"} for name, v in variables.items()}}
    return dict(meta)


def light_dict(meta: Mapping[str, Any]) -> dict[str, Any]:
    """:meth:`CheckpointDocument.without_blocks` of the in-memory dict form, as a new dict (the write side adds
    to it)."""
    out = {k: v for k, v in meta.items() if k != "variables"}
    out["variables"] = {name: {**{k: v for k, v in var.items() if k != "blocks"}, "nblocks": len(var["blocks"])}
                        for name, var in meta["variables"].items()}
    return out
