"""A variable's writer blocks as typed columns: the in-memory form of every checkpoint's block list, and its
encoding in the metadata document of schema 2. Pure: no MPI, no files.

Schema 1 stored one JSON object per block (``{"rank": 0, "offset": [...], "shape": [...], "checksum": "8f3a...",
"file_offset": 4096, "stored_nbytes": 524288, "codec": null}``): 183,000 of them at 7,620 ranks, 2.4 million at
100,000, so parsing the document alone took rank 0 tens of seconds and gigabytes. Schema 2 stores the blocks of
all variables as a handful of integer columns (:func:`encode`), and :func:`decode` turns them back into one
:class:`BlockTable` per variable without a Python object per block.

A :class:`BlockTable` still reads like the schema-1 list (``len(blocks)``, ``blocks[i]["checksum"]`` as 16 hex
digits, iteration yields the same dicts), so code that looks at a few blocks needs no change; code that looks at
all of them uses the columns (:attr:`rank`, :attr:`offset`, :attr:`shape`, :attr:`checksum` as ``uint64``,
:attr:`file_offset` and :attr:`codec` with -1 for "none", :attr:`stored_nbytes`).

On disk (``"variable_blocks"`` in the document; every column little-endian, narrowed to the smallest integer type
that holds its values, zlib-compressed, base64 text so the document stays JSON in every format)::

    {"encoding": 1, "variables": ["dens", "pres"], "counts": [4, 4], "codecs": ["zstd:3"],
     "columns": {"rank": COL, "offset": COL, "shape": COL, "checksum": COL, "file_offset": COL,
                 "stored_nbytes": COL, "codec": COL}}
    COL = {"dtype": "<i4", "count": 8, "compression": "zlib", "data": "eJz..."}

Blocks are listed variable by variable in the order of ``variables``, each variable's blocks in their order;
``offset`` and ``shape`` hold ``ndim`` values per block (the variable's dimensions, none for a scalar).
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio.model.joined_blocks import JoinedBlocks, concatenated_ranges, own_dimensions

ENCODING_VERSION = 1
COLUMNS = ("rank", "offset", "shape", "checksum", "file_offset", "stored_nbytes", "codec")
_ALLOWED_DTYPES = frozenset({"|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8"})
_ZLIB_LEVEL = 1  # the columns are regular (offsets, shapes); a higher level buys little and costs rank 0 time


@dataclass(frozen=True)
class Block:
    """One writer block of a table, typed (:meth:`BlockTable.block`): what the schema-1 dict of the block holds, as
    Python values (``checksum`` as 16 hex digits; ``file_offset`` None where the format has none; ``codec`` None:
    stored raw). For code that looks at a few blocks (checks that name a block, the native format's extents);
    code that looks at all of them uses the columns."""

    index: int  # the block's position in its variable's table
    rank: int
    offset: tuple[int, ...]
    shape: tuple[int, ...]
    checksum: str
    file_offset: int | None
    stored_nbytes: int
    codec: str | None

    @property
    def size(self) -> int:
        """Its number of elements."""
        n = 1
        for s in self.shape:
            n *= s
        return n


class BlockTable(Sequence):
    """The blocks of one variable as columns (see the module docstring). Immutable by convention."""

    __slots__ = ("_deferred", "checksum", "codec", "codecs", "file_offset", "offset", "rank", "shape",
                 "stored_nbytes")

    def __init__(self, rank: np.ndarray, offset: np.ndarray, shape: np.ndarray, checksum: np.ndarray,
                 file_offset: np.ndarray, stored_nbytes: np.ndarray, codec: np.ndarray, codecs: Sequence[str]):
        self._deferred = None
        n = len(rank)
        self.rank = np.asarray(rank, np.int64).reshape(n)
        self.offset = np.asarray(offset, np.int64).reshape(n, -1) if n else np.asarray(offset, np.int64)
        self.shape = np.asarray(shape, np.int64).reshape(self.offset.shape)
        self.checksum = np.asarray(checksum, np.uint64).reshape(n)
        self.file_offset = np.asarray(file_offset, np.int64).reshape(n)
        self.stored_nbytes = np.asarray(stored_nbytes, np.int64).reshape(n)
        self.codec = np.asarray(codec, np.int64).reshape(n)
        self.codecs = list(codecs)

    # ------------------------------------------------------------------ construction
    @classmethod
    def of_columns(cls, rank: np.ndarray, offset: np.ndarray, shape: np.ndarray, checksum: np.ndarray,
                   file_offset: np.ndarray, stored_nbytes: np.ndarray, codec: np.ndarray,
                   codecs: Sequence[str]) -> BlockTable:
        """Trusted columns, taken as they are: int64 (``checksum`` uint64), ``offset``/``shape`` of shape
        ``(n, ndim)``. For the writer's index and the decoder, which build thousands of tables (one per variable)
        from columns of the right types: the checks of ``__init__`` cost more than the rest of a small one."""
        table = cls.__new__(cls)
        table._deferred = None
        table.rank, table.offset, table.shape, table.checksum = rank, offset, shape, checksum
        table.file_offset, table.stored_nbytes, table.codec = file_offset, stored_nbytes, codec
        table.codecs = list(codecs)
        return table

    @classmethod
    def deferred(cls, columns: Mapping[str, np.ndarray], row: int, count: int, value: int, ndim: int,
                 codecs: Sequence[str]) -> BlockTable:
        """The table of ``count`` blocks from row ``row`` (and flat value ``value`` of ``offset``/``shape``,
        ``ndim`` per block) of a document's decoded columns (:data:`COLUMNS`, trusted as :meth:`of_columns`
        takes them), its columns cut on first use. For the decoder: a document read to be restarted is planned
        from its joined columns and never looks at most variables' own tables, and cutting seven views for each
        of 10,000 variables was a third of decoding the document (4-6 us per variable)."""
        table = cls.__new__(cls)
        table._deferred = (columns, row, count, value, ndim)
        table.codecs = list(codecs)
        return table

    def __getattr__(self, name: str) -> Any:
        """Only for an attribute not set: a :meth:`deferred` table's columns, cut here on first use."""
        deferred = object.__getattribute__(self, "_deferred") if name in COLUMNS else None
        if deferred is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        columns, b, count, d, nd = deferred
        self.rank, self.checksum = columns["rank"][b:b + count], columns["checksum"][b:b + count]
        self.offset = columns["offset"][d:d + count * nd].reshape(count, nd)
        self.shape = columns["shape"][d:d + count * nd].reshape(count, nd)
        self.file_offset, self.codec = columns["file_offset"][b:b + count], columns["codec"][b:b + count]
        self.stored_nbytes = columns["stored_nbytes"][b:b + count]
        self._deferred = None
        return object.__getattribute__(self, name)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (an MPI message) as its own columns: a :meth:`deferred` table's are cut first, so that the
        document's columns are not sent with each table."""
        return (BlockTable.of_columns, (*(getattr(self, k) for k in COLUMNS), self.codecs))

    @classmethod
    def from_dicts(cls, blocks: Sequence[Mapping[str, Any]], ndim: int) -> BlockTable:
        """The columns of a schema-1 block list (validated: every block has rank, offset, shape and checksum)."""
        if isinstance(blocks, BlockTable):
            return blocks
        n = len(blocks)
        codecs: list[str] = []
        ids: dict[str | None, int] = {None: -1}

        def codec_id(c: str | None) -> int:
            if c not in ids:
                ids[c] = len(codecs)
                codecs.append(c)
            return ids[c]

        return cls(np.fromiter((b["rank"] for b in blocks), np.int64, n),
                   np.array([b["offset"] for b in blocks], np.int64).reshape(n, ndim),
                   np.array([b["shape"] for b in blocks], np.int64).reshape(n, ndim),
                   np.array([int(b["checksum"], 16) for b in blocks], np.uint64),
                   np.fromiter((-1 if b.get("file_offset") is None else b["file_offset"] for b in blocks), np.int64, n),
                   np.fromiter((b.get("stored_nbytes") or 0 for b in blocks), np.int64, n),
                   np.fromiter((codec_id(b.get("codec")) for b in blocks), np.int64, n), codecs)

    # ------------------------------------------------------------------ the schema-1 view
    @property
    def ndim(self) -> int:
        return int(self.offset.shape[1]) if self.offset.ndim == 2 else 0

    def __len__(self) -> int:
        deferred = self._deferred
        return int(self.rank.shape[0]) if deferred is None else deferred[2]

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = range(len(self))[i]  # negative indices, IndexError
        c = int(self.codec[i])
        fo = int(self.file_offset[i])
        return {"rank": int(self.rank[i]), "offset": self.offset[i].tolist(), "shape": self.shape[i].tolist(),
                "checksum": f"{int(self.checksum[i]):016x}", "file_offset": None if fo == -1 else fo,
                "stored_nbytes": int(self.stored_nbytes[i]), "codec": None if c < 0 else self.codecs[c]}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))

    # ------------------------------------------------------------------ typed blocks
    def block(self, i: int) -> Block:
        """Block ``i`` as a typed :class:`Block`."""
        i = range(len(self))[i]
        c = int(self.codec[i])
        fo = int(self.file_offset[i])
        return Block(i, int(self.rank[i]), tuple(self.offset[i].tolist()), tuple(self.shape[i].tolist()),
                     f"{int(self.checksum[i]):016x}", None if fo == -1 else fo, int(self.stored_nbytes[i]),
                     None if c < 0 else self.codecs[c])

    def blocks(self) -> Iterator[Block]:
        """Every block in order, typed (one Python object each: for tables that are small or already failed a
        column check)."""
        return (self.block(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BlockTable):
            return (len(self) == len(other) and self.ndim == other.ndim and self.codec_names() == other.codec_names()
                    and all(np.array_equal(getattr(self, k), getattr(other, k)) for k in COLUMNS if k != "codec"))
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"BlockTable({len(self)} blocks, {self.ndim}-D)"

    def codec_names(self) -> list[str | None]:
        """Each block's codec name (None: stored raw)."""
        names = [None, *self.codecs]
        return [names[c + 1] for c in self.codec.tolist()]

    def to_dicts(self) -> list[dict[str, Any]]:
        return list(self)


def as_table(blocks: Sequence[Mapping[str, Any]] | BlockTable, ndim: int) -> BlockTable:
    """``blocks`` as a :class:`BlockTable` (a schema-1 list is converted)."""
    return blocks if isinstance(blocks, BlockTable) else BlockTable.from_dicts(blocks, ndim)


# ---------------------------------------------------------------------------------------- encoding
def _narrowest(values: np.ndarray) -> np.dtype:
    """The smallest little-endian integer dtype that holds ``values`` (int64 and uint64 columns)."""
    if values.dtype == np.uint64:
        return np.dtype("<u8")
    if values.size == 0:
        return np.dtype("|i1")
    lo, hi = int(values.min()), int(values.max())
    for dt in ("|i1", "<i2", "<i4"):
        info = np.iinfo(np.dtype(dt))
        if info.min <= lo and hi <= info.max:
            return np.dtype(dt)
    return np.dtype("<i8")


def _encode_column(values: np.ndarray) -> dict[str, Any]:
    dtype = _narrowest(values)
    raw = np.ascontiguousarray(values.astype(dtype, copy=False)).tobytes()
    return {"dtype": dtype.str, "count": int(values.size), "compression": "zlib",
            "data": base64.b64encode(zlib.compress(raw, _ZLIB_LEVEL)).decode("ascii")}


def _decode_column(col: Any, what: str, count: int, unsigned: bool = False) -> np.ndarray:
    if not isinstance(col, dict):
        raise ValueError(f"{what} is {type(col).__name__}, expected an object")
    dtype, n, data = col.get("dtype"), col.get("count"), col.get("data")
    if not isinstance(dtype, str) or dtype not in _ALLOWED_DTYPES or col.get("compression") != "zlib" \
            or not isinstance(data, str):
        raise ValueError(f"{what} has an unknown encoding ({dtype!r}, {col.get('compression')!r})")
    if n != count:
        raise ValueError(f"{what} holds {n!r} values, expected {count}")
    try:
        raw = zlib.decompress(base64.b64decode(data, validate=True))
    except (binascii.Error, zlib.error, ValueError) as exc:
        raise ValueError(f"{what} cannot be decoded ({exc})") from None
    dt = np.dtype(dtype)
    if len(raw) != count * dt.itemsize:
        raise ValueError(f"{what} holds {len(raw)} bytes, expected {count * dt.itemsize}")
    arr = np.frombuffer(raw, dt)
    if unsigned:
        if dt.kind != "u" or dt.itemsize != 8:
            raise ValueError(f"{what} has dtype {dtype}, expected <u8")
        return arr.astype(np.uint64, copy=False)
    if dt == np.dtype("<u8") and count and int(arr.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{what} holds values beyond the 64-bit signed range")
    return arr.astype(np.int64)


def encode(variables: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The ``variable_blocks`` entry of a schema-2 document for ``variables`` (name -> entry with ``shape`` and
    ``blocks``, a BlockTable or a schema-1 list), variables in sorted name order (the document's key order)."""
    return encode_tables({n: as_table(v.get("blocks", []), len(v["shape"])) for n, v in variables.items()})


def encode_tables(tables_by_name: Mapping[str, BlockTable]) -> dict[str, Any]:
    """:func:`encode` of each variable's table (name -> :class:`BlockTable`)."""
    names = sorted(tables_by_name)
    tables = [tables_by_name[n] for n in names]
    codecs: list[str] = []
    ids: dict[str, int] = {}
    codec_cols = []
    for t in tables if any(t.codecs for t in tables) else ():  # (none compressed: every codec id is -1 already)
        remap = np.full(len(t.codecs) + 1, -1, np.int64)
        for j, c in enumerate(t.codecs):
            if c not in ids:
                ids[c] = len(codecs)
                codecs.append(c)
            remap[j + 1] = ids[c]
        codec_cols.append(remap[t.codec + 1])

    def cat(key: str, dtype) -> np.ndarray:
        if key in ("offset", "shape"):  # (n, ndim) per table
            parts = [getattr(t, key).reshape(-1) for t in tables]
        else:
            parts = [getattr(t, key) for t in tables]
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)

    cols = {key: cat(key, np.uint64 if key == "checksum" else np.int64) for key in COLUMNS if key != "codec"}
    cols["codec"] = np.concatenate(codec_cols) if codec_cols else cat("codec", np.int64)
    return {"encoding": ENCODING_VERSION, "variables": names, "counts": [len(t) for t in tables], "codecs": codecs,
            "columns": {key: _encode_column(cols[key]) for key in COLUMNS}}


def encode_joined(names: Sequence[str], joined: JoinedBlocks, ndims: Sequence[int]) -> dict[str, Any]:
    """:func:`encode_tables` of the tables ``joined`` holds, variable ``i`` called ``names[i]`` with ``ndims[i]``
    dimensions, where no block is compressed (every ``codec`` -1, no table lists a codec): the same entry, from
    the joined columns in a few numpy steps instead of one concatenation per column of every variable's table
    (the write side's index has them joined already)."""
    order = sorted(range(len(names)), key=names.__getitem__)
    if order == list(range(len(names))):
        rows: Any = slice(None)
        counts = joined.counts
    else:  # (the stored columns list the variables in sorted name order)
        by_name = np.asarray(order, np.int64)
        rows, counts = concatenated_ranges(joined.starts[by_name], joined.counts[by_name]), joined.counts[by_name]
    own = own_dimensions(np.asarray(ndims, np.int64)[joined.var[rows]], joined.lo.shape[1])
    cols = {"rank": joined.rank[rows], "offset": joined.lo[rows][own], "shape": joined.shape[rows][own],
            "checksum": joined.checksum[rows], "file_offset": joined.file_offset[rows],
            "stored_nbytes": joined.stored_nbytes[rows], "codec": joined.codec[rows]}
    return {"encoding": ENCODING_VERSION, "variables": [names[i] for i in order], "counts": counts.tolist(),
            "codecs": [], "columns": {key: _encode_column(cols[key]) for key in COLUMNS}}


def decode(entry: Any, variables: Mapping[str, Mapping[str, Any]]) -> dict[str, BlockTable]:
    """Each variable's :class:`BlockTable` from a document's ``variable_blocks`` entry: :func:`decode_joined`'s
    tables."""
    return decode_joined(entry, variables)[0]


def decode_joined(entry: Any, variables: Mapping[str, Mapping[str, Any]]
                  ) -> tuple[dict[str, BlockTable], JoinedBlocks]:
    """Each variable's :class:`BlockTable` from a document's ``variable_blocks`` entry, and all of them joined
    (:class:`~ckptio.model.joined_blocks.JoinedBlocks`: variables in the entry's order, padded to the most
    dimensions of any; ``codec`` the entry's ids, which every table's ``codecs`` list). ``variables`` are the
    document's entries (their ``shape`` gives each variable's number of dimensions). ValueError naming the field
    when the entry is damaged or does not match the variables."""
    if not isinstance(entry, dict):
        raise ValueError(f"field 'variable_blocks' is {type(entry).__name__}, expected an object")
    if entry.get("encoding") != ENCODING_VERSION:
        raise ValueError(f"variable_blocks encoding {entry.get('encoding')!r} is not supported "
                         f"(this ckptio reads encoding {ENCODING_VERSION})")
    names, counts, codecs = entry.get("variables"), entry.get("counts"), entry.get("codecs")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or sorted(names) != sorted(
            variables) or len(set(names)) != len(names):
        raise ValueError("variable_blocks does not list the document's variables")
    if not isinstance(counts, list) or len(counts) != len(names) or not all(
            type(c) is int and c >= 0 for c in counts):
        raise ValueError(f"variable_blocks counts {counts!r} are not one count per variable")
    if not isinstance(codecs, list) or not all(isinstance(c, str) for c in codecs):
        raise ValueError(f"variable_blocks codecs {codecs!r} are not a list of names")
    columns = entry.get("columns")
    if not isinstance(columns, dict) or set(columns) != set(COLUMNS):
        raise ValueError(f"variable_blocks columns are not {list(COLUMNS)}")
    ndims = []
    for n in names:
        shape = variables[n].get("shape") if isinstance(variables[n], dict) else None
        if not isinstance(shape, list):
            raise ValueError(f"variable {n!r}: shape is {shape!r}, expected a list")
        ndims.append(len(shape))
    total = sum(counts)
    total_dims = sum(c * d for c, d in zip(counts, ndims, strict=True))
    col = {key: _decode_column(columns[key], f"variable_blocks column {key!r}",
                               total_dims if key in ("offset", "shape") else total, key == "checksum")
           for key in COLUMNS}
    if len(col["codec"]) and (int(col["codec"].min()) < -1 or int(col["codec"].max()) >= len(codecs)):
        raise ValueError("variable_blocks column 'codec' names a codec that is not listed")
    for column in col.values():  # (the tables are views of these: a decoded document's blocks are read-only)
        column.setflags(write=False)
    out: dict[str, BlockTable] = {}
    b = d = 0
    for name, count, nd in zip(names, counts, ndims, strict=True):
        out[name] = BlockTable.deferred(col, b, count, d, nd, codecs)
        b, d = b + count, d + count * nd
    joined = JoinedBlocks.from_flat(counts, ndims, max(ndims, default=0), col["rank"], col["offset"], col["shape"],
                                    col["checksum"], col["file_offset"], col["stored_nbytes"], col["codec"])
    return out, joined


def stored_nbytes(blocks: Sequence[Mapping[str, Any]] | BlockTable) -> int:
    """The bytes a variable's blocks occupy in the file."""
    if isinstance(blocks, BlockTable):
        return int(blocks.stored_nbytes.sum())
    return sum(int(b.get("stored_nbytes") or 0) for b in blocks)


# ------------------------------------------------------------------------- the copy for HDF5 and netCDF users
USER_TABLE_NOTE = ("one row per block: variable (index into the attribute 'variables', space-separated names), "
                   "writer rank, offset[0..n), shape[0..n) in the global array (n: the most dimensions of any "
                   "variable; fewer are padded with offset 0, shape 1). The checksums are xxh3_64 of each block's "
                   "elements in C order, unsigned 64-bit. A copy for users of the file; ckptio reads its "
                   "metadata document.")
USER_CHECKSUMS_NOTE = ("the xxh3_64 of each block's elements in C order, unsigned 64-bit: one per row of the block "
                       "table, in its order. A copy for users of the file; ckptio reads its metadata document.")


def user_table(variables: Mapping[str, Any]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Rank 0, writing an HDF5 or netCDF file: every block of every variable as plain integer arrays any tool
    reads (no compound or string types: netCDF-C before 4.9.3 hides transient compound types and truncates or
    crashes on strings inside them). ``variables``: name -> write plan
    (:class:`ckptio.model.variable_plan.VariablePlan`, its columns ``rank``, ``offset``, ``size``, ``checksum``).
    Returns the names, the int64 rows (see
    :data:`USER_TABLE_NOTE`) and the uint64 checksums."""
    names = list(variables)
    ndim = max((len(v.shape) for v in variables.values()), default=0)
    parts, sums = [], []
    for i, v in enumerate(variables.values()):
        n, nd = len(v.rank), len(v.shape)
        rows = np.zeros((n, 2 + 2 * ndim), np.int64)
        rows[:, 2 + ndim:] = 1
        rows[:, 0], rows[:, 1] = i, v.rank
        rows[:, 2:2 + nd] = v.offset
        rows[:, 2 + ndim:2 + ndim + nd] = v.size
        parts.append(rows)
        sums.append(v.checksum)
    return (names, np.concatenate(parts) if parts else np.zeros((0, 2 + 2 * ndim), np.int64),
            np.concatenate(sums).astype(np.uint64) if sums else np.zeros(0, np.uint64))


def user_table_shape(variables: Mapping[str, Any]) -> tuple[int, int]:
    """Every rank: the (rows, columns) of :func:`user_table`'s rows from the variables' totals alone (a rank
    that holds only its own blocks creates the same datasets as rank 0, which fills them)."""
    ndim = max((len(v.shape) for v in variables.values()), default=0)
    return sum(v.total_blocks for v in variables.values()), 2 + 2 * ndim
