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

Writing: every define-mode call is collective and made in the same order on every rank (from the global
plan headers). Each rank posts one nonblocking ``iput_var`` per non-empty block it owns (the rank holding the
block table also posts it); one collective ``wait_all`` writes them all, so a rank with several blocks and a rank
with none make the same collective calls. Each collective call is one step the engine runs in an agreed phase,
since an I/O error such as ENOSPC may reach only the aggregators. Before that, the engine reserves the space: up
to the end of the fixed-size variables after ``enddef``, and the metadata document once its length is known
(under Open MPI's OMPIO, PnetCDF's writes into a full file system "succeed" with the data missing). Fill mode is
off. The hint ``nc_in_place_swap=disable`` keeps PnetCDF from byte-swapping the caller's arrays in place (it
swaps a copy); ``nc_var_align_size`` = the stripe unit when the data is large enough that aligning every variable
to a stripe wastes under 1/16 of the file.

The metadata records ``storage = {"file_offset": begin, "file_dtype": ">f8", ...}`` per variable, with
``begin`` read from the CDF header that PnetCDF wrote (pnetcdf-python's ``inq_offset`` returns a C int and
is unsafe). Restart reads bypass PnetCDF: non-record CDF variables are contiguous C-ordered arrays, read as
raw byte ranges by the aggregators (:mod:`ckptio.backends.rawio`). ``read_metadata`` parses the header with
the small reader below (the format is documented by Unidata and PnetCDF), so ``ckptio inspect`` needs
neither MPI nor PnetCDF to check a file.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from ckptio.backends import cdf, install_hints, rawio
from ckptio.backends.base import (
    Backend,
    BlockToWrite,
    Capabilities,
    CreateOptions,
    DocumentSlot,
    ExtentReader,
    Step,
    WrittenBlock,
)
from ckptio.backends.cdf import NC_TYPES, CDFHeader, read_header
from ckptio.backends.detect import not_ckptio
from ckptio.backends.rawio import SerialRawReader, leading_axis_bands

from ckptio.coord.datatypes import hindexed
from ckptio.coord.hints import DEFAULT_STRIPING_UNIT, info_to_dict, transfer_mode
from ckptio.errors import (
    CapabilityError,
    CheckpointError,
    CheckpointIOError,
    CorruptCheckpointError,
    FormatVersionError,
    IncompleteCheckpointError,
    RewrittenCheckpointError,
)
from ckptio.model import memsel
from ckptio.model import meta as metamod
from ckptio.model.block_table import USER_TABLE_NOTE, user_table_shape
from ckptio.model.document import CheckpointDocument
from ckptio.model.plan import Extent, VariablePlan

# pnetcdf-python initializes MPI when imported: import it only to write a file (reading needs neither it nor MPI)
INSTALL_HINT = install_hints.PNETCDF  # names ckptio-install-parallel (issue 27)


def _pnetcdf_missing() -> str | None:
    try:
        found = importlib.util.find_spec("pnetcdf") is not None
    except (ImportError, ValueError, AttributeError):  # e.g. sys.modules["pnetcdf"] = None (import blocked)
        found = False
    return None if found else f"pnetcdf-python is not installed; {INSTALL_HINT}"

FORMAT_VERSION = 2
COMPLETE = 1
COMPLETE_VAR = "ckptio_complete"
META_VAR = "ckptio_metadata"
META_SUM_VAR = "ckptio_metadata_checksum"
CHECKSUM_LEN = 16
NOTE = (f"ckptio checkpoint: the metadata document (JSON) is the text variable {META_VAR}; the checkpoint "
        f"is complete when {COMPLETE_VAR} = {COMPLETE}")
_NC_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.+-]*$")


def _stored(var: VariablePlan) -> bool:
    """CDF cannot hold a variable with a zero-length axis (length 0 means UNLIMITED)."""
    return math.prod(var.shape) > 0


def _file_dtype(dtype: str) -> str:
    return np.dtype(dtype).newbyteorder(">").str


