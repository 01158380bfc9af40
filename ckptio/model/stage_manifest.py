"""A staged piece's manifest: the typed record of one rank's blocks on a stage (see :mod:`ckptio.tiers.staging`).

Pure: no MPI, no files. Each rank of a staged checkpoint writes its blocks into one data file on its node's stage
and this manifest beside it (JSON, ``{"format": "ckptio-stage", "version": 1, ...}``): where each block lies in
the data file, its checksum, how it was declared, and what the drain to the parallel file system needs (the final
path, the backend, the checkpoint's attributes and series identity, the redundancy scheme of a multi-level
checkpoint). :meth:`StageManifest.to_json` and :meth:`StageManifest.from_json` are the only JSON boundary; every
field is checked on the way in, so a damaged or foreign manifest is a ``ValueError`` naming the field, never a
``KeyError`` deep inside a drain or restart. The JSON is unchanged from the untyped manifests of earlier releases
(version 1): pieces staged before still restart and drain.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio.model.plan import ARRAY, SEGMENT
from ckptio.model.schema_checks import CHECKSUM_RE

FORMAT = "ckptio-stage"
VERSION = 1


@dataclass(frozen=True)
class StagedBlock:
    """One block of a rank's staged piece: how it was declared (``name``, ``kind``, ``dtype``, an array block's
    ``offset`` and ``global_shape``, the variable's ``dims`` and ``attrs`` if declared with it) and where its
    bytes are in the data file (``data_offset``, ``nbytes``; ``array_shape`` the block's shape, ``checksum`` the
    xxh3-64 of its bytes, 16 hex digits). ``data_offset``, ``nbytes`` and ``checksum`` are set when the block
    is written (:meth:`stored`)."""

    name: str
    kind: str  # ARRAY or SEGMENT
    dtype: str  # numpy's dtype.str, e.g. "<f8"
    array_shape: tuple[int, ...]
    offset: tuple[int, ...] | None = None  # an array block's offset in the variable; None for a segment
    global_shape: tuple[int, ...] | None = None  # an array's shape; None for a segment
    dims: tuple[str, ...] | None = None
    attrs: Mapping[str, Any] | None = None
    data_offset: int = 0
    nbytes: int = 0
    checksum: str = ""

    @classmethod
    def declared(cls, decl: Mapping[str, Any], described: Mapping[str, Any], array_shape: Sequence[int]
                 ) -> StagedBlock:
        """Local: a block from its declaration (:func:`ckptio.model.declared.declaration`), its variable's dims and
        attrs (:func:`ckptio.model.varmeta.declare`) and the shape of the C-order array staged for it."""
        array = decl["kind"] == ARRAY
        dims = described.get("dims")
        return cls(str(decl["name"]), str(decl["kind"]), str(decl["dtype"]), tuple(int(n) for n in array_shape),
                   tuple(int(x) for x in decl["offset"]) if array else None,
                   tuple(int(x) for x in decl["global_shape"]) if array else None,
                   None if dims is None else tuple(dims), described.get("attrs"))

    def stored(self, data_offset: int, nbytes: int, checksum: str) -> StagedBlock:
        """The block as written: where its bytes are in the data file and their checksum."""
        return dataclasses.replace(self, data_offset=int(data_offset), nbytes=int(nbytes), checksum=checksum)

    @property
    def described(self) -> dict[str, Any]:
        """The ``dims``/``attrs`` keywords to write this block again with (the drain's ``Writer.write``)."""
        return {"dims": None if self.dims is None else list(self.dims), "attrs": self.attrs}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "dtype": self.dtype, "kind": self.kind}
        if self.kind == ARRAY:
            out.update(global_shape=list(self.global_shape or ()), offset=list(self.offset or ()),
                       shape=list(self.array_shape))
        else:
            out.update(length=self.array_shape[0], trailing=list(self.array_shape[1:]))
        if self.dims is not None:
            out["dims"] = list(self.dims)
        if self.attrs is not None:
            out["attrs"] = dict(self.attrs)
        out.update(checksum=self.checksum, array_shape=list(self.array_shape), data_offset=self.data_offset,
                   nbytes=self.nbytes)
        return out

    @classmethod
    def from_json(cls, obj: Any) -> StagedBlock:
        """A block of a manifest read from disk; ValueError naming what is wrong."""
        if not isinstance(obj, Mapping):
            raise ValueError(f"a block is {type(obj).__name__}, not an object")
        name = _text(obj, "name")
        where = f"block of {name!r}"
        kind = _text(obj, "kind", where)
        if kind not in (ARRAY, SEGMENT):
            raise ValueError(f"{where}: kind {kind!r} is neither {ARRAY!r} nor {SEGMENT!r}")
        dtype = _text(obj, "dtype", where)
        try:
            np.dtype(dtype)
        except TypeError:
            raise ValueError(f"{where}: dtype {dtype!r} is not a numpy dtype") from None
        shape = _ints(obj, "array_shape", where)
        if kind == SEGMENT and not shape:
            raise ValueError(f"{where}: a segment block needs at least one axis")
        offset = _ints(obj, "offset", where) if kind == ARRAY else None
        gshape = _ints(obj, "global_shape", where) if kind == ARRAY else None
        if kind == ARRAY and not len(offset or ()) == len(gshape or ()) == len(shape):
            raise ValueError(f"{where}: offset, global_shape and array_shape differ in length")
        dims = obj.get("dims")
        if dims is not None and (not isinstance(dims, list) or not all(isinstance(d, str) for d in dims)):
            raise ValueError(f"{where}: dims {dims!r} is not a list of names")
        attrs = obj.get("attrs")
        if attrs is not None and not isinstance(attrs, Mapping):
            raise ValueError(f"{where}: attrs is {type(attrs).__name__}, not an object")
        checksum = _text(obj, "checksum", where)
        if not CHECKSUM_RE.match(checksum):
            raise ValueError(f"{where}: checksum {checksum!r} is not 16 hex digits")
        data_offset, nbytes = _count(obj, "data_offset", where), _count(obj, "nbytes", where)
        if nbytes != int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize:
            raise ValueError(f"{where}: {nbytes} bytes for a {dtype} block of shape {list(shape)}")
        return cls(name, kind, dtype, shape, offset, gshape, None if dims is None else tuple(dims), attrs,
                   data_offset, nbytes, checksum)


