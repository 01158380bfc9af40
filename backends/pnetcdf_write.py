"""The PnetCDF backend's write side: the write handle (:class:`PnetCDFWriteHandle`) and the CDF-5 names and values
it writes. :mod:`ckptio.backends.pnetcdf` (the backend: probing, placement, reading) creates the handle.

Writing: every define-mode call is collective and made in the same order on every rank (from the global plan
headers). Each rank posts one nonblocking ``iput_var`` per non-empty block it owns (the rank holding the block table
also posts it); one collective ``wait_all`` per group of variables (:func:`data_groups`, the same on every rank)
writes them, so a rank with several blocks and a rank with none make the same collective calls, and the engine
starts the write-back of each group while PnetCDF copies the next. Each collective call is one step the engine runs
in an agreed phase, since an I/O error such as ENOSPC may reach only the aggregators. Before that, the engine
reserves the space: up to the end of the fixed-size variables after ``enddef``, and the metadata document once its
length is known (under Open MPI's OMPIO, PnetCDF's writes into a full file system "succeed" with the data missing).
Fill mode is off. CDF is big-endian: with the hint ``nc_in_place_swap=enable`` PnetCDF byte-swaps each contiguous
write buffer in place and back once the data is written, where ``disable`` (ckptio's choice until 2026-12) made it
allocate and fill a swapped copy of every block, a second copy of the rank's whole share (measured: 1 GiB on 4 ranks
took 1.79-2.14 s with the copies, 1.23 s without, as long as direct PnetCDF's default, 1.25 s). ckptio hands PnetCDF
only buffers it may change for that moment, and a private copy of any other
(:mod:`ckptio.backends.pnetcdf_buffers`): while ``close()`` writes, the caller's arrays hold their bytes swapped,
and they are restored before it returns, also when it fails. ``hints={"nc_in_place_swap": "disable"}`` keeps PnetCDF
off the caller's memory entirely (for a program whose other threads read the arrays during the checkpoint).
``nc_var_align_size`` = the stripe unit when the data is large enough that aligning every variable to a stripe
wastes under 1/16 of the file.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from ckptio.backends import collective_calls, writeback
from ckptio.backends.base import (
    USER_TABLE_NOTE,
    BlockToWrite,
    CheckpointIOError,
    CreateOptions,
    DocumentSlot,
    Step,
    VariablePlan,
    WrittenBlock,
    user_table_shape,
)
from ckptio.backends.cdf import CDFHeader, read_header
from ckptio.backends.collective_calls import VariableCut
from ckptio.backends.pnetcdf_buffers import write_buffers
from ckptio.backends.pnetcdf_steps import _TABLES, Part, block_parts, data_groups, in_small_steps, within_calls

from ckptio.coord.hints import info_to_dict
from ckptio.model import meta as metamod

FORMAT_VERSION = 2
COMPLETE = 1
COMPLETE_VAR = "ckptio_complete"
META_VAR = "ckptio_metadata"
META_SUM_VAR = "ckptio_metadata_checksum"
CHECKSUM_LEN = 16
IN_PLACE_SWAP = "nc_in_place_swap"  # PnetCDF's hint: byte-swap write buffers in place ("enable") or a copy
NC_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.+-]*$")  # a name netCDF tools take as is
NOTE = (f"ckptio checkpoint: the metadata document (JSON) is the text variable {META_VAR}; the checkpoint "
        f"is complete when {COMPLETE_VAR} = {COMPLETE}")


def _stored(var: VariablePlan) -> bool:
    """CDF cannot hold a variable with a zero-length axis (length 0 means UNLIMITED)."""
    return math.prod(var.shape) > 0


def _file_dtype(dtype: str) -> str:
    return np.dtype(dtype).newbyteorder(">").str


def attr_value(value: Any) -> Any:
    """A JSON-compatible attribute as a netCDF attribute value: text, int64, double or a numeric array;
    anything else (booleans, None, mixed or nested lists) as its JSON text."""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return np.float64(value)
    if isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63:
        return np.int64(value)
    array = metamod.numeric_list_array(value)
    return array if array is not None else json.dumps(value)


def _var_align(options: CreateOptions, variables: Mapping[str, VariablePlan]) -> int | None:
    """``nc_var_align_size`` to request: the alignment ckptio chose (the stripe unit; whole storage objects where
    the file system says, ``options.stripe_unit``) when the holes it leaves before each of the file's fixed-size
    variables stay under 1/16 of the data; None to keep PnetCDF's packing (or the user's hint)."""
    if "nc_var_align_size" in options.hints:
        return None
    stripe = options.stripe_unit
    nfixed = sum(1 for v in variables.values() if _stored(v)) + 3  # + the block table, its checksums, the mark
    total = sum(v.nbytes for v in variables.values())
    return stripe if total >= 16 * nfixed * stripe else None


class PnetCDFWriteHandle:
    """The CDF-5 format's :class:`~ckptio.backends.base.WriteHandle` (see there for who calls what). Every
    define-mode call is collective in PnetCDF and made in the same order on every rank, from the plan's headers."""

    def __init__(self, path: str, comm, info, variables: Mapping[str, VariablePlan], options: CreateOptions):
        import pnetcdf

        from ckptio.coord.mpi import MPI

        self.path, self.variables, self.options = path, variables, options
        self._own = writeback.OwnDescriptor(path)  # what sync() fsyncs (opened at the first sync)
        self.described = options.described
        self._why_independent = options.independent_because  # where OMPIO would corrupt collective transfers
        self.transfer = "collective" if self._why_independent is None else "independent"
        self._written: list[WrittenBlock] = []
        self._memtypes: list[Any] = []  # memory datatypes of strided views, until the data write completed
        self._slot: DocumentSlot | None = None
        self._header: CDFHeader | None = None  # as PnetCDF wrote it at enddef (rank 0 reads it: _defined_header)
        self._pending_buffers: list[np.ndarray] = []  # what posted puts read, until they complete
        # PnetCDF byte-swaps a contiguous write buffer in place (and back once written) unless the file's hint
        # says "disable" (then it swaps a copy it allocates: a second copy of the rank's data; pnetcdf_buffers)
        swap = info.Get(IN_PLACE_SWAP) if info is not None else None
        self.swaps_in_place = swap != "disable"
        file_info = info.Dup() if info is not None else MPI.Info.Create()
        align = _var_align(options, variables)
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
            if NC_NAME.match(key) and not key.startswith("ckptio"):
                f.put_att(key, attr_value(value))
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
                    if NC_NAME.match(key):
                        v.put_att(key, attr_value(value))
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
        """One step per group of consecutive variables (:func:`data_groups`: each variable on its own once it
        holds ``writeback_bytes`` in the file, smaller ones together; one group without early write-back): one
        collective ``wait_all`` (or, for independent transfers, ``wait`` in independent data mode) of the group's
        nonblocking puts, posted here, one ``iput_var`` per non-empty block (the block tables, on the rank that
        holds them, go with the last group). Posting is local, so it is prepared before the first step, where the
        engine agrees on it; between the steps the engine starts the write-back of what the library wrote, so
        the storage works while the next group is copied (FLASH-IO's shape on 2 ranks, medians of alternated
        rounds: 0.089 s in one ``wait_all``, 0.067-0.073 in groups; direct PnetCDF 0.081-0.084)."""
        keep: list[np.ndarray] = []  # the buffers must live until wait_all (abort's too: held by the handle)
        self._pending_buffers = keep
        # a variable larger than one round of OMPIO's collective buffering: one wait_all per call of one round
        rounds = self.options.collective_rounds if self.transfer == "collective" else (0, 0)
        cuts = {name: collective_calls.variable_calls(var.shape, np.dtype(var.dtype).itemsize, *rounds)
                for name, var in self.variables.items() if name in self.vars}  # (the stored ones)
        requests = self._post(blocks, tables, keep, self._memtypes, cuts)
        # (the setting as the range writers take it: at least 64 KiB, and nothing to split for where the system
        # has no sync_file_range: 1 KiB would otherwise be a collective step per small variable)
        nrows, ncols = user_table_shape(self.variables)
        self._steps = groups = within_calls(data_groups(self.variables, list(self.vars), writeback.every_bytes(
            self.options.writeback_bytes, 1 << 62)), self.variables, cuts, rounds,
            _padding(self.options, self.variables), nrows * (ncols + 1) * 8)
        self._written = [WrittenBlock(None, int(b.data.nbytes)) for b in blocks]

        def write(ids: list[int], last: bool) -> None:
            status = [0] * len(ids)
            try:
                if self.transfer == "independent":
                    self._independently(self._io_error(lambda: self.file.wait(len(ids), ids, status)))
                else:
                    self._io_error(lambda: self.file.wait_all(len(ids), ids, status))()
            finally:
                if last:
                    self._free_memtypes()
                    keep.clear()
            failed = [code for code in status if code != 0]
            if failed:
                raise CheckpointIOError(f"{self.path}: PnetCDF could not write {len(failed)} of the data's "
                                        f"{len(ids)} requests of this step (first error code {failed[0]}): no "
                                        "space left on the file system, a quota, or a refused write")

        return [("write the data (wait_all)", functools.partial(write, [r for p in parts for r in requests.get(p, ())],
                                                               k == len(groups) - 1)) for k, parts in enumerate(groups)]

    def _free_memtypes(self) -> None:
        """The memory datatypes of strided views posted for the data write, freed once it completed (or failed)."""
        types, self._memtypes = self._memtypes, []
        for t in types:
            t.Free()

    def _post(self, blocks: Sequence[BlockToWrite], tables: tuple[np.ndarray, np.ndarray] | None,
              keep: list[np.ndarray], memtypes: list[Any], cuts: Mapping[str, VariableCut]) -> dict[Part, list[int]]:
        """Post one ``iput_var`` per non-empty block and run of a call of its variable it meets (its part there, a
        view; and the block tables): their request ids per (variable, call) (the tables' under :data:`_TABLES`)."""
        posted = block_parts(blocks, cuts)
        requests: dict[Part, list[int]] = {}
        for (key, box, _), buf in zip(posted, write_buffers([data for _, _, data in posted], self.swaps_in_place),
                                      strict=True):
            keep.append(buf.data)
            var = self.vars[key[0]]
            if box.ndim == 0:
                request = var.iput_var(buf.data)
            elif buf.memtype is not None:  # a view (halo'd interior): PnetCDF's flexible API reads it in place
                memtypes.append(buf.memtype)
                request = var.iput_var(buf.data, start=list(box.offset), count=list(box.shape),
                                       bufcount=1, buftype=buf.memtype)
            else:
                request = var.iput_var(buf.data, start=list(box.offset), count=list(box.shape))
            requests.setdefault(key, []).append(int(request))
        if tables is not None and self.table is not None:
            rows, sums = tables
            keep += [rows, sums]
            requests[_TABLES] = [int(self.table[0].iput_var(rows)), int(self.table[1].iput_var(sums))]
        return requests

    def written(self) -> list[WrittenBlock]:
        return list(self._written)

    def sync(self) -> None:
        """This rank's writes durable (:class:`.writeback.OwnDescriptor`, not ``ncmpi_sync``, whose
        ``MPI_File_sync`` may fail on one rank alone). Local."""
        self._own.sync()

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

    def _defined_header(self) -> CDFHeader:
        """Rank 0: the header PnetCDF wrote at ``enddef``, read from the file once (its fixed-size variables and the
        record variable's ``begin`` never change after ``enddef``; only the record count does)."""
        if self._header is None:
            self._header = read_header(self.path)
        return self._header

    def storage_info(self) -> dict[str, dict[str, Any]]:
        """Rank 0: every variable's ``begin`` from the header PnetCDF wrote at ``enddef`` (read from the file right
        after it, :meth:`_defined_header`)."""
        header = self._defined_header()
        out: dict[str, dict[str, Any]] = {}
        for name, var in self.variables.items():
            out[name] = {"format": "cdf5", "variable": name if name in self.vars else None,
                         "file_offset": header.vars[name].begin if name in self.vars else None,
                         "file_dtype": _file_dtype(var.dtype)}
        return out

    def in_small_calls(self, below: int) -> set[str]:
        """:func:`~ckptio.backends.pnetcdf_steps.in_small_steps` of the data write (none if independent)."""
        steps = getattr(self, "_steps", [])  # (set by write)
        return in_small_steps(steps, self.variables, below) if self.transfer == "collective" else set()

    def reserved_ranges(self) -> list[tuple[int, int]]:
        """Up to the end of the fixed-size variables, from the header PnetCDF wrote at ``enddef`` (the metadata
        document, the only record variable, goes after them); after :meth:`document_slot`, the document."""
        header = self._defined_header()
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
        """Collective: ``ncmpi_close`` (syncs nothing), then this rank's own ``fsync`` of anything it still wrote."""
        file, self.file = self.file, None
        try:
            self._own.after(file.close)
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
        self._own.close()
        file, self.file = self.file, None
        if file is not None:
            try:
                file.wait_all()
            except Exception:  # the failure being cleaned up is what the caller reports
                pass
            # (cleared, not replaced: a failed step's traceback, which an async checkpoint keeps, refers to it)
            self._pending_buffers.clear()
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


def _padding(options: CreateOptions, variables: Mapping[str, VariablePlan]) -> int:
    """The most PnetCDF may leave between two fixed-size variables: ``nc_var_align_size`` (the user's hint or
    ckptio's, :func:`_var_align`), at least 512 bytes (its default alignment of the variables' section)."""
    given = options.hints.get("nc_var_align_size")
    align = int(given) if given is not None and str(given).isdigit() else (_var_align(options, variables) or 0)
    return max(align, 512)
