"""The structural checks of a parsed metadata document (of a supported schema), in its in-memory dict form:
what :meth:`ckptio.model.document.CheckpointDocument.from_json` runs before it builds the typed records. Pure: no
MPI, no files.

Every field ckptio reads from a checkpoint has the type and range it relies on, and each variable's blocks tile
its global shape exactly (inside it, disjoint, covering it; segments laid end to end in rank order), so that a
document that passes can be planned, read and verified without a TypeError, KeyError or IndexError anywhere
downstream: a damaged document whose checksum is intact (or that was written by a broken tool) is a
:class:`~ckptio.CorruptCheckpointError` for the backends, never a crash. The block checks run as a few numpy
passes over the columns (or over schema 1's lists); only a document they cannot prove valid is checked block by
block, which names the problem (``tests/test_meta_validate_fast.py``: both give the same verdict and message).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ckptio.errors import DeclarationError
from ckptio.model.block_table import BlockTable
from ckptio.model.dims_attrs import check_dims, check_shared_dim_lengths, check_stored_variable_attrs
from ckptio.model.fs_layout_record import FsLayoutRecord
from ckptio.model.joined_blocks import JoinedBlocks, own_dimensions
from ckptio.model.layout import Box, check_dtype, check_name, find_overlap, tiles_exactly

CHECKSUM_ALGORITHM = "xxh3_64"

MAX_NBYTES = 2**63 - 1  # no file holds more: a larger variable is a damaged document
CHECKSUM_RE = re.compile(r"^[0-9a-f]{16}$")  # a block checksum: xxh3-64, 16 lowercase hex digits
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


def validate(meta: Mapping[str, Any], joined: JoinedBlocks | None = None) -> None:
    """Check the structure of a parsed document (of a supported schema); raise ValueError naming the field.
    ``joined``: the variables' block tables joined in document order, where the caller has them (the decoder):
    the tables of one block are then checked for all variables at once (:func:`_one_block_tables_valid`).

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
        if "fs" in layout:  # what the file system gave (ckptio.engine.fslayout); absent in older files
            FsLayoutRecord.from_json(layout["fs"])
    variables = _dict(meta["variables"], "field 'variables'")
    proven = _one_block_tables_valid(variables, joined, nprocs) if joined is not None else [False] * len(variables)
    for (name, var), table_proven in zip(variables.items(), proven, strict=True):
        try:
            _validate_variable(name, var, nprocs, table_proven)
        except ValueError as exc:
            raise ValueError(f"variable {name!r}: {exc}") from None
    check_shared_dim_lengths(meta["variables"])


def _one_block_tables_valid(variables: Mapping[str, Any], joined: JoinedBlocks, nprocs: int) -> list[bool]:
    """For each variable (in document order, ``joined`` its tables joined in that order): whether its table is
    one block that :func:`_table_valid_fast` accepts (the whole array, written by a rank of the job, a file
    offset and a stored size in range, the codecs known), decided for all variables at once. False: not proven
    here (the variable's own check decides). The entries' other fields are still checked one by one; a shape
    that is not a list of integers is never proven."""
    counts = joined.counts
    if len(counts) != len(variables) or any(not isinstance(c, str) or not _CODEC_RE.match(c)
                                            for c in _codecs_of(variables)):
        return [False] * len(variables)
    shapes = [v.get("shape") if isinstance(v, dict) else None for v in variables.values()]
    simple = [type(s) is list and all(type(x) is int for x in s) for s in shapes]
    one = (counts == 1) & np.array(simple, bool)
    pick = np.flatnonzero(one)
    if not len(pick):
        return [False] * len(variables)
    rows = joined.starts[pick]
    ndims = np.fromiter((len(shapes[i]) for i in pick.tolist()), np.int64, len(pick))
    if (ndims > joined.lo.shape[1]).any():
        return [False] * len(variables)
    try:
        flat = np.fromiter(itertools.chain.from_iterable(shapes[i] for i in pick.tolist()), np.int64)
    except OverflowError:  # (an impossibly large extent: the variable's own check names it)
        return [False] * len(variables)
    whole = np.ones((len(pick), joined.lo.shape[1]), np.int64)
    whole[own_dimensions(ndims, joined.lo.shape[1])] = flat
    rank = joined.rank[rows]
    ok = ((rank >= 0) & (rank < nprocs) & (joined.file_offset[rows] >= -1) & (joined.stored_nbytes[rows] >= 0)
          & ~joined.lo[rows].any(axis=1) & (joined.shape[rows] == whole).all(axis=1))
    proven = np.zeros(len(variables), bool)
    proven[pick] = ok
    return proven.tolist()


def _codecs_of(variables: Mapping[str, Any]) -> list[Any]:
    """The codec names the variables' tables list: the first table's, which is every table's because the decoder
    gives every table the document's one list (the only caller that passes ``joined`` to :func:`validate`; tables
    with lists of their own, as the write side makes them, must not be checked this way)."""
    first = next(iter(variables.values()), None)
    table = first.get("blocks") if isinstance(first, dict) else None
    return list(table.codecs) if isinstance(table, BlockTable) else []


def _validate_variable(name: str, var: Any, nprocs: int, table_proven: bool = False) -> None:
    try:
        check_name(name)
    except DeclarationError as exc:
        raise ValueError(str(exc)) from None
    var = _dict(var, "the entry")
    for key in ("dtype", "shape", "kind", "blocks"):
        if key not in var:
            raise ValueError(f"field {key!r} is missing")
    dtype = _stored_dtype(name, var["dtype"])
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
        check_stored_variable_attrs(_dict(var["attrs"], "attrs"))
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
        if table_proven or _table_valid_fast(var["blocks"], shape, nprocs, var["kind"] == "segment"):
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
        if not isinstance(b["checksum"], str) or not CHECKSUM_RE.match(b["checksum"]):
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


_SUPPORTED: dict[str, np.dtype] = {}  # dtype strings found supported (one per distinct dtype of a document)


def _stored_dtype(name: str, text: Any) -> np.dtype | None:
    """The numpy dtype of a variable's stored ``dtype`` string, or None if it is none ckptio supports."""
    found = _SUPPORTED.get(text) if isinstance(text, str) else None
    if found is not None:
        return found
    try:
        dtype = check_dtype(name, np.dtype(text)) if isinstance(text, str) else None
    except (TypeError, ValueError, DeclarationError):
        return None
    if dtype is not None:
        _SUPPORTED[text] = dtype
    return dtype


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
    if len(table) == 1:  # (a small variable, thousands per document: scalars, not two numpy reductions)
        if int(table.file_offset[0]) < -1 or int(table.stored_nbytes[0]) < 0:
            return False
    elif (table.file_offset < -1).any() or (table.stored_nbytes < 0).any():
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