def _attr_value(value: Any) -> Any:
    """A JSON-compatible attribute as a netCDF attribute value: text, int64, double or a numeric array;
    anything else (booleans, None, mixed or nested lists) as its JSON text."""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return np.float64(value)
    if isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63:
        return np.int64(value)
    if isinstance(value, list) and value and all(isinstance(v, int | float) and not isinstance(v, bool)
                                                 for v in value):
        try:
            return np.asarray(value, dtype=np.int64 if all(isinstance(v, int) for v in value) else np.float64)
        except OverflowError:
            pass
    return json.dumps(value)


def _var_align(hints: Mapping[str, str], variables: Mapping[str, VariablePlan]) -> int | None:
    """``nc_var_align_size`` to request: the stripe unit when the holes it leaves before each of the file's
    fixed-size variables stay under 1/16 of the data; None to keep PnetCDF's packing (or the user's hint)."""
    if "nc_var_align_size" in hints:
        return None
    stripe = int(hints.get("striping_unit", DEFAULT_STRIPING_UNIT))
    nfixed = sum(1 for v in variables.values() if _stored(v)) + 3  # + the block table, its checksums, the mark
    total = sum(v.nbytes for v in variables.values())
    return stripe if total >= 16 * nfixed * stripe else None


class _PnetCDFWriteHandle:
    """The CDF-5 format's :class:`~ckptio.backends.base.WriteHandle` (see there for who calls what). Every
    define-mode call is collective in PnetCDF and made in the same order on every rank, from the plan's headers."""

    def __init__(self, path: str, comm, info, variables: Mapping[str, VariablePlan], options: CreateOptions):
        import pnetcdf
        from mpi4py import MPI

        self.path, self.variables, self.options = path, variables, options
        self.described = options.described
        self.transfer, self._why_independent = transfer_mode()  # independent where OMPIO would corrupt collective
        self._written: list[WrittenBlock] = []
        self._memtypes: list[Any] = []  # memory datatypes of strided views, until the data write completed
        self._slot: DocumentSlot | None = None
        self._pending_buffers: list[np.ndarray] = []  # what posted puts read, until they complete
        file_info = info.Dup() if info is not None else MPI.Info.Create()
        align = _var_align(options.hints, variables)
        if align is not None:
            file_info.Set("nc_var_align_size", str(align))
        try:
            self.file: Any = pnetcdf.File(path, mode="w", format="NC_64BIT_DATA", comm=comm, info=file_info)
        finally:
            file_info.Free()

    def notes(self) -> list[str]:
        """Why the data goes out with independent transfers, when it does."""
        if self._why_independent is None:
            return []
        return [f"ckptio pnetcdf backend: independent data transfers instead of collective ones "
                f"({self._why_independent}); initialise MPI with MPI_THREAD_MULTIPLE or set OMPI_MCA_io=romio321 "
                "to keep collective buffering"]

    def define(self) -> None:
        """Collective, define mode: dimensions, variables and attributes, then ``enddef``."""
        self._define(self.options.attrs)

    def _define(self, attrs: Mapping[str, Any]) -> None:
        """Collective, define mode: dimensions, variables and attributes, then ``enddef``."""
        import pnetcdf

        f = self.file
        f.set_fill(pnetcdf.NC_NOFILL)
        f.put_att("ckptio_format_version", np.int32(FORMAT_VERSION))
        f.put_att("ckptio_version", metamod.__version__)
        f.put_att("ckptio_note", NOTE)
        for key, value in attrs.items():
            if _NC_NAME.match(key) and not key.startswith("ckptio"):
                f.put_att(key, _attr_value(value))
        f.def_dim("ckptio_checksum_len", CHECKSUM_LEN)
        self.vars: dict[str, Any] = {}
        defined: set[str] = set()
        for name, var in self.variables.items():
            if _stored(var):
                described = self.described.get(name, {})
                dims = described.get("dims") or metamod.default_dims(name, len(var.shape))
                for dim, n in zip(dims, var.shape, strict=True):
                    if dim not in defined:  # shared: same name, same length (checked when declared)
                        f.def_dim(dim, n)
                        defined.add(dim)
                v = f.def_var(name, np.dtype(var.dtype), tuple(dims))
                for key, value in described.get("attrs", {}).items():
                    if _NC_NAME.match(key):
                        v.put_att(key, _attr_value(value))
                self.vars[name] = v
        nrows, ncols = user_table_shape(self.variables)  # the rows are the planning rank's (the whole plan)
        self.table: tuple[Any, Any] | None = None
        if nrows:  # CDF has no zero-length fixed dimension
            f.def_dim("ckptio_nblocks", nrows)
            f.def_dim("ckptio_blockcols", ncols)
            table = f.def_var("ckptio_blocks", np.dtype(np.int64), ("ckptio_nblocks", "ckptio_blockcols"))
            table.put_att("columns", USER_TABLE_NOTE)
            table.put_att("variables", " ".join(self.variables))
            checksums = f.def_var("ckptio_block_checksums", np.dtype(np.uint64), ("ckptio_nblocks",))
            checksums.put_att("algorithm", metamod.CHECKSUM_ALGORITHM)
            self.table = (table, checksums)
        self.metadata_checksum = f.def_var(META_SUM_VAR, "S1", ("ckptio_checksum_len",))
        self.complete = f.def_var(COMPLETE_VAR, np.dtype(np.int32), ())
        f.def_dim(f"{META_VAR}_len", -1)
        self.metadata = f.def_var(META_VAR, "S1", (f"{META_VAR}_len",))
        f.enddef()

    def write(self, blocks: Sequence[BlockToWrite], tables: tuple[np.ndarray, np.ndarray] | None) -> list[Step]:
        """One step: one collective ``wait_all`` (or, for independent transfers, ``wait`` in independent data mode)
        of the nonblocking puts posted here, one ``iput_var`` per non-empty block (and the block tables, on the rank
        that holds them; posting is local, so it is prepared before the step, where the engine agrees on it)."""
        keep: list[np.ndarray] = []  # the buffers must live until wait_all (abort's too: held by the handle)
        self._pending_buffers = keep
        self._post(blocks, tables, keep, self._memtypes)

        def write() -> None:
            try:
                if self.transfer == "independent":
                    self._independently(self._io_error(self.file.wait))
                else:
                    self._io_error(self.file.wait_all)()
            finally:
                self._free_memtypes()
                keep.clear()

        self._written = [WrittenBlock(None, int(b.data.nbytes)) for b in blocks]
        return [("write the data (wait_all)", write)]

    def _free_memtypes(self) -> None:
        """The memory datatypes of strided views posted for the data write, freed once it completed (or failed)."""
        types, self._memtypes = self._memtypes, []
        for t in types:
            t.Free()

    def _post(self, blocks: Sequence[BlockToWrite], tables: tuple[np.ndarray, np.ndarray] | None,
              keep: list[np.ndarray], memtypes: list[Any]) -> None:
        for block in blocks:
            if block.box.size == 0 or block.var not in self.vars:
                continue
            data = block.data
            arr = data if data.dtype.isnative else data.astype(data.dtype.newbyteorder("="))
            keep.append(arr)
            if block.box.ndim == 0:
                self.vars[block.var].iput_var(arr)
            elif not arr.flags.c_contiguous:  # a view (halo'd interior): PnetCDF's flexible API reads it in place
                memtypes.append(_memory_type(arr))
                self.vars[block.var].iput_var(memsel.span(arr), start=list(block.box.offset),
                                              count=list(block.box.shape), bufcount=1, buftype=memtypes[-1])
            else:
                self.vars[block.var].iput_var(arr, start=list(block.box.offset), count=list(block.box.shape))
        if tables is not None and self.table is not None:
            rows, sums = tables
            keep += [rows, sums]
            self.table[0].iput_var(rows)
            self.table[1].iput_var(sums)

    def written(self) -> list[WrittenBlock]:
        return list(self._written)

    def sync(self) -> None:
        self._io_error(self.file.sync)()

    def _io_error(self, call: Callable[[], Any]) -> Callable[[], Any]:
        """``call`` with PnetCDF's write errors (pnetcdf-python raises RuntimeError, e.g. "Unknown error occurs
        in writing file" when ROMIO gets ENOSPC) turned into CheckpointIOError naming the file."""
        def wrapped() -> Any:
            try:
                return call()
            except RuntimeError as exc:
                raise CheckpointIOError(f"{self.path}: PnetCDF could not write the data ({exc}): no space left on "
                                        "the file system, a quota, or a refused write") from exc
        return wrapped

    def storage_info(self) -> dict[str, dict[str, Any]]:
        """Rank 0: every variable's ``begin`` from the header PnetCDF wrote at ``enddef`` (synced since)."""
        header = read_header(self.path)
        out: dict[str, dict[str, Any]] = {}
        for name, var in self.variables.items():
            out[name] = {"format": "cdf5", "variable": name if name in self.vars else None,
                         "file_offset": header.vars[name].begin if name in self.vars else None,
                         "file_dtype": _file_dtype(var.dtype)}
        return out

    def reserved_ranges(self) -> list[tuple[int, int]]:
        """Up to the end of the fixed-size variables, from the header PnetCDF wrote at ``enddef`` (the metadata
        document, the only record variable, goes after them); after :meth:`document_slot`, the document."""
        header = read_header(self.path)
        if self._slot is not None:
            begin = header.vars[META_VAR].begin
            return [(begin, begin + self._slot.nbytes)]
        return [(0, max(v.begin + v.vsize for v in header.vars.values() if not v.is_record))]

    def effective_hints(self) -> dict[str, str]:
        info = self.file.inq_info()
        try:
            hints = info_to_dict(info)
        finally:
            info.Free()
        hints["ckptio_pnetcdf_transfer"] = self.transfer
        return hints

    def document_slot(self, slot: DocumentSlot) -> None:
        """Nothing to create: the document is the record variable defined with the rest (any length)."""
        self._slot = slot

    def write_document(self, document: bytes | None) -> list[Step]:
        """The document and its checksum: collective puts, the ranks without the document with empty counts (or
        puts in independent data mode by the rank that holds it)."""
        assert self._slot is not None
        text = np.frombuffer(document or b"", dtype="S1")
        digest = np.frombuffer(self._slot.checksum.encode() if document is not None else b"", dtype="S1")
        if self.transfer == "independent":
            def put() -> None:
                if document is not None:
                    self.metadata.put_var(text, start=[0], count=[text.size])
                    self.metadata_checksum.put_var(digest, start=[0], count=[digest.size])

            return [("write the metadata document and its checksum", lambda: self._independently(put))]
        return [("write the metadata document", lambda: self.metadata.put_var_all(text, start=[0], count=[text.size])),
                ("write the metadata checksum",
                 lambda: self.metadata_checksum.put_var_all(digest, start=[0], count=[digest.size]))]

    def mark_complete(self, mark: bool) -> list[Step]:
        """``ckptio_complete`` = 1, put in independent data mode by the rank the engine chose."""
        def put() -> None:
            if mark:
                self.complete.put_var(np.array(COMPLETE, dtype=np.int32))

        return [("write the completion mark", lambda: self._independently(put))]

    def close(self) -> None:
        file, self.file = self.file, None
        try:
            file.close()
        finally:
            _never_closed_by_gc(file)

    def _independently(self, write: Callable[[], Any]) -> None:
        """Collective: ``write`` (local puts or waits) in PnetCDF's independent data mode. Entering and leaving that
        mode are collective, so a failure of ``write`` is raised only after ``end_indep`` (every rank leaves the
        mode), for the engine to agree on."""
        self.file.begin_indep()
        error: BaseException | None = None
        try:
            write()
        except Exception as exc:
            error = exc
        self.file.end_indep()
        if error is not None:
            raise error

    def abort(self) -> None:
        """Collective over the file's ranks (the engine aborts on every rank holding a handle, after an agreed
        failure): complete the puts still pending, then close. ``wait_all`` first, on every rank (with nothing
        pending it only synchronizes; in define mode it fails alike everywhere): a file closed with pending puts
        has PnetCDF cancel them inside ``ncmpi_close``, and after that the next checkpoint's ``wait_all`` hung on
        every rank (Open MPI's OMPIO; found by the rank-leaving tests, SIGINT on one rank before the data write)."""
        file, self.file = self.file, None
        if file is not None:
            try:
                file.wait_all()
            except Exception:  # the failure being cleaned up is what the caller reports
                pass
            self._pending_buffers = []
            try:
                file.close()
            except Exception:  # best effort after a failure (puts may still be pending: the file is discarded)
                pass
            finally:
                _never_closed_by_gc(file)
        self._free_memtypes()


