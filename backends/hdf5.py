"""Parallel HDF5 backend (``backend="hdf5"``): h5py with the ``mpio`` driver; files stay plain HDF5.

File layout::

    /<name>                  one dataset per variable, in its GLOBAL shape and declared dtype; contiguous
                             layout, allocated at creation, never filled (no useless fill writes), aligned
                             to the stripe unit when at least one stripe long; per-rank segments are
                             datasets of all ranks' rows; the variable's own attributes (``attrs=`` of
                             ``write()``) as HDF5 attributes
    /<dim>                   a dimension scale per dimension name declared with ``dims=`` (one for every
                             variable using it), as netCDF-4 writes them, so netCDF-C, h5netcdf and xarray see
                             shared named dimensions: a 1-D variable named like its only dimension is itself
                             the scale (a coordinate variable); otherwise a dataset of the dimension's length,
                             of 1-byte integers never written (1 byte per element allocated: netCDF-4 uses 4),
                             whose NAME says "This is a netCDF dimension but not a netCDF variable". Variables
                             declared without ``dims`` have no scales (readers show ``phony_dim_N``)
    /  (attributes)          the checkpoint's attributes (numbers, strings and numeric lists natively,
                             anything else as JSON text)
    /ckptio                  group: attributes ``format_version``, ``ckptio_version``,
                             ``metadata_checksum`` (xxh3-64 of the document) and ``complete`` (= 1, the
                             completion mark, written last)
    /ckptio/metadata         the metadata document of ckptio.meta (JSON), a scalar fixed-length string
                             dataset: not a variable-length string attribute, because HDF5 1.10 trusts the
                             lengths stored in its global heap and a damaged one crashes the reader
    /ckptio/block_table      int64 (blocks, 2 + 2n): every block of every variable, ``variable, rank,
                             offset[0..n), shape[0..n)`` (attribute ``variables`` names the variable indices),
    /ckptio/block_checksums  uint64 (blocks,): their xxh3-64 (attribute ``algorithm``; each table has its own
                             ``description``); plain integer datasets, so plain HDF5 and
                             netCDF users see who wrote what (a copy: ckptio reads the document's). Layout
                             version 1 had a compound table per variable in /ckptio/blocks with the checksum as
                             a 16-character string, which netCDF-C 4.9 hides and 4.10 crashes on; version-1
                             files are still read (their document is schema 1)

The metadata document records, per variable, ``storage = {"file_offset": ..., "file_dtype": ...}``: the
dataset's byte offset in the file (``H5Dget_offset``). Because datasets are contiguous and unfiltered,
restart reads bypass HDF5: the aggregators read leading-axis bands of every dataset as raw byte ranges with
MPI-IO (:mod:`ckptio.backends.rawio`), so the two-phase reader works the same as for the native format.

Writing: all metadata operations (file, dataset, group and attribute creation) are collective in parallel
HDF5, so every rank makes them in the same order with the same arguments (the plan is the same on every
rank). Data goes out with collective ``H5Dwrite`` calls (``H5FD_MPIO_COLLECTIVE`` transfer property),
normally ONE per variable: a rank's blocks of a variable are written as a union of hyperslabs with their
elements concatenated in memory (HDF5 transfers a union in row-major order of the file dataspace, which is
the concatenation of the blocks when their leading-axis intervals are disjoint). A rank whose blocks of one
variable share leading-axis rows (e.g. two tiles side by side) needs several such groups; every rank then
makes as many calls as the rank needing the most (computed from the global plan, no communication), with
an empty selection where it has nothing left, so the collective calls always match. Every data write, flush
and rank-0-only write is followed by an agreement (:func:`ckptio.coord.run`): with collective buffering an
I/O error such as ENOSPC reaches only the aggregators, and the others must not go on into the next collective
call.

Space: after the define phase (every dataset allocated, nothing written yet; the block tables are written with
the data) the writer reserves HDF5's end of allocated space, and :meth:`_HDF5WriteSession.commit` reserves
through the end of the metadata document's dataset, created last, before writing it. HDF5 1.10 cannot recover
from a failed flush (the file can no longer be closed and its exit handler crashes), so it must never meet a
full file system; see :meth:`_HDF5WriteSession.abort` for what happens after other failures.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from struct import error as struct_error
from typing import Any

import numpy as np

from ckptio import coord, install_hints, memsel
from ckptio import meta as metamod
from ckptio.block_table import USER_CHECKSUMS_NOTE, USER_TABLE_NOTE, user_table, user_table_shape
from ckptio.errors import (
    CapabilityError,
    CheckpointError,
    CheckpointIOError,
    CorruptCheckpointError,
    FormatVersionError,
    IncompleteCheckpointError,
    RewrittenCheckpointError,
)
from ckptio.hints import DEFAULT_STRIPING_UNIT, data_transfer_mode, info_to_dict
from ckptio.layout import Box
from ckptio.plan import BlockPlan, Extent, VariablePlan

from . import rawio
from .base import Backend, Capabilities, ExtentReader, WriteSession, WrittenBlock, not_ckptio, register
from .rawio import SerialRawReader, check_data_landed, leading_axis_bands, reserve_collectively

# Reading needs no h5py (h5lite parses ckptio's HDF5 files); writing needs h5py built with parallel HDF5. It is
# imported on first use, never by ``import ckptio`` (issue 16: h5py and libhdf5 cost ~100 opened files and ~20 MB
# per rank at startup). Every use of the module global below comes after _load_h5py().
h5py: Any = None
_h5py_tried = False


def _load_h5py() -> Any:
    """The h5py module, imported on the first call; None when it cannot be imported (any rank, not collective)."""
    global h5py, _h5py_tried
    if not _h5py_tried:
        try:
            import h5py as module
        except ImportError:
            module = None
        h5py, _h5py_tried = module, True
    return h5py


INSTALL_HINT = install_hints.HDF5  # names ckptio-install-parallel and the Debian setting (issue 27)


def _h5py_write_problem() -> str | None:
    if _load_h5py() is None:
        return f"h5py is not installed; {INSTALL_HINT}"
    if not h5py.get_config().mpi:
        return f"h5py {h5py.__version__} is built without MPI (a serial HDF5 wheel); {INSTALL_HINT}"
    return None

SIGNATURE = b"\x89HDF\r\n\x1a\n"
# The NAME of a dimension scale that is no variable, as netCDF-C and h5netcdf write and recognise it
NOT_A_VARIABLE = "This is a netCDF dimension but not a netCDF variable.%10d"
# A dimension scale lists the datasets attached to it in one attribute (REFERENCE_LIST, 16 bytes per dataset),
# which HDF5 keeps in the scale's object header, at most 64 KiB: attaching a 4086th dataset failed (measured,
# HDF5 1.12 through h5py). Refused beyond this many, before anything is attached.
MAX_SCALE_USERS = 4000
FORMAT_VERSION = 2
MAX_LISTED_NAMES = 60_000  # the 'variables' attribute of the block table (HDF5 attributes: 64 KiB)
GROUP = "ckptio"
COMPLETE = 1


def _write_groups(boxes: Sequence[Box]) -> list[list[int]]:
    """Indices of ``boxes`` (non-empty, of one variable, on one rank) in groups whose leading-axis intervals
    are pairwise disjoint, each sorted by leading offset: one collective write per group. Greedy interval
    partitioning in order of start, so the number of groups is the largest number of boxes sharing a row."""
    if boxes and boxes[0].ndim == 0:
        return [[i] for i in range(len(boxes))]  # a scalar: one block at most
    groups: list[list[int]] = []
    for i in sorted(range(len(boxes)), key=lambda i: boxes[i].offset[0]):
        for group in groups:
            if boxes[group[-1]].end[0] <= boxes[i].offset[0]:
                group.append(i)
                break
        else:
            groups.append([i])
    return groups


def _dcpl():
    """Dataset creation properties of every ckptio dataset: contiguous, allocated at creation, never filled."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.CONTIGUOUS)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    return dcpl


