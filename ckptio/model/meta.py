"""The metadata document's stored text (versioned JSON, never pickle) and the block checksums. No MPI here.

The document itself, typed, its schema and its checks are :mod:`ckptio.model.document`; this module turns it into
the text every format stores (and checksums) and back:

* :func:`dumps` writes sorted keys, compact separators: the same content always gives the same bytes (the native
  format stores the text's xxh3-64, HDF5 and PnetCDF their own checksum of it);
* :func:`loads` parses it into a :class:`~ckptio.model.document.CheckpointDocument` (a newer schema is a
  FormatVersionError, a damaged structure a ValueError naming the field).

During the transition of issue 24 the write side still builds its document as a dict (the in-memory form: each
variable's ``"blocks"`` a BlockTable); :func:`dumps` and :func:`without_blocks` take that too, unchanged. The
names re-exported below are for the modules that have not yet moved to :mod:`ckptio.model` (the writer, the
reader, the backends).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
import xxhash

from ckptio.errors import CorruptCheckpointError, FormatVersionError
from ckptio.model.dims_attrs import (
    RESERVED_VARIABLE_ATTRS,
    attrs_identical,
    check_dim_name,
    check_dims,
    check_variable_attr_name,
    default_dims,
    jsonable_attr,
    normalize_attrs,
    numeric_list_array,
    shared_dim_lengths,
    variable_dims,
    variable_nbytes,
)
from ckptio.model.document import (
    CHECKSUM_ALGORITHM,
    CKPTIO_VERSION,
    SCHEMA_VERSION,
    CheckpointDocument,
    check_schema,
    light_dict,
    stored_json,
)
from ckptio.model.schema_checks import validate

__version__ = CKPTIO_VERSION

__all__ = ["CHECKSUM_ALGORITHM", "RESERVED_VARIABLE_ATTRS", "SCHEMA_VERSION", "StreamingChecksum", "__version__",
           "array_checksum", "attrs_identical", "check_dim_name", "check_dims", "check_schema",
           "check_variable_attr_name", "checksum", "checksum_int", "default_dims", "dumps", "jsonable_attr", "loads",
           "normalize_attrs", "numeric_list_array", "shared_dim_lengths", "validate", "variable_dims",
           "variable_nbytes", "without_blocks"]


# ------------------------------------------------------------------------------------------------ checksums
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


# ---------------------------------------------------------------------------------------------- stored text
def dumps(meta: CheckpointDocument | Mapping[str, Any]) -> bytes:
    """The stored text of a document (sorted keys, compact): :meth:`CheckpointDocument.to_json`, or for the
    in-memory dict form :func:`ckptio.model.document.stored_json` (the same bytes for the same content)."""
    obj = meta.to_json() if isinstance(meta, CheckpointDocument) else stored_json(meta)
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def loads(data: bytes | str) -> CheckpointDocument:
    """Parse stored text into the typed document (:meth:`CheckpointDocument.from_json`: FormatVersionError for a
    newer schema, ValueError naming the field for a damaged one). Every variable's blocks are a
    :class:`~ckptio.model.block_table.BlockTable`, from either schema."""
    return CheckpointDocument.from_json(json.loads(data))


def loads_listing(data: bytes | str) -> CheckpointDocument:
    """Stored text parsed only as far as :meth:`CheckpointDocument.listed` takes it (the variables' dtypes, shapes
    and storage; no blocks, no checks): for a caller that compares the bytes with its own right after. ValueError
    (or KeyError, TypeError) for text that is not a document of that shape."""
    return CheckpointDocument.listed(json.loads(data))


def loads_stored(data: bytes | str, path: str, what: str) -> CheckpointDocument:
    """:func:`loads` of a document a backend read from the file ``path``: a damaged one is CorruptCheckpointError
    naming the file and ``what`` it is (the index, a dataset, a variable); FormatVersionError (a newer schema)
    passes as it is. Local."""
    try:
        return loads(data)
    except FormatVersionError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptCheckpointError(f"{path}: {what} is not valid metadata ({exc})") from None


def without_blocks(meta: CheckpointDocument | Mapping[str, Any]) -> CheckpointDocument | dict[str, Any]:
    """The light copy (no block tables; each variable's ``nblocks``): :meth:`CheckpointDocument.without_blocks`,
    or for the write side's dict a new dict (:func:`ckptio.model.document.light_dict`)."""
    return meta.without_blocks() if isinstance(meta, CheckpointDocument) else light_dict(meta)