def _never_closed_by_gc(file: Any) -> None:
    """Local: after ckptio's own (collective) close of ``file``, whether it succeeded or raised, its object never
    closes the file again. pnetcdf-python's ``File.__dealloc__`` calls ``ncmpi_close`` when ``_isopen`` is still set,
    which a close that raised leaves set; ``ncmpi_close`` is collective, so a file object garbage collected later, at
    a random point on one rank, hung the whole job (that rank in MPI_File_close's barrier, the others in the next
    agreement: found by the rank-leaving tests, SIGINT on one rank at each phase of a PnetCDF checkpoint)."""
    try:
        file._isopen = 0
    except AttributeError:  # another pnetcdf-python: nothing to switch off
        pass


class PnetCDFBackend(Backend):
    name = "pnetcdf"
    format_version = FORMAT_VERSION
    capabilities = Capabilities(compression=False, segments=True, complex_dtypes=False, bool_dtype=False,
                                unsigned_dtypes=True, float16=False,
                                readable_by=("ckptio", "ncmpidump", "ncdump", "netCDF4-python", "any CDF-5 reader"))
    extra_hints = {"nc_in_place_swap": "disable"}  # never byte-swap the caller's arrays in place

    signature = b"CDF\x05"  # ckptio writes CDF-5 only (sniff also accepts CDF-1 and CDF-2 files)

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        return head[:4] in (b"CDF\x01", b"CDF\x02", b"CDF\x05")

    def check_attr(self, name: str, value: Any) -> None:
        """What PnetCDF refuses only when the file is defined (measured with pnetcdf-python): a string stored
        as netCDF text that is not valid UTF-8 (a lone surrogate). NUL characters, long strings and long lists
        are stored; names that are not netCDF names are kept in the metadata document only."""
        if isinstance(_attr_value(value), str) and isinstance(value, str):
            try:
                value.encode()
            except UnicodeEncodeError:
                raise CapabilityError(f"attribute {name!r}: the pnetcdf backend cannot store a string holding an "
                                      "invalid surrogate (netCDF text is UTF-8)") from None

    @classmethod
    def write_problem(cls) -> str | None:
        return _pnetcdf_missing()

    def create(self, path: str, comm, info, variables: Mapping[str, VariablePlan], placement: Mapping[str, Any],
               options: CreateOptions) -> _PnetCDFWriteHandle:
        self.require_writable()
        return _PnetCDFWriteHandle(path, comm, info, variables, options)

    def read_document(self, path: str) -> dict[str, Any]:
        """Serial, no MPI: parse the CDF header, check the completion mark, read the document."""
        try:
            return self._read_metadata(path)
        except CheckpointError:
            raise
        except OSError as exc:
            raise CheckpointIOError(f"{path}: cannot read checkpoint: {exc.strerror or exc}") from None
        except (IndexError, KeyError, TypeError, ValueError) as exc:  # values a damaged header holds
            raise CorruptCheckpointError(f"{path}: the CDF header is damaged ({exc})") from None

    def _read_metadata(self, path: str) -> dict[str, Any]:
        header = read_header(path)
        if header.version != 5 or META_VAR not in header.vars or COMPLETE_VAR not in header.vars:
            raise not_ckptio(path, "pnetcdf", f"a netCDF (CDF-{header.version}) file without the variables "
                                              f"{META_VAR} and {COMPLETE_VAR}")
        version = header.attrs.get("ckptio_format_version")
        if version is not None:
            version = int(np.asarray(version).reshape(-1)[0])
        if version is not None and version > FORMAT_VERSION:
            raise FormatVersionError(f"{path}: ckptio CDF layout version {version} is newer than this ckptio "
                                     f"supports (version {FORMAT_VERSION})")
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
        try:
            meta = metamod.loads(text)
        except FormatVersionError:
            raise
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptCheckpointError(f"{path}: {META_VAR} is not valid metadata ({exc})") from None
        _check_variables(path, header, meta)
        return meta

    def extents(self, meta: Mapping[str, Any]) -> list[Extent]:
        return leading_axis_bands(meta)

    def extent_table(self, meta: Mapping[str, Any]):
        from ckptio.model import extent_table

        return extent_table.from_bands(meta)

    def plain_document(self, path: str) -> CheckpointDocument:
        return cdf.plain_document(path)

    def open_extents(self, path: str, comm, info, meta: Mapping[str, Any]) -> ExtentReader:
        return rawio.open_extent_reader(path, comm, info, meta)

    def serial_extents(self, path: str, meta: Mapping[str, Any]) -> ExtentReader:
        return SerialRawReader(path, meta)