def _write_calls(var: VariablePlan) -> int:
    """Coordinator: the collective ``H5Dwrite`` calls of one variable, the most any rank needs (every rank makes
    that many): 1 when no rank has more than one non-empty block (no Python step per block), else the groups of
    :func:`_write_groups` of the ranks that have several."""
    rows = np.flatnonzero(var.size.prod(axis=1) > 0)
    if not len(rows):
        return 0
    rows = rows[np.argsort(var.rank[rows], kind="stable")]  # grouped by rank, in declaration order
    _, starts, counts = np.unique(var.rank[rows], return_index=True, return_counts=True)
    calls = 1
    for start, count in zip(starts[counts > 1].tolist(), counts[counts > 1].tolist(), strict=True):
        boxes = [Box(tuple(var.offset[i].tolist()), tuple(var.size[i].tolist()))
                 for i in rows[start:start + count].tolist()]
        calls = max(calls, len(_write_groups(boxes)))
    return calls


ATTR_MESSAGE_LIMIT = 65472  # bytes of data + name in one attribute header message (measured, HDF5 1.12)


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _attr_value(value: Any) -> Any:
    """A JSON-compatible attribute as h5py stores it natively, or as JSON text when HDF5 has no match."""
    if isinstance(value, bool | str | float):
        return value
    if isinstance(value, int) and -2**63 <= value < 2**63:
        return np.int64(value)
    if isinstance(value, list) and value and all(isinstance(v, int | float) and not isinstance(v, bool)
                                                 for v in value):
        try:
            return np.asarray(value, dtype=np.int64 if all(isinstance(v, int) for v in value) else np.float64)
        except OverflowError:
            pass
    return json.dumps(value)


