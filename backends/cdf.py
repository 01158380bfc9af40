"""A reader of classic netCDF headers (CDF-1, CDF-2 and CDF-5), as Unidata and PnetCDF document the format: what
ckptio needs to check a CDF-5 checkpoint and to restart from a netCDF file it did not write, without PnetCDF or
MPI. Local, serial.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ckptio.backends.base import (
    CheckpointDocument,
    CheckpointIOError,
    CorruptCheckpointError,
    IncompleteCheckpointError,
    VariableRecord,
)

from ckptio.model import plain

NC_TYPES = {1: "i1", 2: "S1", 3: ">i2", 4: ">i4", 5: ">f4", 6: ">f8", 7: "u1", 8: ">u2", 9: ">u4", 10: ">i8",
             11: ">u8"}
_DTYPES = {t: np.dtype(d) for t, d in NC_TYPES.items()}
_TAG_DIMENSION, _TAG_VARIABLE, _TAG_ATTRIBUTE = 10, 11, 12
_STREAMING = {4: 0xFFFFFFFF, 8: 0xFFFFFFFFFFFFFFFF}


@dataclass
class CDFVar:
    dimids: list[int]
    nc_type: int
    vsize: int
    begin: int
    is_record: bool = False
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class CDFHeader:
    """The parts of a classic netCDF header (CDF-1, CDF-2 or CDF-5) ckptio needs."""

    version: int
    numrecs: int
    streaming: bool
    dims: list[tuple[str, int]]
    attrs: dict[str, Any]
    vars: dict[str, CDFVar]
    size: int  # of the file

    def record_vars(self) -> list[str]:
        return [n for n, v in self.vars.items() if v.is_record]

    def data_end(self) -> int:
        """Where the data the header describes ends (the file must be at least this long)."""
        end = max((v.begin + v.vsize for v in self.vars.values() if not v.is_record), default=0)
        records = self.record_vars()
        if records and self.numrecs:
            if len(records) == 1:  # a single record variable is not padded to 4 bytes per record
                v = self.vars[records[0]]
                per_record = math.prod(n for i, (_, n) in enumerate(self.dims) if i in v.dimids[1:])
                per_record *= np.dtype(NC_TYPES[v.nc_type]).itemsize
                end = max(end, v.begin + self.numrecs * per_record)
            else:
                begin = min(self.vars[n].begin for n in records)
                end = max(end, begin + self.numrecs * sum(self.vars[n].vsize for n in records))
        return end


class _Cursor:
    """Sequential reads of a file's header, fetched in chunks; errors name truncation or damage."""

    def __init__(self, path: str, fd: int, size: int):
        self.path, self.fd, self.size = path, fd, size
        self.buf = b""
        self.pos = 0

    def take(self, n: int) -> bytes:
        pos, end = self.pos, self.pos + n
        if end > self.size:  # (also when the buffer holds more: the file grew after its size was taken)
            raise IncompleteCheckpointError(f"{self.path}: the file ends inside its netCDF header (truncated)")
        if end > len(self.buf):
            self._fill(end)
        self.pos = end
        return self.buf[pos:end]

    def _fill(self, end: int) -> None:
        """Read on until the buffer holds ``end`` bytes (64 KiB at a time: one read for most headers)."""
        while end > len(self.buf):
            chunk = os.pread(self.fd, max(end - len(self.buf), 1 << 16), len(self.buf))
            if not chunk:
                raise IncompleteCheckpointError(f"{self.path}: the file ends inside its netCDF header (truncated)")
            self.buf += chunk

    def uint(self, width: int) -> int:
        return int.from_bytes(self.take(width), "big")

    def count(self, width: int, item: int = 1) -> int:
        n = int.from_bytes(self.take(width), "big")
        if n * item > self.size:
            raise CorruptCheckpointError(f"{self.path}: netCDF header is damaged (a count of {n} at byte "
                                         f"{self.pos - width})")
        return n

    def name(self, width: int) -> str:
        n = self.count(width)
        raw = self.take(n + (-n % 4))  # the name and its padding to 4 bytes
        try:
            return raw[:n].decode()
        except UnicodeDecodeError:
            raise CorruptCheckpointError(f"{self.path}: netCDF header is damaged (bad name)") from None