def _check_variables(path: str, header: CDFHeader, meta: Mapping[str, Any]) -> None:
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
        if meta["backend"] != PnetCDFBackend.name:
            raise ValueError(f"metadata says backend {meta['backend']!r}, file is CDF")
        for name, var in meta["variables"].items():
            nbytes = math.prod(var["shape"]) * np.dtype(var["dtype"]).itemsize
            storage = var.get("storage", {})
            if not nbytes:
                continue
            cdf = header.vars.get(name)
            if cdf is None or cdf.is_record or cdf.begin != storage.get("file_offset"):
                raise ValueError(f"variable {name!r} is not in the CDF header at offset {storage.get('file_offset')}")
            if np.dtype(storage["file_dtype"]).itemsize != np.dtype(var["dtype"]).itemsize or cdf.vsize < nbytes:
                raise ValueError(f"variable {name!r} has the wrong size in the CDF header")
            lengths = [header.dims[d][1] for d in cdf.dimids]  # what netCDF tools see (ckptio reads the document's)
            if lengths != list(var["shape"]):
                raise ValueError(f"variable {name!r} has dimensions {lengths} in the CDF header but shape "
                                 f"{list(var['shape'])} in the metadata document")
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptCheckpointError(f"{path}: metadata and CDF header disagree: {exc}") from None