def open_for_reading(path: str) -> h5py.File:
    """Serial: ``path`` opened read-only without file locking (a checkpoint on a file system without locks reads
    as well). HDF5 refuses a second open of a file this process already holds with other locking flags ("file
    locking flag values don't match": the user's own ``h5py.File(path)``): then with the default flags, so a
    good checkpoint is not reported as damaged because the program has it open."""
    try:
        return h5py.File(path, "r", locking=False)
    except OSError as exc:
        if "file locking flag values don't match" not in str(exc):
            raise
        return h5py.File(path, "r")


def _mpi_file_info(h5file: h5py.File) -> dict[str, str]:
    """Hints of the MPI file under an mpio HDF5 file (``MPI_File_get_info``), via ``H5Fget_vfd_handle``.

    h5py does not expose the handle (its ``get_vfd_handle`` reads an int, a POSIX descriptor), so this calls
    the HDF5 C function through ctypes (hid_t is 64-bit since HDF5 1.10). Local; raises on any failure.
    """
    from mpi4py import MPI

    lib = ctypes.CDLL(h5py.h5f.__file__)  # dlsym on it also searches its dependency libhdf5
    get_handle = lib.H5Fget_vfd_handle
    get_handle.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p)]
    get_handle.restype = ctypes.c_int
    handle = ctypes.c_void_p()
    if get_handle(h5file.id.id, 0, ctypes.byref(handle)) < 0 or not handle.value:  # 0 = H5P_DEFAULT
        raise OSError("H5Fget_vfd_handle failed")
    fh = MPI.File.fromhandle(ctypes.c_void_p.from_address(handle.value).value)  # MPI_File is a pointer type
    info = fh.Get_info()
    try:
        return info_to_dict(info)
    finally:
        info.Free()