@dataclass(frozen=True)
class StageManifest:
    """One rank's staged piece: what it belongs to (``final``: the checkpoint's absolute final path, ``token``:
    the staged checkpoint, common to every rank; ``rank`` of ``nprocs``; ``host``: the node that staged it),
    how the drain writes it (``backend``, ``attrs``, ``series``: the JSON of a
    :class:`ckptio.model.series_record.SeriesRecord` or None), ``redundancy``: the scheme of a multi-level
    checkpoint (None for a plain staged one) and its ``blocks`` in data-file order."""

    final: str
    token: str
    host: str
    backend: str
    attrs: Mapping[str, Any]
    series: Mapping[str, Any] | None
    redundancy: str | None
    rank: int
    nprocs: int
    blocks: tuple[StagedBlock, ...] = ()

    @property
    def data_bytes(self) -> int:
        """The size the piece's data file must have."""
        return sum(b.nbytes for b in self.blocks)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": FORMAT, "version": VERSION, "final": self.final, "token": self.token,
                               "host": self.host}
        if self.redundancy is not None:
            out["redundancy"] = self.redundancy
        out.update(backend=self.backend, attrs=dict(self.attrs),
                   series=None if self.series is None else dict(self.series), rank=self.rank, nprocs=self.nprocs,
                   blocks=[b.to_json() for b in self.blocks])
        return out

    @classmethod
    def from_json(cls, obj: Any) -> StageManifest:
        """A manifest read from disk; ValueError naming what is wrong (not a stage manifest, another version, a
        field missing or of the wrong type)."""
        if not isinstance(obj, Mapping) or obj.get("format") != FORMAT:
            raise ValueError("not a ckptio stage manifest")
        if obj.get("version") != VERSION:
            raise ValueError(f"stage manifest version {obj.get('version')!r}, this ckptio reads {VERSION}")
        # pieces staged by releases before the drain recorded them have no backend, attrs or series (they were
        # drained with the defaults below)
        attrs, series, redundancy = obj.get("attrs", {}), obj.get("series"), obj.get("redundancy")
        if not isinstance(attrs, Mapping):
            raise ValueError("attrs is not an object")
        if series is not None and not isinstance(series, Mapping):
            raise ValueError("series is not an object")
        if redundancy is not None and not isinstance(redundancy, str):
            raise ValueError("redundancy is not a name")
        blocks = obj.get("blocks")
        if not isinstance(blocks, list):
            raise ValueError("blocks is not a list")
        rank, nprocs = _count(obj, "rank"), _count(obj, "nprocs")
        if not rank < nprocs:
            raise ValueError(f"rank {rank} of {nprocs}")
        host = _text(obj, "host") if "host" in obj else ""
        backend = _text(obj, "backend") if "backend" in obj else "mpiio"
        return cls(_text(obj, "final"), _text(obj, "token"), host, backend, attrs, series, redundancy, rank, nprocs,
                   tuple(StagedBlock.from_json(b) for b in blocks))


def _text(obj: Mapping[str, Any], key: str, where: str = "manifest") -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{where}: {key} is {type(value).__name__}, not a string")
    return value


def _count(obj: Mapping[str, Any], key: str, where: str = "manifest") -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: {key} is {value!r}, not a count")
    return value


def _ints(obj: Mapping[str, Any], key: str, where: str) -> tuple[int, ...]:
    value = obj.get(key)
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        raise ValueError(f"{where}: {key} is {value!r}, not a list of integers")
    return tuple(value)