def read_header(path: str) -> CDFHeader:
    """Parse the header of a classic netCDF file (serial). Raises Incomplete/Corrupt/CheckpointIOError."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise CheckpointIOError(f"{path}: cannot read checkpoint: {exc.strerror or exc}") from None
    try:
        c = _Cursor(path, fd, os.fstat(fd).st_size)
        magic = c.take(4)
        if magic[:3] != b"CDF" or magic[3] not in (1, 2, 5):
            raise CorruptCheckpointError(f"{path}: not a classic netCDF file (magic {magic!r})")
        version = magic[3]
        width = 8 if version == 5 else 4  # NON_NEG and dimension lengths
        offset_width = 4 if version == 1 else 8  # OFFSET (begin)
        numrecs = c.uint(width)
        streaming = numrecs == _STREAMING[width]

        def list_header(expected_tag: int) -> int:
            tag, n = c.uint(4), c.uint(width)
            if tag == 0 and n == 0:
                return 0
            if tag != expected_tag or n * 4 > c.size:
                raise CorruptCheckpointError(f"{path}: netCDF header is damaged (list tag {tag} at byte {c.pos})")
            return n

        def attributes() -> dict[str, Any]:
            out: dict[str, Any] = {}
            for _ in range(list_header(_TAG_ATTRIBUTE)):
                name = c.name(width)
                nc_type = c.uint(4)
                if nc_type not in NC_TYPES:
                    raise CorruptCheckpointError(f"{path}: netCDF header is damaged (type {nc_type})")
                dtype = _DTYPES[nc_type]
                n = c.count(width, dtype.itemsize)
                nbytes = n * dtype.itemsize
                raw = c.take(nbytes + (-nbytes % 4))[:nbytes]
                out[name] = raw.decode(errors="replace") if nc_type == 2 else np.frombuffer(raw, dtype)
            return out

        dims = [(c.name(width), c.uint(width)) for _ in range(list_header(_TAG_DIMENSION))]
        attrs = attributes()
        variables: dict[str, CDFVar] = {}
        for _ in range(list_header(_TAG_VARIABLE)):
            name = c.name(width)
            dimids = [c.uint(width) for _ in range(c.count(width))]
            if any(d >= len(dims) for d in dimids):
                raise CorruptCheckpointError(f"{path}: netCDF header is damaged (variable {name!r} dimensions)")
            vattrs = attributes()
            nc_type, vsize, begin = c.uint(4), c.uint(width), c.uint(offset_width)
            if nc_type not in NC_TYPES:
                raise CorruptCheckpointError(f"{path}: netCDF header is damaged (variable {name!r} type)")
            is_record = bool(dimids) and dims[dimids[0]][1] == 0
            variables[name] = CDFVar(dimids, nc_type, vsize, begin, is_record, vattrs)
        return CDFHeader(version, 0 if streaming else numrecs, streaming, dims, attrs, variables, c.size)
    finally:
        os.close(fd)


def plain_document(path: str) -> CheckpointDocument:
    """Rank 0: the document of a classic netCDF file (CDF-1, CDF-2 or CDF-5) ckptio did not write (see
    :mod:`ckptio.model.plain`)."""
    header = read_header(path)
    variables: dict[str, VariableRecord] = {}
    skipped: dict[str, str] = {}
    for name, var in header.vars.items():
        if var.is_record:
            skipped[name] = "a record variable (along the unlimited dimension, interleaved with the others)"
            continue
        dtype = np.dtype(NC_TYPES[var.nc_type])
        if dtype.kind not in plain.NUMERIC:
            skipped[name] = "a char variable (text), not numeric"
            continue
        if (why := plain.packed_problem(var.attrs)) is not None:
            skipped[name] = why
            continue
        shape = tuple(header.dims[d][1] for d in var.dimids)
        dims = tuple(header.dims[d][0] for d in var.dimids)  # netCDF's shared dimensions
        variables[name] = plain.variable(shape, dtype, var.begin, plain.attrs_of(var.attrs), dims)
    return plain.document("pnetcdf", variables, skipped, plain.attrs_of(header.attrs))
