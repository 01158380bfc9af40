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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ckptio.errors import FormatVersionError
from ckptio.model import block_table
from ckptio.model.fs_layout_record import FsLayoutRecord
from ckptio.model.joined_blocks import JoinedBlocks
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
from ckptio.model.variable_record import _ABSENT, VariableRecord, _JsonView

SCHEMA_VERSION = 2
CKPTIO_VERSION = "0.1.0"
NO_CHECKSUM = "none"  # the ``checksum`` of a plain HDF5/netCDF file's document (ckptio.model.plain): nothing to verify

__all__ = ["CHECKSUM_ALGORITHM", "CKPTIO_VERSION", "NO_CHECKSUM", "SCHEMA_VERSION", "CheckpointDocument",
           "FsLayoutRecord", "HintsRecord", "LayoutRecord", "SeriesRecord", "StatsRecord", "StorageRecord",
           "VariableRecord", "WriteStatsRecord", "as_document", "check_schema", "light_dict", "stored_json",
           "variables_of"]

def check_schema(meta: Mapping[str, Any]) -> None:
    """FormatVersionError unless ``meta["schema"]`` is a schema version this ckptio reads (1 ..
    :data:`SCHEMA_VERSION`)."""
    version = meta.get("schema")
    if not isinstance(version, int) or version > SCHEMA_VERSION or version < 1:
        raise FormatVersionError(
            f"checkpoint metadata schema version {version} is not supported by ckptio {CKPTIO_VERSION} "
            f"(supports schema 1..{SCHEMA_VERSION})"
        )


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

    def joined_blocks(self, ndim: int | None = None) -> JoinedBlocks:
        """Every variable's block table joined into one set of columns, variables in document order, ``lo`` and
        ``shape`` padded to ``ndim`` columns (default: the most dimensions of any variable); not for a light
        copy. Checks over all blocks of a checkpoint as a few numpy calls, not a loop over its variables. Made
        once per ``ndim`` and kept (the open's format check and its extent table both join the same tables;
        the columns are read-only, and a pickled document leaves them out) for as long as the document holds
        the same tables under the same names in the same order (:meth:`_kept`)."""
        ndims = [len(v.shape) for v in self.variables.values()]
        ndim = max(ndims, default=0) if ndim is None else ndim
        joined = self._kept(ndim)
        if joined is None:
            joined = JoinedBlocks.of([v.block_table() for v in self.variables.values()], ndims, ndim)
            self._keep(joined, ndim)
        return joined

    def keep_joined_blocks(self, joined: JoinedBlocks) -> None:
        """Local: keep ``joined``, which must be this document's block tables joined in document order (as
        :meth:`joined_blocks` would make them, padded to the most dimensions of any variable), as what
        :meth:`joined_blocks` gives: for the code that had the joined columns before the tables (the decoder, the
        write side's index), so they are not joined again. ValueError when it does not have one count per
        variable."""
        if len(joined.counts) != len(self.variables):
            raise ValueError(f"joined blocks of {len(joined.counts)} variables kept for a document of "
                             f"{len(self.variables)}")
        self._keep(joined, int(joined.lo.shape[1]))

    def _keep(self, joined: JoinedBlocks, ndim: int) -> None:
        """Local: keep ``joined`` (read-only) with what it was made of: every variable's name and table object."""
        for column in vars(joined).values():
            column.setflags(write=False)
        made_of = [(name, v.blocks) for name, v in self.variables.items()]
        self.__dict__.setdefault("_joined", {})[ndim] = (made_of, joined)

    def _kept(self, ndim: int) -> JoinedBlocks | None:
        """Local: the kept columns of ``ndim`` dimensions, or None when there are none or when the variables
        changed since (``variables`` is a dict: a variable added, removed, renamed, reordered or given another
        table). Whether the tables are the same objects, one step per variable; their arrays are not compared
        (the decoder's are read-only, the write side's are the plan's, which nothing changes)."""
        kept = self.__dict__.get("_joined", {}).get(ndim)
        if kept is None:
            return None
        made_of, joined = kept
        if len(made_of) != len(self.variables) or not all(
                name == was and v.blocks is table
                for (name, v), (was, table) in zip(self.variables.items(), made_of, strict=True)):
            del self.__dict__["_joined"][ndim]
            return None
        return joined

    def __getstate__(self) -> dict[str, Any]:
        """What pickling keeps: the fields, not the joined columns :meth:`joined_blocks` kept."""
        return {k: v for k, v in self.__dict__.items() if k != "_joined"}

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
        joined = None
        if meta["schema"] >= 2:
            variables = {name: dict(var) if isinstance(var, dict) else var
                         for name, var in json_object(meta.get("variables"), "field 'variables'").items()}
            for name, var in variables.items():
                if not isinstance(var, dict) or "blocks" in var:
                    raise ValueError(f"variable {name!r}: the entry is not a schema-{meta['schema']} variable")
            if "variable_blocks" not in meta:
                raise ValueError("field 'variable_blocks' is missing")
            tables, joined = block_table.decode_joined(meta.pop("variable_blocks"), variables)
            for name, table in tables.items():
                variables[name]["blocks"] = table
            meta["variables"] = variables
            if list(tables) != list(variables):  # (the columns list the variables in another order than the JSON)
                joined = None
        validate(meta, joined)
        document = cls._build(meta, {name: VariableRecord.of(var) for name, var in meta["variables"].items()})
        if joined is not None:
            document.keep_joined_blocks(joined)
        return document

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
            out["variable_blocks"] = self._encoded_blocks()
        out["variables"] = entries
        return out

    def _encoded_blocks(self) -> dict[str, Any]:
        """The ``variable_blocks`` entry: from the joined columns where they are kept and nothing is compressed
        (the same entry, without joining every table again), else from the tables."""
        tables = {n: v._table() for n, v in self.variables.items()}
        ndims = [len(v.shape) for v in self.variables.values()]
        joined = self._kept(max(ndims, default=0))
        if joined is None or any(t.codecs for t in tables.values()) or (joined.codec.size and joined.codec.max() >= 0):
            return block_table.encode_tables(tables)
        return block_table.encode_joined(list(tables), joined, ndims)

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