class _HDF5WriteSession(WriteSession):
    """Collective: the constructor creates the file, every dataset and the block tables on every rank."""

    def __init__(self, path: str, comm, info, variables: Mapping[str, VariablePlan], options: Mapping[str, Any]):
        from mpi4py import MPI

        stripe_unit = int(options.get("hints", {}).get("striping_unit", DEFAULT_STRIPING_UNIT))
        self.path, self.comm = path, comm
        self.variables = variables
        self.described: Mapping[str, Mapping[str, Any]] = options.get("described", {})
        self.attrs: Mapping[str, Any] = options.get("attrs", {})
        rank = comm.Get_rank()
        # local index -> variable name of this rank's blocks; collective H5Dwrite calls per variable (all ranks)
        self._mine = {i: name for name, v in variables.items() for i in v.local_index[v.rank == rank].tolist()}
        self._ncalls: Mapping[str, int] = options["ncalls"]
        self.datasets: dict[str, h5py.Dataset] = {}
        self._dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
        self.transfer = data_transfer_mode("hdf5", rank)  # "independent" where OMPIO would corrupt collective I/O
        self._dxpl.set_dxpl_mpio(h5py.h5fd.MPIO_INDEPENDENT if self.transfer == "independent"
                                 else h5py.h5fd.MPIO_COLLECTIVE)
        self.file: h5py.File | None = coord.run(comm, "create the HDF5 file", lambda: h5py.File(
            path, "w", driver="mpio", comm=comm, info=info if info is not None else MPI.Info(),
            alignment_threshold=stripe_unit, alignment_interval=stripe_unit))
        try:
            self._define()
        except BaseException:
            self.abort()
            raise

    def _define(self) -> None:
        """Collective: every dataset, the /ckptio group and the block tables (their rows are written by rank 0
        in :meth:`write_blocks`, after the space was reserved)."""
        for name, var in self.variables.items():
            dset = self.file.create_dataset(name, shape=var.shape, dtype=np.dtype(var.dtype), dcpl=_dcpl())
            for key, value in self.described.get(name, {}).get("attrs", {}).items():
                dset.attrs[key] = _attr_value(value)
            self.datasets[name] = dset
        scales = self._dimension_scales()
        group = self.file.create_group(GROUP)
        group.attrs["format_version"] = np.int64(FORMAT_VERSION)
        group.attrs["ckptio_version"] = np.bytes_(metamod.__version__)
        # the tables' rows are rank 0's (it alone has the whole plan); every rank creates the same datasets
        nrows, ncols = user_table_shape(self.variables)
        rows, sums = user_table(self.variables)[1:] if self.comm.Get_rank() == 0 else (None, None)
        self._tables: list[tuple[h5py.Dataset, np.ndarray | None]] = []
        for key, shape, dtype, array, note in (("block_table", (nrows, ncols), np.int64, rows, USER_TABLE_NOTE),
                                               ("block_checksums", (nrows,), np.uint64, sums, USER_CHECKSUMS_NOTE)):
            dset = group.create_dataset(key, shape=shape, dtype=dtype, dcpl=_dcpl())
            dset.attrs["description"] = note  # each its own (issue 27: the checksums carried the table's)
            self._tables.append((dset, array))
        self._tables[1][0].attrs["algorithm"] = metamod.CHECKSUM_ALGORITHM  # as netCDF's ckptio_block_checksums
        names = list(self.variables)
        listed = " ".join(names)  # an attribute holds at most 64 KiB in the file's default object headers
        self._tables[0][0].attrs["variables"] = (
            listed if len(listed) <= MAX_LISTED_NAMES else
            f"(more than {MAX_LISTED_NAMES} bytes of names: see /{GROUP}/metadata)")
        # Every dataset is allocated now (ALLOC_TIME_EARLY): HDF5's end of allocated space covers all the data
        # and the metadata so far. H5Fget_filesize reports it (max of EOA and EOF) until the mpio driver's first
        # write -- raw data, or metadata the cache evicts while thousands of datasets are created -- after which
        # it fails ("driver get_eof request failed"); H5Fget_eoa refuses the mpio driver. The end of the last
        # allocated dataset is a lower bound that always works; take the larger of the two.
        try:
            file_end = int(self.file.id.get_filesize())
        except RuntimeError:
            file_end = 0
        datasets = [*self.datasets.values(), *scales, *(dset for dset, _ in self._tables)]
        data_end = max((int(d.id.get_offset()) + int(d.id.get_storage_size()) for d in datasets
                        if d.id.get_offset() is not None), default=0)
        self._data_end = max(file_end, data_end)

    def _dimension_scales(self) -> list[h5py.Dataset]:
        """Collective (dataset and attribute creation): one dimension scale per declared dimension name, attached
        to every variable that uses it (see the module docstring). Returns the datasets created for them."""
        lengths: dict[str, int] = {}
        users: dict[str, int] = {}
        for name, d in self.described.items():
            for dim, n in zip(d.get("dims", ()), self.variables[name].shape, strict=True):
                lengths[dim] = n
                users[dim] = users.get(dim, 0) + (dim != name)  # a coordinate variable is its own scale
        crowded = sorted(dim for dim, count in users.items() if count > MAX_SCALE_USERS)
        if crowded:
            raise CapabilityError(f"dimension {crowded[0]!r} is shared by {users[crowded[0]]} variables; the hdf5 "
                                  f"backend attaches a dimension scale to at most {MAX_SCALE_USERS} datasets (HDF5 "
                                  "lists them in one attribute of at most 64 KiB): split the dimension name, or "
                                  "use backend='mpiio' or 'pnetcdf'")
        scales: dict[str, h5py.Dataset] = {}
        created = []
        for dim in sorted(lengths):
            if dim in self.datasets:  # a coordinate variable (checked when declared): its dataset is the scale
                scales[dim] = self.datasets[dim]
                scales[dim].make_scale(dim)
            else:
                scales[dim] = self.file.create_dataset(dim, shape=(lengths[dim],), dtype=np.int8, dcpl=_dcpl())
                scales[dim].make_scale(NOT_A_VARIABLE % lengths[dim])
                created.append(scales[dim])
        for name in sorted(self.described):
            dset = self.datasets[name]
            for axis, dim in enumerate(self.described[name].get("dims", ())):
                if scales[dim] is not dset:
                    dset.dims[axis].attach_scale(scales[dim])
        return created

    def write_blocks(self, blocks: Sequence[tuple[BlockPlan, np.ndarray]]) -> list[WrittenBlock]:
        """Collective: ``self._ncalls[name]`` collective ``H5Dwrite`` calls per variable, on every rank."""
        by_var: dict[str, list[tuple[Box, np.ndarray]]] = {}
        written = []
        for plan, data in blocks:
            if plan.box.size > 0:
                by_var.setdefault(self._mine[plan.local_index], []).append((plan.box, data))
            written.append(WrittenBlock(None, int(data.nbytes)))
        def write_tables() -> None:  # rank 0, independent raw-data writes (the datasets are allocated already)
            if self.comm.Get_rank() == 0:
                for dset, rows in self._tables:
                    if rows is not None and rows.size:
                        self._io(f"write of /{GROUP}/{dset.name.rsplit('/', 1)[-1]}",
                                 lambda dset=dset, rows=rows: dset.id.write(h5py.h5s.ALL, h5py.h5s.ALL, rows))

        coord.run(self.comm, "write the block tables", write_tables)
        for name in self.variables:
            mine = by_var.get(name, [])
            groups = _write_groups([box for box, _ in mine])
            for k in range(self._ncalls[name]):
                pieces = [mine[i] for i in groups[k]] if k < len(groups) else []
                coord.run(self.comm, f"write {name!r}", lambda name=name, pieces=pieces: self._io(
                    f"write of variable {name!r}", lambda: self._write(name, pieces)))
        coord.run(self.comm, "flush the data", lambda: self._io("flush", self.file.flush))
        return written

    def _io(self, what: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, with HDF5's failures of file I/O (h5py raises OSError or RuntimeError, e.g. "MPI_File_sync
        failed") as CheckpointIOError naming the file and the space left on its file system."""
        try:
            return fn()
        except (OSError, RuntimeError) as exc:
            try:
                st = os.statvfs(os.path.dirname(os.path.abspath(self.path)))
                free = f" ({st.f_bavail * st.f_frsize:,} bytes free on its file system)"
            except OSError:
                free = ""
            raise CheckpointIOError(f"{self.path}: HDF5 {what} failed{free}: {exc}") from exc

    def _write(self, name: str, pieces: Sequence[tuple[Box, np.ndarray]]) -> None:
        """Collective: one H5Dwrite of these blocks (leading-axis disjoint; may be none) into dataset ``name``."""
        dset = self.datasets[name]
        fspace = dset.id.get_space()
        if not pieces:
            fspace.select_none()
            buf = np.empty(1, dset.dtype)
            mspace = h5py.h5s.create_simple((1,))
            mspace.select_none()
        else:
            if dset.ndim == 0:
                fspace.select_all()
            else:
                fspace.select_none()
                for box, _ in pieces:
                    fspace.select_hyperslab(box.offset, box.shape, op=h5py.h5s.SELECT_OR)
            selection = memsel.hdf5_selection(pieces[0][1]) if len(pieces) == 1 else None
            if selection is not None:  # a view (halo'd interior): a memory dataspace hyperslab, no copy
                buf, dims, count = selection
                mspace = h5py.h5s.create_simple(dims)
                mspace.select_hyperslab((0,) * len(dims), count)
            else:  # contiguous; or several blocks of one variable (one H5Dwrite): gathered, views copied here
                flat = [np.ascontiguousarray(data).reshape(-1) for _, data in pieces]
                buf = flat[0] if len(flat) == 1 else np.concatenate(flat)
                mspace = h5py.h5s.create_simple((buf.size,))
        dset.id.write(mspace, fspace, buf, dxpl=self._dxpl)

    def storage_info(self) -> dict[str, dict[str, Any]]:
        out = {}
        for name, dset in self.datasets.items():
            out[name] = {"format": "hdf5", "dataset": dset.name, "layout": "contiguous",
                         "file_offset": dset.id.get_offset(), "file_dtype": self.variables[name].dtype}
        return out

    def data_ranges(self) -> list[tuple[int, int]]:
        """All of ``[0, EOA)``, alignment holes included: HDF5 may put metadata into them later."""
        return [(0, self._data_end)]

    def effective_hints(self) -> dict[str, str]:
        try:
            hints = _mpi_file_info(self.file)
        except Exception:  # fall back to the hints HDF5 was given
            _, info = self.file.id.get_access_plist().get_fapl_mpio()
            hints = info_to_dict(info)
        hints["ckptio_hdf5_transfer"] = self.transfer
        return hints

    def commit(self, meta: Mapping[str, Any]) -> None:
        """Collective (object and attribute creation are metadata operations: every rank makes them with the
        same values): the attributes, the completion mark set to 0, the metadata document's dataset, created
        LAST so that everything HDF5 allocated lies before its end, which is reserved; the document (its bytes
        written by rank 0 alone), flush (HDF5 syncs the file), the completion mark set to 1 in place (no new
        space), flush, close."""
        check_data_landed(self.comm, self.path, HDF5Backend(), meta)
        for key, value in self.attrs.items():
            self.file.attrs[key] = _attr_value(value)
        # the document is rank 0's; every rank creates its dataset and attributes alike: its length and checksum
        text = np.array(metamod.dumps(meta)) if meta is not None else None  # numpy bytes: a fixed-length string
        length, digest = coord.bcast_from_root(self.comm, "encode the metadata document",
                                               lambda: (text.nbytes, metamod.checksum(text.tobytes())))
        group = self.file[GROUP]
        group.attrs["metadata_checksum"] = np.bytes_(digest)
        group.attrs["complete"] = np.int64(0)
        document = group.create_dataset("metadata", shape=(), dtype=np.dtype(f"S{length}"), dcpl=_dcpl())
        # Reserved before anything is written: HDF5 cannot recover from a failed flush (below: abort).
        doc_end = max(self._data_end, int(document.id.get_offset()) + length)
        reserve_collectively(self.comm, self.path, [(0, doc_end)], "the metadata document")

        def write_document() -> None:  # rank 0, an independent raw-data write
            if self.comm.Get_rank() == 0:
                self._io("write of the metadata document", lambda: document.id.write(h5py.h5s.ALL, h5py.h5s.ALL, text))

        coord.run(self.comm, "write the metadata document", write_document)
        coord.run(self.comm, "flush the metadata", lambda: self._io("flush", self.file.flush))
        group.attrs.modify("complete", np.int64(COMPLETE))
        # flushed (MPI_File_sync: the mpio driver syncs on flush, not on close) before the close, so the mark
        # is durable before the rename and the close has nothing left to write that could fail
        coord.run(self.comm, "flush the completion mark", lambda: self._io("flush", self.file.flush))
        file, self.file = self.file, None
        file.close()

    def abort(self) -> None:
        """Collective (as every parallel HDF5 close): release the file after a failure; the file is discarded.

        ``H5Fclose`` first flushes HDF5's cached metadata. When that flush fails, HDF5 1.10 frees the file but
        keeps its ID, and its clean-up at interpreter exit (after MPI_Finalize) closes that ID again and crashes
        (and after any failed flush, every later one fails: its metadata cache stays broken). Hence the space
        reservations before every write, so that a full file system never makes HDF5 fail to write; and here,
        rank 0 first truncates the temporary file to 0 bytes, giving its space back, and every rank waits for
        that before closing the file's open objects and the file: the close then only has to write a few KiB
        of metadata, which fits even when the reservation just failed for want of space.
        """
        file, self.file = self.file, None
        if file is None:
            return
        if self.comm.Get_rank() == 0:
            try:
                os.truncate(self.path, 0)
            except OSError:
                pass
        try:
            self.comm.Barrier()
            file.close()  # closes every open dataset, group and attribute of the file, then the file
        except Exception:  # best effort after a failure
            pass


@register
class HDF5Backend(Backend):
    name = "hdf5"
    format_version = FORMAT_VERSION
    # no compression: filtered datasets must be chunked and could not be read as raw byte ranges
    capabilities = Capabilities(compression=False, segments=True, complex_dtypes=True, bool_dtype=True,
                                unsigned_dtypes=True, float16=True, readable_by=("ckptio", "h5py", "h5dump",
                                                                                 "any HDF5 1.8+ reader"))

    signature = SIGNATURE

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        return head.startswith(SIGNATURE)

    def check_attr(self, name: str, value: Any) -> None:
        """What HDF5 refuses only at commit time (measured with HDF5 1.12 through h5py): a NUL character or
        a lone surrogate in the name or in a string stored natively (a variable-length C string), and a
        numeric list whose object-header message exceeds 64 KiB (``8 * len + len(name) > 65472`` bytes)."""
        where = f"attribute {name!r}: the hdf5 backend cannot store"
        if "\x00" in name or not _utf8(name):
            raise CapabilityError(f"{where} its name (a NUL character or an invalid surrogate)")
        stored = _attr_value(value)
        if isinstance(stored, str) and isinstance(value, str) and ("\x00" in value or not _utf8(value)):
            what = "a NUL character" if "\x00" in value else "an invalid surrogate (not UTF-8)"
            raise CapabilityError(f"{where} a string holding {what} (use backend='mpiio', or encode the value)")
        if isinstance(stored, np.ndarray) and stored.nbytes + len(name.encode()) > ATTR_MESSAGE_LIMIT:
            raise CapabilityError(f"{where} a list of {len(value)} numbers ({stored.nbytes} bytes): HDF5 keeps an "
                                  f"attribute in the object header, at most 64 KiB; write it as a variable instead")

    @classmethod
    def write_problem(cls) -> str | None:
        return _h5py_write_problem()

    def layout(self, variables: Mapping[str, VariablePlan], stripe_unit: int, nprocs: int) -> dict[str, Any]:
        """Rank 0: how many collective ``H5Dwrite`` calls each variable takes (the most any rank needs: every
        rank makes that many), from every rank's blocks; O(variables) to send."""
        return {"ncalls": {name: _write_calls(var) for name, var in variables.items()}}

    def create(self, path: str, comm, info, variables: Mapping[str, VariablePlan], layout: Mapping[str, Any],
               options: Mapping[str, Any]) -> WriteSession:
        self.require_writable()
        return _HDF5WriteSession(path, comm, info, variables, {**options, "ncalls": layout["ncalls"]})

    def read_metadata(self, path: str) -> dict[str, Any]:
        """Serial, no MPI: the document in ``/ckptio``, checked against the datasets. With h5py (any build,
        serial wheels too) through h5py; without it through the built-in parser :mod:`.h5lite`."""
        if _load_h5py() is None:
            return _read_metadata_lite(path)
        try:
            size = os.path.getsize(path)
            with open_for_reading(path) as f:
                group = f.get(GROUP)
                if not isinstance(group, h5py.Group):
                    raise not_ckptio(path, "hdf5", f"an HDF5 file without a /{GROUP} group")
                version = group.attrs.get("format_version")
                if version is not None and int(version) > FORMAT_VERSION:
                    raise FormatVersionError(f"{path}: ckptio HDF5 layout version {int(version)} is newer than "
                                             f"this ckptio supports (version {FORMAT_VERSION})")
                if group.attrs.get("complete") != COMPLETE:
                    raise IncompleteCheckpointError(f"{path}: no completion mark (/{GROUP} attribute 'complete'): "
                                                    "the checkpoint was not committed")
                document = group.get("metadata")
                if (not isinstance(document, h5py.Dataset) or document.shape != () or document.dtype.kind != "S"
                        or document.dtype.itemsize > size):
                    raise CorruptCheckpointError(f"{path}: /{GROUP}/metadata is missing or damaged")
                meta = _parse_document(path, document[()], group.attrs.get("metadata_checksum"))
                _check_datasets(path, f, meta, size)
        except CheckpointError:
            raise
        except OSError as exc:  # HDF5 cannot open or read the file
            if "truncated" in str(exc):
                raise IncompleteCheckpointError(f"{path}: HDF5 file is truncated ({exc})") from None
            if isinstance(exc, FileNotFoundError | PermissionError):
                raise CheckpointIOError(f"{path}: cannot read checkpoint: {exc}") from None
            raise CorruptCheckpointError(f"{path}: HDF5 cannot read the file ({exc})") from None
        except (KeyError, RuntimeError, TypeError, ValueError) as exc:  # h5py's errors on damaged structures
            raise CorruptCheckpointError(f"{path}: HDF5 structure is damaged ({exc})") from None
        return meta

    def extents(self, meta: Mapping[str, Any]) -> list[Extent]:
        return leading_axis_bands(meta)

    def extent_table(self, meta: Mapping[str, Any]):
        from ckptio import extent_table

        return extent_table.from_bands(meta)

    def open_extent_reader(self, path: str, comm, info, meta: Mapping[str, Any]) -> ExtentReader:
        return rawio.open_extent_reader(path, comm, info, meta)

    def serial_extent_reader(self, path: str, meta: Mapping[str, Any]) -> ExtentReader:
        return SerialRawReader(path, meta)


def _read_metadata_lite(path: str) -> dict[str, Any]:
    """:meth:`HDF5Backend.read_metadata` without h5py: the same checks, through :mod:`.h5lite`. A structure the
    parser does not implement raises CapabilityError naming h5py (never CorruptCheckpointError)."""
    from . import h5lite

    try:
        size = os.path.getsize(path)
        with h5lite.H5Lite(path) as f:
            group = f.lookup(f"/{GROUP}")
            document = f.lookup(f"/{GROUP}/metadata") if group is not None else None
            if group is None:
                raise not_ckptio(path, "hdf5", f"an HDF5 file without a /{GROUP} group")
            attrs = f.attrs(group)
            version = attrs.get("format_version")
            if version is not None and int(version) > FORMAT_VERSION:
                raise FormatVersionError(f"{path}: ckptio HDF5 layout version {int(version)} is newer than "
                                         f"this ckptio supports (version {FORMAT_VERSION})")
            if attrs.get("complete") != COMPLETE:
                raise IncompleteCheckpointError(f"{path}: no completion mark (/{GROUP} attribute 'complete'): "
                                                "the checkpoint was not committed")
            ds = f.dataset(document) if document is not None else None
            if ds is None or ds.shape != () or ds.dtype is None or ds.dtype.kind != "S" or ds.dtype.itemsize > size:
                raise CorruptCheckpointError(f"{path}: /{GROUP}/metadata is missing or damaged")
            meta = _parse_document(path, f.read(ds)[()], attrs.get("metadata_checksum"))
            if meta.get("backend") != HDF5Backend.name:
                raise CorruptCheckpointError(f"{path}: metadata says backend {meta.get('backend')!r}, file is HDF5")
            found = {}
            for name in meta["variables"]:
                addr = f.lookup(f"/{name}")
                dset = f.dataset(addr) if addr is not None else None
                found[name] = (None, None) if dset is None else (list(dset.shape), dset.address)
            _check_found_datasets(path, meta, found, size)
    except CheckpointError:
        raise
    except OSError as exc:
        raise CheckpointIOError(f"{path}: cannot read checkpoint: {exc.strerror or exc}") from None
    except (IndexError, KeyError, TypeError, ValueError, struct_error) as exc:  # values a damaged file holds
        raise CorruptCheckpointError(f"{path}: HDF5 structure is damaged ({exc})") from None
    return meta


def _check_dataset(path: str, name: str, var: Mapping[str, Any], shape: list[int] | None, offset: int | None,
                   size: int) -> None:
    """Variable ``name`` of the document is a dataset of its shape (``shape``; None: no such dataset) at its
    recorded offset (``offset``), inside the file (``size`` bytes)."""
    storage = var.get("storage", {})
    nbytes = math.prod(var["shape"]) * np.dtype(var["dtype"]).itemsize
    if shape is None or shape != list(var["shape"]):
        raise CorruptCheckpointError(f"{path}: variable {name!r}: no dataset /{name} of shape {var['shape']}")
    if nbytes and (storage.get("file_offset") is None or offset != storage["file_offset"]):
        raise CorruptCheckpointError(f"{path}: variable {name!r}: dataset offset {offset} does "
                                     f"not match the metadata ({storage.get('file_offset')})")
    if nbytes and storage["file_offset"] + nbytes > size:
        raise IncompleteCheckpointError(f"{path}: variable {name!r}: file ends inside the dataset (truncated)")


def _check_datasets(path: str, f: h5py.File, meta: Mapping[str, Any], size: int) -> None:
    """Every variable of the document is a dataset of its shape at its recorded offset, inside the file."""
    if meta.get("backend") != HDF5Backend.name:
        raise CorruptCheckpointError(f"{path}: metadata says backend {meta.get('backend')!r}, file is HDF5")
    found = {}
    for name in meta["variables"]:
        dset = f.get(name)
        is_dataset = isinstance(dset, h5py.Dataset)
        found[name] = (list(dset.shape), dset.id.get_offset()) if is_dataset else (None, None)
    _check_found_datasets(path, meta, found, size)


def _check_found_datasets(path: str, meta: Mapping[str, Any], found: Mapping[str, tuple[list[int] | None, int | None]],
                          size: int) -> None:
    """Every variable of the document against ``found`` (name -> the dataset's shape and offset, or Nones: no
    such dataset): first whether another tool rewrote the file (:func:`rewritten_by_another_tool`), then each
    variable (:func:`_check_dataset`)."""
    why = rewritten_by_another_tool(meta, found, size)
    if why is not None:
        raise RewrittenCheckpointError(f"{path}: rewritten by another tool after ckptio committed it (h5repack, "
                                       f"h5copy or a program that copied every object into a new file?): {why}; "
                                       "ckptio cannot read or verify the values there (they are probably intact: "
                                       "h5dump shows them); restart from the file as ckptio wrote it")
    for name, var in meta["variables"].items():
        _check_dataset(path, name, var, found[name][0], found[name][1], size)


def rewritten_by_another_tool(meta: Mapping[str, Any], found: Mapping[str, tuple[list[int] | None, int | None]],
                              size: int) -> str | None:
    """Local: why the file looks rewritten by another tool, or None. The evidence: the metadata document is intact
    (checked before), every variable holding data is a dataset of its shape, and EVERY one of them is somewhere
    else than where ckptio wrote it (another offset, or no longer contiguous: ``offset`` None). A damaged
    address (a flipped bit) moves one dataset, not all of them, and stays "corrupt"; so does a single-variable
    file whose one dataset now points outside the file."""
    moved = []
    for name, var in meta["variables"].items():
        nbytes = math.prod(var["shape"]) * np.dtype(var["dtype"]).itemsize
        if not nbytes:
            continue
        shape, offset = found.get(name, (None, None))
        recorded = var.get("storage", {}).get("file_offset")
        if shape != list(var["shape"]) or offset == recorded:
            return None
        if offset is not None and offset + nbytes > size:
            return None
        moved.append(f"{name!r} at {'no single offset (no longer contiguous)' if offset is None else offset}, "
                     f"written at {recorded}")
    if not moved:
        return None
    shown = "; ".join(moved[:3]) + (f"; ... ({len(moved)} variables)" if len(moved) > 3 else "")
    return f"every dataset moved ({shown})"


def _parse_document(path: str, text: bytes, stored_checksum: Any) -> dict[str, Any]:
    """The metadata document of ``/ckptio`` (read through h5py or the built-in parser), checked against its
    stored checksum; damage is CorruptCheckpointError, a newer schema FormatVersionError. Local."""
    if np.bytes_(metamod.checksum(text)) != stored_checksum:
        raise CorruptCheckpointError(f"{path}: /{GROUP}/metadata checksum mismatch (the metadata document is "
                                     "damaged)")
    try:
        return metamod.loads(text)
    except FormatVersionError:
        raise
    except ValueError as exc:
        raise CorruptCheckpointError(f"{path}: /{GROUP}/metadata is not valid metadata ({exc})") from None
