"""PnetCDF backend (``backend="pnetcdf"``): pnetcdf-python, CDF-5 files readable by any netCDF tool.

File layout (CDF-5, ``NC_64BIT_DATA``; all data big-endian, as the format requires)::

    header               dimensions, global attributes, variable definitions (never rewritten after the
                         define phase, so no data is ever moved)
    <name>(<dim>, ...)   one variable per ckptio variable, in its GLOBAL shape (per-rank segments: all ranks' rows,
                         end to end), with its own attributes (``attrs=`` of ``write()``; names that are
                         not plain netCDF names only in the JSON document). Its dimensions are those
                         declared with ``dims=``, else ``<name>_d0``, ``<name>_d1``, ...; a dimension name is
                         defined once and shared by every variable using it (one name, one length: checked
                         when declared)
    ckptio_blocks(ckptio_nblocks, ckptio_blockcols)
                         int64 block table of every variable (a copy for netCDF users; ckptio reads the
                         document's): one row per block, ``variable, rank, offset[0..n), shape[0..n)``
                         (``variable`` indexes the attribute ``variables``, a space-separated list of names;
                         ``n`` is the most dimensions of any variable, fewer padded with offset 0, shape 1)
    ckptio_block_checksums(ckptio_nblocks)
                         uint64: the xxh3-64 of each block's elements (integers: netCDF-C 4.9/4.10 truncate or
                         crash on fixed-length strings inside tables)
    ckptio_metadata_checksum(ckptio_checksum_len)
                         the xxh3-64 of the metadata document
    ckptio_complete      int scalar: 1 once the checkpoint is committed (the completion mark, written last)
    ckptio_metadata(ckptio_metadata_len = UNLIMITED)
                         char: the metadata document of ckptio.model.meta (JSON), as the only record variable,
                         so it can be written after the data, at any length, without a header change
    global attributes    ``ckptio_format_version``, ``ckptio_version``, ``ckptio_note`` and the
                         checkpoint's attributes (numbers, strings and numeric lists natively, other values
                         as JSON text; names that are not plain netCDF names only in the JSON document)

CDF has no zero-length fixed dimension (a 0 length means UNLIMITED), so a variable with no elements exists
only in the metadata document (and its block table); a checkpoint without blocks has no block table.
Layout version 1 (ckptio before the columnar metadata of schema 2) had one table and one checksum variable
(16 characters per block) per variable; such files are still read (their document is schema 1).
CDF-5 has no bool, complex or float16 types: the capabilities refuse them.

Writing: see :mod:`ckptio.backends.pnetcdf_write`.

The metadata records ``storage = {"file_offset": begin, "file_dtype": ">f8", ...}`` per variable, with
``begin`` read from the CDF header that PnetCDF wrote (pnetcdf-python's ``inq_offset`` returns a C int and
is unsafe). Restart reads bypass PnetCDF: non-record CDF variables are contiguous C-ordered arrays, read as
raw byte ranges by the aggregators (:mod:`ckptio.backends.rawio`). ``read_document`` parses the header with
the small reader below (the format is documented by Unidata and PnetCDF), so ``ckptio inspect`` needs
neither MPI nor PnetCDF to check a file.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from ckptio.backends import cdf, install_hints, rawio, version_mark
from ckptio.backends.base import (
    Backend,
    Capabilities,
    CapabilityError,
    CheckpointDocument,
    CheckpointError,
    CheckpointIOError,
    CorruptCheckpointError,
    CreateOptions,
    Extent,
    ExtentReader,
    ExtentTable,
    IncompleteCheckpointError,
    RewrittenCheckpointError,
    VariablePlan,
)
from ckptio.backends.cdf import NC_TYPES, CDFHeader, read_header
from ckptio.backends.detect import not_ckptio
from ckptio.backends.pnetcdf_write import (
    CHECKSUM_LEN,
    COMPLETE,
    COMPLETE_VAR,
    FORMAT_VERSION,
    META_SUM_VAR,
    META_VAR,
    PnetCDFWriteHandle,
    attr_value,
)
from ckptio.backends.rawio import SerialRawReader, leading_axis_bands

from ckptio.model import meta as metamod

# pnetcdf-python initializes MPI when imported: import it only to write a file (reading needs neither it nor MPI)
INSTALL_HINT = install_hints.PNETCDF  # names ckptio-install-parallel (issue 27)


def _pnetcdf_missing() -> str | None:
    try:
        found = importlib.util.find_spec("pnetcdf") is not None
    except (ImportError, ValueError, AttributeError):  # e.g. sys.modules["pnetcdf"] = None (import blocked)
        found = False
    return None if found else f"pnetcdf-python is not installed; {INSTALL_HINT}"



class PnetCDFBackend(Backend):
    name = "pnetcdf"
    format_version = FORMAT_VERSION
    capabilities = Capabilities(compression=False, segments=True, complex_dtypes=False, bool_dtype=False,
                                unsigned_dtypes=True, float16=False, extended_float=False,
                                readable_by=("ckptio", "ncmpidump", "ncdump", "netCDF4-python", "any CDF-5 reader"))
    # byte-swap write buffers in place, no second copy of the data (pnetcdf_buffers.swappable: which are safe)
    extra_hints = {"nc_in_place_swap": "enable"}

    signature = b"CDF\x05"  # ckptio writes CDF-5 only (sniff also accepts CDF-1 and CDF-2 files)

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        return head[:4] in (b"CDF\x01", b"CDF\x02", b"CDF\x05")

    def check_attr(self, name: str, value: Any) -> None:
        """What PnetCDF refuses only when the file is defined (measured with pnetcdf-python): a string stored
        as netCDF text that is not valid UTF-8 (a lone surrogate). NUL characters, long strings and long lists
        are stored; names that are not netCDF names are kept in the metadata document only."""
        if isinstance(attr_value(value), str) and isinstance(value, str):
            try:
                value.encode()
            except UnicodeEncodeError:
                raise CapabilityError(f"attribute {name!r}: the pnetcdf backend cannot store a string holding an "
                                      "invalid surrogate (netCDF text is UTF-8)") from None

    @classmethod
    def write_problem(cls) -> str | None:
        return _pnetcdf_missing()

    def create(self, path: str, comm, info, variables: Mapping[str, VariablePlan], placement: Mapping[str, Any],
               options: CreateOptions) -> PnetCDFWriteHandle:
        self.require_writable()
        return PnetCDFWriteHandle(path, comm, info, variables, options)

    def read_document(self, path: str) -> dict[str, Any]:
        """Serial, no MPI: parse the CDF header, check the completion mark, read the document and check it against
        the header (every variable where the document says)."""
        def decoded() -> dict[str, Any]:
            header, text = self._read_framed(path)
            meta = metamod.loads_stored(text, path, META_VAR)
            _check_variables(path, header, meta)
            return meta

        return _reading(path, decoded)

    def stored_document(self, path: str) -> bytes:
        """Serial, no MPI: the document's bytes as stored, after :meth:`read_document`'s checks of the framing
        (header, completion mark, the document's checksum), not decoded: the commit compares them with the bytes
        it wrote (the variables' offsets in them came from this header: the write handle's ``storage_info``)."""
        return _reading(path, lambda: self._read_framed(path)[1])

    def _read_framed(self, path: str) -> tuple[CDFHeader, bytes]:
        """Serial: the header and the document's bytes, after the checks of the framing. A layout version mark
        newer than this ckptio's is decided once the framing has been read (:mod:`.version_mark`)."""
        header = read_header(path)
        if header.version != 5 or META_VAR not in header.vars or COMPLETE_VAR not in header.vars:
            raise not_ckptio(path, "pnetcdf", f"a netCDF (CDF-{header.version}) file without the variables "
                                              f"{META_VAR} and {COMPLETE_VAR}")
        version = header.attrs.get("ckptio_format_version")
        if version is not None:
            version = int(np.asarray(version).reshape(-1)[0])
        newer = version_mark.newer(version, FORMAT_VERSION)
        if newer is None:
            return self._framed(path, header)
        try:
            _header, text = _reading(path, lambda: self._framed(path, header))
        except CheckpointError:  # the rest is not what this ckptio reads: a newer layout
            raise version_mark.newer_layout(path, "CDF", newer, FORMAT_VERSION) from None
        raise version_mark.verdict(path, "CDF", newer, FORMAT_VERSION, text)

    def _framed(self, path: str, header: CDFHeader) -> tuple[CDFHeader, bytes]:
        """Serial: :meth:`_read_framed` after the version mark."""
        complete, doc, digest = header.vars[COMPLETE_VAR], header.vars[META_VAR], header.vars.get(META_SUM_VAR)
        if (complete.nc_type != 4 or complete.dimids or not doc.is_record or len(header.record_vars()) != 1
                or digest is None or digest.vsize < CHECKSUM_LEN):
            raise CorruptCheckpointError(f"{path}: the ckptio variables in the CDF header are damaged")
        if header.streaming:
            raise IncompleteCheckpointError(f"{path}: the record count was never written (not committed)")
        if header.data_end() > header.size:
            raise IncompleteCheckpointError(f"{path}: {header.size} bytes, but the header describes "
                                            f"{header.data_end()} (truncated)")
        with open(path, "rb") as f:
            f.seek(complete.begin)
            mark = int(np.frombuffer(f.read(4), dtype=">i4")[0])
            f.seek(doc.begin)
            text = f.read(header.numrecs)
            f.seek(digest.begin)
            stored = f.read(CHECKSUM_LEN)
        if mark != COMPLETE:
            raise IncompleteCheckpointError(f"{path}: no completion mark ({COMPLETE_VAR} = {mark}): the checkpoint "
                                            "was not committed")
        if metamod.checksum(text).encode() != stored:
            raise CorruptCheckpointError(f"{path}: {META_VAR} checksum mismatch (the metadata document is damaged)")
        return header, text

    def extents(self, meta: Mapping[str, Any]) -> list[Extent]:
        return leading_axis_bands(meta)

    def extent_table(self, meta: Mapping[str, Any]) -> ExtentTable:
        return ExtentTable.of_bands(meta)

    def plain_document(self, path: str) -> CheckpointDocument:
        return cdf.plain_document(path)

    def open_extents(self, path: str, comm, info, meta: Mapping[str, Any]) -> ExtentReader:
        return rawio.open_extents(path, comm, info, meta)

    def serial_extents(self, path: str, meta: Mapping[str, Any]) -> ExtentReader:
        return SerialRawReader(path, meta)


def _reading(path: str, read: Callable[[], Any]) -> Any:
    """Serial: ``read()`` with the errors of reading a CDF file as ckptio's (a damaged header's values included)."""
    try:
        return read()
    except CheckpointError:
        raise
    except OSError as exc:
        raise CheckpointIOError(f"{path}: cannot read checkpoint: {exc.strerror or exc}") from None
    except (IndexError, KeyError, TypeError, ValueError) as exc:  # values a damaged header holds
        raise CorruptCheckpointError(f"{path}: the CDF header is damaged ({exc})") from None


def _check_variables(path: str, header: CDFHeader, meta: CheckpointDocument) -> None:
    """Every stored variable of the document is in the header, at its recorded offset, of its size; when every one
    is there but elsewhere, the file was rewritten by another tool (:func:`_moved_by_another_tool`)."""
    why = _moved_by_another_tool(header, meta)
    if why is not None:
        raise RewrittenCheckpointError(f"{path}: rewritten by another tool after ckptio committed it (a global or "
                                       f"variable attribute added, e.g. by ncatted, grows the header and moves the "
                                       f"data; nccopy writes a new layout): {why}; ckptio cannot read or verify "
                                       "the values there (they are probably intact: ncdump shows them); restart from "
                                       "the file as ckptio wrote it")
    try:
        if meta.backend != PnetCDFBackend.name:
            raise ValueError(f"metadata says backend {meta.backend!r}, file is CDF")
        for name, var in meta.variables.items():
            nbytes = var.nbytes
            if not nbytes:
                continue
            cdf = header.vars.get(name)
            if cdf is None or cdf.is_record or cdf.begin != var.file_offset:
                raise ValueError(f"variable {name!r} is not in the CDF header at offset {var.file_offset}")
            if var.storage is None or var.storage.file_dtype is None:
                raise ValueError(f"variable {name!r} has no file dtype in the metadata document")
            if np.dtype(var.file_dtype).itemsize != var.itemsize or cdf.vsize < nbytes:
                raise ValueError(f"variable {name!r} has the wrong size in the CDF header")
            lengths = [header.dims[d][1] for d in cdf.dimids]  # what netCDF tools see (ckptio reads the document's)
            if lengths != list(var.shape):
                raise ValueError(f"variable {name!r} has dimensions {lengths} in the CDF header but shape "
                                 f"{list(var.shape)} in the metadata document")
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptCheckpointError(f"{path}: metadata and CDF header disagree: {exc}") from None


def _moved_by_another_tool(header: CDFHeader, meta: CheckpointDocument) -> str | None:
    """Local: why the file looks rewritten by another tool, or None. The evidence: the metadata document is intact
    (checked before), every variable holding data is a fixed-size variable of its shape and type in the header,
    inside the file, and EVERY one of them begins somewhere else than where ckptio wrote it. A damaged ``begin``
    field (a flipped bit) moves one variable, not all of them, and stays "corrupt"."""
    try:
        shifts = []
        for name, var in meta.variables.items():
            nbytes = var.nbytes
            if not nbytes:
                continue
            cdf = header.vars.get(name)
            recorded = var.file_offset
            if (cdf is None or cdf.is_record or recorded is None or cdf.begin == recorded
                    or [header.dims[d][1] for d in cdf.dimids] != list(var.shape)
                    or np.dtype(NC_TYPES[cdf.nc_type]).itemsize != var.itemsize
                    or cdf.begin + nbytes > header.size):
                return None
            shifts.append((name, cdf.begin, recorded))
    except (KeyError, TypeError, ValueError):
        return None
    if not shifts:
        return None
    deltas = {begin - recorded for _, begin, recorded in shifts}
    how = (f"every variable moved by {deltas.pop():+d} bytes" if len(deltas) == 1 else "every variable moved")
    shown = "; ".join(f"{n!r} at {b}, written at {r}" for n, b, r in shifts[:3])
    return f"{how} ({shown}{f'; ... ({len(shifts)} variables)' if len(shifts) > 3 else ''})"
