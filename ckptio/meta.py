"""The checkpoint's metadata schema (versioned JSON, never pickle) and its checksums. No MPI here.

One metadata document describes a checkpoint in every backend. The native format stores it as the footer
index; HDF5 and PnetCDF store the same document (as JSON text) next to their own native structures, so
``ckptio inspect`` and the restart planner see every backend the same way.

Schema (``schema`` = :data:`SCHEMA_VERSION` = 2)::

    {"schema": 2, "ckptio_version": "...", "backend": "mpiio", "backend_format_version": 1,
     "created": "2026-11-23T10:00:00Z", "nprocs": 4, "byteorder": "little",
     "checksum": "xxh3_64", "attrs": {...},
     "layout": {"stripe_count": 4, "stripe_unit": 1048576,     # what ckptio chose (the hints)
                "fs": {...the layout the file system gave, see ckptio.fslayout; absent in older files}},
     "hints": {"requested": {...}, "effective": {...}, "io_component": "..."},
     "stats": {"write": {...}},
     "variables": {"dens": {"dtype": "<f8", "shape": [64, 16, 16, 16], "kind": "array",
                            "dims": ["block", "z", "y", "x"], "attrs": {"units": "g/cm**3"},
                            "storage": {...backend specific...}}},
     "variable_blocks": {...every variable's blocks as integer columns, see ckptio.block_table...}}

In memory (what :func:`loads` returns and :func:`dumps` takes) each variable has ``"blocks"``: a
:class:`ckptio.block_table.BlockTable` (rank, offset, shape, the xxh3-64 checksum as ``uint64``, file offset,
stored size, codec), which also reads as the list of schema-1 block objects. Schema 1 (ckptio before format
version 2) stored that list in the document, one JSON object per block::

    "blocks": [{"rank": 0, "offset": [0,0,0,0], "shape": [16,16,16,16], "checksum": "8f3a...",
                "file_offset": 4096, "stored_nbytes": 524288, "codec": null}]

Schema-1 documents are still read (:func:`loads` turns their lists into tables); :func:`dumps` writes schema 1
only for a document that says ``"schema": 1`` (tests of old files).

``dims`` and ``attrs`` of a variable are optional (schema 1 documents without them stay valid): ``dims`` names
each axis (:func:`variable_dims` gives ``<name>_d<i>`` when absent, the netCDF backend's names), one name meaning
one length across the whole checkpoint (:func:`shared_dim_lengths`); ``attrs`` are the variable's own
attributes (``units``, ``long_name``, ...), JSON values as the checkpoint's.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
import xxhash

from . import block_table
from .block_table import BlockTable
from .errors import DeclarationError, FormatVersionError
from .layout import Box, check_dtype, check_name, find_overlap, tiles_exactly

SCHEMA_VERSION = 2
CHECKSUM_ALGORITHM = "xxh3_64"
__version__ = "0.1.0"


def checksum(data: Any) -> str:
    """xxh3-64 of a contiguous buffer (any object exporting the buffer protocol), as 16 hex digits."""
    return xxhash.xxh3_64_hexdigest(memoryview(data).cast("B"))


def checksum_int(data: Any) -> int:
    """:func:`checksum` as an unsigned 64-bit integer (the columnar block tables' form)."""
    return xxhash.xxh3_64_intdigest(memoryview(data).cast("B"))


def array_checksum(array: np.ndarray) -> str:
    """Checksum of an array's elements in C order and native byte order (the stored block convention)."""
    arr = np.ascontiguousarray(array)
    if arr.dtype.byteorder not in ("=", "|") and arr.dtype.byteorder != _native_marker():
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return checksum(arr.reshape(-1).view(np.uint8)) if arr.size else checksum(b"")


class StreamingChecksum:
    """Checksum of a block fed in pieces (for blocks read in several rounds)."""

    def __init__(self) -> None:
        self._h = xxhash.xxh3_64()

    def update(self, data: Any) -> None:
        self._h.update(memoryview(data).cast("B"))

    def hexdigest(self) -> str:
        return self._h.hexdigest()

    def intdigest(self) -> int:
        return self._h.intdigest()


def _native_marker() -> str:
    return "<" if sys.byteorder == "little" else ">"


def jsonable_attr(key: str, value: Any) -> Any:
    """Convert an attribute value to plain JSON types (numpy scalars accepted), or raise DeclarationError."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, list | tuple):
        return [jsonable_attr(key, v) for v in value]
    if isinstance(value, np.ndarray) and value.ndim <= 1 and value.dtype.kind in "biuf":
        return [jsonable_attr(key, v) for v in value.tolist()]
    raise DeclarationError(
        f"attribute {key!r}: value of type {type(value).__name__} is not JSON-compatible "
        "(use numbers, strings, booleans, None or lists of them)"
    )


def normalize_attrs(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in (attrs or {}).items():
        if not isinstance(key, str) or not key or "/" in key:
            raise DeclarationError(f"attribute name {key!r} must be a non-empty string without '/'")
        out[key] = jsonable_attr(key, value)
    return out


def attrs_identical(a: Any, b: Any) -> bool:
    """Whether two normalized attribute values (or attribute dicts) are the same value as stored: same JSON
    types (``1``, ``1.0`` and ``True`` differ), floats bit-identical except that every NaN equals every NaN
    (``nan != nan`` would make a NaN attribute "differ" from itself), lists and dicts element by element."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a.hex() == b.hex()
    if isinstance(a, list):
        return len(a) == len(b) and all(attrs_identical(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(attrs_identical(a[k], b[k]) for k in a)
    return a == b


def dumps(meta: Mapping[str, Any]) -> bytes:
    """Serialize metadata deterministically (sorted keys, compact). Schema 2 (and later): the variables' blocks
    go into the columnar ``variable_blocks`` entry; a document that says ``"schema": 1`` keeps one object per
    block (as ckptio before schema 2 wrote it). A document already in its stored form passes unchanged."""
    variables = meta.get("variables")
    if isinstance(variables, dict) and meta.get("schema") == 1:
        meta = {**meta, "variables": {name: {**v, "blocks": [dict(b) for b in v["blocks"]]}
                                      if isinstance(v, dict) and "blocks" in v else v for name, v in variables.items()}}
    elif isinstance(variables, dict) and "variable_blocks" not in meta:  # (also with no variables at all)
        meta = {**meta, "variable_blocks": block_table.encode(variables),
                "variables": {name: {k: x for k, x in v.items() if k != "blocks"} for name, v in variables.items()}}
    return json.dumps(meta, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def loads(data: bytes | str) -> dict[str, Any]:
    """Parse metadata, refuse schema versions newer than this library understands (FormatVersionError), then
    check its structure (:func:`validate`; ValueError naming the field). Every variable's ``blocks`` is a
    :class:`~ckptio.block_table.BlockTable`, from either schema."""
    meta = json.loads(data)
    if not isinstance(meta, dict) or "schema" not in meta:
        raise ValueError("metadata is not a ckptio document")
    check_schema(meta)
    if meta["schema"] >= 2:
        variables = _dict(meta.get("variables"), "field 'variables'")
        for name, var in variables.items():
            if not isinstance(var, dict) or "blocks" in var:
                raise ValueError(f"variable {name!r}: the entry is not a schema-{meta['schema']} variable")
        if "variable_blocks" not in meta:
            raise ValueError("field 'variable_blocks' is missing")
        for name, table in block_table.decode(meta.pop("variable_blocks"), variables).items():
            variables[name]["blocks"] = table
    validate(meta)
    if meta["schema"] == 1:
        for var in meta["variables"].values():
            var["blocks"] = block_table.BlockTable.from_dicts(var["blocks"], len(var["shape"]))
    return meta


def without_blocks(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The document without its block tables (each variable says ``nblocks`` instead): what every rank holds of
    a checkpoint it writes or reads (the tables grow with the job; rank 0 and the restart aggregators hold them)."""
    out = {k: v for k, v in meta.items() if k != "variables"}
    out["variables"] = {name: {**{k: v for k, v in var.items() if k != "blocks"}, "nblocks": len(var["blocks"])}
                        for name, var in meta["variables"].items()}
    return out


def check_schema(meta: Mapping[str, Any]) -> None:
    version = meta.get("schema")
    if not isinstance(version, int) or version > SCHEMA_VERSION or version < 1:
        raise FormatVersionError(
            f"checkpoint metadata schema version {version} is not supported by ckptio {__version__} "
            f"(supports schema 1..{SCHEMA_VERSION})"
        )


def variable_nbytes(var: Mapping[str, Any]) -> int:
    return math.prod(var["shape"]) * np.dtype(var["dtype"]).itemsize


def stored_nbytes(var: Mapping[str, Any]) -> int:
    return block_table.stored_nbytes(var["blocks"])


# ------------------------------------------------------------------------------------------ validation
MAX_NBYTES = 2**63 - 1  # no file holds more: a larger variable is a damaged document
_CHECKSUM_RE = re.compile(r"^[0-9a-f]{16}$")
_CODEC_RE = re.compile(r"^(zstd|zstd\+shuffle)(:-?[0-9]+)?$")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _nonneg_int(value: Any, what: str, minimum: int = 0) -> int:
    if not _is_int(value) or not minimum <= value <= MAX_NBYTES:
        raise ValueError(f"{what} is {value!r}, expected an integer >= {minimum}")
    return value


def _int_list(value: Any, what: str, ndim: int | None = None, minimum: int | None = 0) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(_is_int(v) and abs(v) <= MAX_NBYTES for v in value):
        raise ValueError(f"{what} is {value!r}, expected a list of integers")
    if ndim is not None and len(value) != ndim:
        raise ValueError(f"{what} has {len(value)} dimensions, expected {ndim}")
    if minimum is not None and any(v < minimum for v in value):
        raise ValueError(f"{what} is {value!r}, expected integers >= {minimum}")
    return tuple(value)


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} is {type(value).__name__}, expected an object")
    return value


def validate(meta: Mapping[str, Any]) -> None:
    """Check the structure of a parsed document (of a supported schema); raise ValueError naming the field.

    Every field ckptio reads from a checkpoint has the type and range it relies on, and each variable's
    blocks tile its global shape exactly (inside it, disjoint, covering it; segments laid end to end in rank
    order), so that a document that passes can be planned, read and verified without a TypeError, KeyError or
    IndexError anywhere downstream: a damaged document whose checksum is intact (or that was written by a
    broken tool) is a :class:`~ckptio.CorruptCheckpointError` for the backends, never a crash. Backends add
    their format's own checks (file offsets inside the data region, datasets present, ...).
    """
    for key in ("backend", "nprocs", "attrs", "variables", "checksum"):
        if key not in meta:
            raise ValueError(f"field {key!r} is missing")
    if not isinstance(meta["backend"], str) or not meta["backend"]:
        raise ValueError(f"field 'backend' is {meta['backend']!r}, expected a backend name")
    if meta["checksum"] != CHECKSUM_ALGORITHM:
        raise ValueError(f"field 'checksum' is {meta['checksum']!r}, expected {CHECKSUM_ALGORITHM!r}")
    nprocs = _nonneg_int(meta["nprocs"], "field 'nprocs'", minimum=1)
    _dict(meta["attrs"], "field 'attrs'")
    for key in ("hints", "stats"):
        if key in meta:
            _dict(meta[key], f"field {key!r}")
    for key in ("ckptio_version", "created", "byteorder"):
        if key in meta and not isinstance(meta[key], str):
            raise ValueError(f"field {key!r} is {meta[key]!r}, expected a string")
    if "backend_format_version" in meta:
        _nonneg_int(meta["backend_format_version"], "field 'backend_format_version'", minimum=1)
    if "layout" in meta:
        layout = _dict(meta["layout"], "field 'layout'")
        for key in ("stripe_count", "stripe_unit"):
            if key in layout:
                _nonneg_int(layout[key], f"layout {key!r}", minimum=1)
        if "fs" in layout:  # what the file system gave (ckptio.fslayout); absent in older files
            from .fslayout import check_record

            check_record(layout["fs"])
    for name, var in _dict(meta["variables"], "field 'variables'").items():
        try:
            _validate_variable(name, var, nprocs)
        except ValueError as exc:
            raise ValueError(f"variable {name!r}: {exc}") from None
    shared_dim_lengths(meta["variables"])


def _validate_variable(name: str, var: Any, nprocs: int) -> None:
    try:
        check_name(name)
    except DeclarationError as exc:
        raise ValueError(str(exc)) from None
    var = _dict(var, "the entry")
    for key in ("dtype", "shape", "kind", "blocks"):
        if key not in var:
            raise ValueError(f"field {key!r} is missing")
    try:
        dtype = check_dtype(name, np.dtype(var["dtype"])) if isinstance(var["dtype"], str) else None
    except (TypeError, ValueError, DeclarationError):
        dtype = None
    if dtype is None:
        raise ValueError(f"dtype {var['dtype']!r} is not a supported numpy dtype")
    shape = _int_list(var["shape"], "shape")
    if math.prod(shape) * dtype.itemsize > MAX_NBYTES:
        raise ValueError(f"shape {list(shape)} is impossibly large")
    if var["kind"] not in ("array", "segment"):
        raise ValueError(f"kind {var['kind']!r} is neither 'array' nor 'segment'")
    if var["kind"] == "segment" and not shape:
        raise ValueError("a per-rank segment variable has shape [], expected at least one dimension")
    if "dims" in var:
        check_dims(var["dims"], len(shape))
    if "attrs" in var:
        _validate_attrs(_dict(var["attrs"], "attrs"))
    if "storage" in var:
        storage = _dict(var["storage"], "storage")
        if storage.get("file_offset") is not None:
            _nonneg_int(storage["file_offset"], "storage file_offset")
        if "file_dtype" in storage:
            try:
                file_dtype = np.dtype(storage["file_dtype"]) if isinstance(storage["file_dtype"], str) else None
            except TypeError:
                file_dtype = None
            if file_dtype is None or (file_dtype.kind, file_dtype.itemsize) != (dtype.kind, dtype.itemsize):
                raise ValueError(f"storage file_dtype {storage['file_dtype']!r} does not store dtype {dtype.str}")
    if isinstance(var["blocks"], BlockTable):
        if _table_valid_fast(var["blocks"], shape, nprocs, var["kind"] == "segment"):
            return
    elif not isinstance(var["blocks"], list):
        raise ValueError("blocks is not a list")
    elif _blocks_valid_fast(var["blocks"], shape, nprocs, var["kind"] == "segment"):
        return
    # a problem somewhere (or a structure the fast path does not decide): find and name it block by block
    boxes: list[tuple[int, Box]] = []
    for i, b in enumerate(var["blocks"]):
        b = _dict(b, f"block {i}")
        for key in ("rank", "offset", "shape", "checksum"):
            if key not in b:
                raise ValueError(f"block {i}: field {key!r} is missing")
        rank = _nonneg_int(b["rank"], f"block {i} rank")
        if rank >= nprocs:
            raise ValueError(f"block {i} was written by rank {rank} of a {nprocs}-rank job")
        box = Box(_int_list(b["offset"], f"block {i} offset", len(shape)),
                  _int_list(b["shape"], f"block {i} shape", len(shape)))
        if not isinstance(b["checksum"], str) or not _CHECKSUM_RE.match(b["checksum"]):
            raise ValueError(f"block {i} checksum {b['checksum']!r} is not {CHECKSUM_ALGORITHM} hex digits")
        if b.get("file_offset") is not None:
            _nonneg_int(b["file_offset"], f"block {i} file_offset")
        if "stored_nbytes" in b:
            _nonneg_int(b["stored_nbytes"], f"block {i} stored_nbytes")
        codec = b.get("codec")
        if codec is not None and (not isinstance(codec, str) or not _CODEC_RE.match(codec)):
            raise ValueError(f"block {i} codec {codec!r} is unknown")
        boxes.append((rank, box))
    _check_tiling(shape, boxes, var["kind"] == "segment")


_HEX = re.compile(r"[0-9a-f]*")


def _blocks_valid_fast(blocks: list[Any], shape: tuple[int, ...], nprocs: int, segments: bool) -> bool:
    """True if every block of a variable is well-formed and the blocks tile ``shape``: the checks of the block
    loop in :func:`_validate_variable` and :func:`_check_tiling`, as a few passes of C-speed comprehensions and
    numpy (183,000 blocks: ~0.3 s instead of ~4 s). False means "not proven valid": the caller then runs the
    block-by-block checks, which name the problem. Never raises."""
    try:
        return _tiles_exactly(blocks, shape, nprocs, segments)
    except (TypeError, ValueError, OverflowError):  # unhashable, ragged or huge values: decided block by block
        return False


def _tiles_exactly(blocks: list[Any], shape: tuple[int, ...], nprocs: int, segments: bool) -> bool:
    """The body of :func:`_blocks_valid_fast` (may raise on odd values)."""
    nd = len(shape)
    try:
        if not set(map(type, blocks)) <= {dict}:
            return False
        ranks = [b["rank"] for b in blocks]
        offsets = [b["offset"] for b in blocks]
        shapes = [b["shape"] for b in blocks]
        sums = [b["checksum"] for b in blocks]
    except KeyError:
        return False
    file_offsets = [b["file_offset"] for b in blocks if b.get("file_offset") is not None]
    stored = [b["stored_nbytes"] for b in blocks if "stored_nbytes" in b]
    codecs = {b.get("codec") for b in blocks}
    if not set(map(type, sums)) <= {str} or set(map(len, sums)) - {16} or not _HEX.fullmatch("".join(sums)):
        return False
    if not all(c is None or (type(c) is str and _CODEC_RE.match(c)) for c in codecs):
        return False
    if not set(map(type, offsets)) | set(map(type, shapes)) <= {list} or \
            (set(map(len, offsets)) | set(map(len, shapes))) - {nd}:
        return False
    flat = itertools.chain(ranks, file_offsets, stored, itertools.chain.from_iterable(offsets),
                           itertools.chain.from_iterable(shapes))
    if not set(map(type, flat)) <= {int}:  # not bool, not float (map and set run at C speed)
        return False
    rank = np.array(ranks, np.int64)
    lo = np.array(offsets, np.int64).reshape(len(blocks), nd)
    size = np.array(shapes, np.int64).reshape(len(blocks), nd)
    scalars = np.array(file_offsets + stored, np.int64)
    return bool((scalars >= 0).all()) and tiles_exactly(rank, lo, size, shape, nprocs, segments)


def _table_valid_fast(table: BlockTable, shape: tuple[int, ...], nprocs: int, segments: bool) -> bool:
    """:func:`_blocks_valid_fast` for the columns of a :class:`BlockTable` (schema 2: the types are given;
    ranges, codecs and the tiling are checked). False: not proven valid (the block loop names the problem)."""
    if table.ndim != len(shape) or any(not isinstance(c, str) or not _CODEC_RE.match(c) for c in table.codecs):
        return False
    if (table.file_offset < -1).any() or (table.stored_nbytes < 0).any():
        return False
    try:
        return tiles_exactly(table.rank, table.offset, table.shape, shape, nprocs, segments)
    except (TypeError, ValueError, OverflowError):
        return False


def _check_tiling(shape: tuple[int, ...], boxes: list[tuple[int, Box]], segments: bool) -> None:
    """The blocks lie inside ``shape``, do not overlap and cover it (segments: whole rows, end to end in rank
    order)."""
    for i, (_, box) in enumerate(boxes):
        if not box.within(shape):
            raise ValueError(f"block {i} (offset {list(box.offset)}, shape {list(box.shape)}) lies outside the "
                             f"global shape {list(shape)}")
    if segments:
        pos, last_rank = 0, -1
        for i, (rank, box) in enumerate(boxes):
            if any(box.offset[1:]) or box.shape[1:] != tuple(shape[1:]):
                raise ValueError(f"segment block {i} (rank {rank}, offset {list(box.offset)}, shape "
                                 f"{list(box.shape)}) does not hold whole rows of shape {list(shape[1:])}")
            if rank <= last_rank or box.offset[0] != pos:
                raise ValueError(f"segment block {i} (rank {rank}, offset {box.offset[0]}) is out of order")
            pos, last_rank = box.end[0], rank
        if pos != shape[0]:
            raise ValueError(f"segments cover {pos} of {shape[0]} rows")
        return
    pair = find_overlap(boxes)
    if pair is not None:
        raise ValueError(f"blocks {pair[0]} and {pair[1]} overlap")
    covered, total = sum(box.size for _, box in boxes), math.prod(shape)
    if covered != total:
        raise ValueError(f"blocks cover {covered} of {total} elements of the global shape {list(shape)}")


# ------------------------------------------------------------------------------ per-variable dims and attrs
# Attribute names the HDF5 dimension-scale API and netCDF-4 manage themselves on a dataset (a user value would
# break the dimensions every HDF5/netCDF reader sees). Names starting with "_" are netCDF's (``_FillValue``
# changes how readers decode the data, and must have the variable's type): refused as well.
RESERVED_VARIABLE_ATTRS = frozenset({"CLASS", "NAME", "DIMENSION_LIST", "REFERENCE_LIST", "DIMENSION_LABELS"})


def default_dims(name: str, ndim: int) -> list[str]:
    """The dimension names of a variable declared without ``dims``: ``<name>_d0``, ``<name>_d1``, ..."""
    return [f"{name}_d{i}" for i in range(ndim)]


def variable_dims(name: str, var: Mapping[str, Any]) -> tuple[str, ...]:
    """The dimension names of variable ``name`` of a (validated) document: declared, or the defaults."""
    return tuple(var.get("dims") or default_dims(name, len(var["shape"])))


def check_dim_name(dim: Any) -> str:
    """A dimension name follows the variable-name rules (portable to HDF5 and netCDF); DeclarationError (a
    ValueError) otherwise."""
    try:
        return check_name(dim)
    except DeclarationError as exc:
        raise DeclarationError(str(exc).replace("variable name", "dimension name", 1)) from None


def check_dims(dims: Any, ndim: int) -> list[str]:
    """``dims`` as stored: a list of ``ndim`` distinct dimension names (DeclarationError otherwise)."""
    if isinstance(dims, str | bytes) or not isinstance(dims, list | tuple):
        raise DeclarationError(f"dims {dims!r} must be a sequence of dimension names (one per axis)")
    if len(dims) != ndim:
        raise DeclarationError(f"dims {list(dims)} name {len(dims)} axes, but the variable has {ndim}")
    for dim in dims:
        check_dim_name(dim)
    if len(set(dims)) != len(dims):
        raise DeclarationError(f"dims {list(dims)} name one dimension twice (each axis needs its own dimension)")
    return list(dims)


def check_variable_attr_name(key: Any) -> None:
    """DeclarationError if ``key`` cannot be a variable attribute's name in every format."""
    if not isinstance(key, str) or not key or "/" in key:
        raise DeclarationError(f"attribute name {key!r} must be a non-empty string without '/'")
    if key in RESERVED_VARIABLE_ATTRS or key.startswith("_"):
        raise DeclarationError(f"attribute name {key!r} is reserved (HDF5 dimension scales use CLASS, NAME, "
                               "DIMENSION_LIST, REFERENCE_LIST and DIMENSION_LABELS; netCDF names starting with '_')")


def _validate_attrs(attrs: Mapping[str, Any]) -> None:
    for key, value in attrs.items():
        check_variable_attr_name(key)
        if not attrs_identical(jsonable_attr(key, value), value):  # plain JSON types, as normalize_attrs stores
            raise ValueError(f"attribute {key!r} is {value!r}, not a stored attribute value")


def shared_dim_lengths(variables: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Every dimension name of ``variables`` (name -> entry with ``shape`` and optional ``dims``; defaults
    count) with its length. DeclarationError (a ValueError) naming both variables when one name has two
    lengths: a dimension is shared, so HDF5 and netCDF files hold it once."""
    lengths: dict[str, tuple[int, str]] = {}
    for name, var in variables.items():
        for dim, n in zip(variable_dims(name, var), var["shape"], strict=True):
            first = lengths.setdefault(dim, (n, name))
            if first[0] != n:
                raise DeclarationError(f"dimension {dim!r} has length {first[0]} in variable {first[1]!r} but {n} in "
                                       f"variable {name!r}; a dimension name means one length in a checkpoint")
    return {dim: n for dim, (n, _) in lengths.items()}
