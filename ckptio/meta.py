"""The checkpoint's metadata schema (versioned JSON, never pickle) and its checksums. No MPI here.

One metadata document describes a checkpoint in every backend. The native format stores it as the footer
index; HDF5 and PnetCDF store the same document (as JSON text) next to their own native structures, so
``ckptio inspect`` and the restart planner see every backend the same way.

Schema (``schema`` = :data:`SCHEMA_VERSION`)::

    {"schema": 1, "ckptio_version": "...", "backend": "mpiio", "backend_format_version": 1,
     "created": "2026-11-23T10:00:00Z", "nprocs": 4, "byteorder": "little",
     "checksum": "xxh3_64", "attrs": {...},
     "layout": {"stripe_count": 4, "stripe_unit": 1048576},
     "hints": {"requested": {...}, "effective": {...}, "io_component": "..."},
     "stats": {"write": {...}},
     "variables": {"dens": {"dtype": "<f8", "shape": [64, 16, 16, 16], "kind": "array",
                            "storage": {...backend specific...},
                            "blocks": [{"rank": 0, "offset": [0,0,0,0], "shape": [16,16,16,16],
                                        "checksum": "8f3a...", "file_offset": 4096, "stored_nbytes": 524288,
                                        "codec": null}]}}}
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
import xxhash

from .errors import DeclarationError, FormatVersionError

SCHEMA_VERSION = 1
CHECKSUM_ALGORITHM = "xxh3_64"
__version__ = "0.1.0"


def checksum(data: Any) -> str:
    """xxh3-64 of a contiguous buffer (any object exporting the buffer protocol), as 16 hex digits."""
    return xxhash.xxh3_64_hexdigest(memoryview(data).cast("B"))


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


def dumps(meta: Mapping[str, Any]) -> bytes:
    """Serialize metadata deterministically (sorted keys, compact)."""
    return json.dumps(meta, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def loads(data: bytes | str) -> dict[str, Any]:
    """Parse metadata and refuse schema versions newer than this library understands."""
    meta = json.loads(data)
    if not isinstance(meta, dict) or "schema" not in meta:
        raise ValueError("metadata is not a ckptio document")
    check_schema(meta)
    return meta


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
    return sum(int(b.get("stored_nbytes", 0)) for b in var["blocks"])