def _moved_by_another_tool(header: CDFHeader, meta: Mapping[str, Any]) -> str | None:
    """Local: why the file looks rewritten by another tool, or None. The evidence: the metadata document is intact
    (checked before), every variable holding data is a fixed-size variable of its shape and type in the header,
    inside the file, and EVERY one of them begins somewhere else than where ckptio wrote it. A damaged ``begin``
    field (a flipped bit) moves one variable, not all of them, and stays "corrupt"."""
    try:
        shifts = []
        for name, var in meta["variables"].items():
            nbytes = math.prod(var["shape"]) * np.dtype(var["dtype"]).itemsize
            if not nbytes:
                continue
            cdf = header.vars.get(name)
            recorded = var.get("storage", {}).get("file_offset")
            if (cdf is None or cdf.is_record or recorded is None or cdf.begin == recorded
                    or [header.dims[d][1] for d in cdf.dimids] != list(var["shape"])
                    or np.dtype(NC_TYPES[cdf.nc_type]).itemsize != np.dtype(var["dtype"]).itemsize
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


def _memory_type(view: np.ndarray):
    """A committed MPI memory datatype of a strided view's elements relative to :func:`ckptio.model.memsel.span`: an
    hindexed type of the element type (PnetCDF's flexible API takes the element type from it) over the view's
    runs, built with the classic constructor (ROMIO in MPICH 4.0 cannot flatten mpi4py's large-count types,
    see :func:`ckptio.coord.datatypes.hindexed`). Local."""
    from mpi4py.util.dtlib import from_numpy_dtype

    offsets, run = memsel.runs(view)
    element = from_numpy_dtype(view.dtype)
    return hindexed(np.full(offsets.size, run // view.dtype.itemsize, np.int64), offsets, element)
