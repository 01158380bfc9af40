"""Writing the HDF5 format (:class:`HDF5WriteHandle`, what :meth:`ckptio.backends.hdf5.HDF5Backend.create` returns):
the file layout is described in :mod:`ckptio.backends.hdf5`. Needs h5py built with parallel HDF5 (``mpio``).

Every HDF5 metadata operation (file, dataset, group and attribute creation) is collective in parallel HDF5: every
rank makes them in the same order with the same arguments, from the plan's headers, which every rank has. Which
ranks call which method of the handle, and in what order: :mod:`ckptio.backends.base`.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from ckptio.backends import collective_calls, hdf5_mdc, writeback
from ckptio.backends import hdf5_lib as lib
from ckptio.backends.base import (
    USER_CHECKSUMS_NOTE,
    USER_TABLE_NOTE,
    BlockToWrite,
    Box,
    CapabilityError,
    CheckpointIOError,
    CreateOptions,
    DocumentSlot,
    Step,
    VariablePlan,
    WrittenBlock,
    user_table_shape,
)
from ckptio.backends.hdf5_lib import (
    COMPLETE,
    FORMAT_VERSION,
    GROUP,
    NOT_A_VARIABLE,
    attr_value,
    dcpl,
    small_collective_variables,
    write_groups,
)

from ckptio.coord.hints import info_to_dict
from ckptio.model import memsel
from ckptio.model import meta as metamod

h5py: Any = None  # the module, set by the first HDF5WriteHandle (writing needs h5py with MPI: checked before)

# A dimension scale lists the datasets attached to it in one attribute (REFERENCE_LIST, 16 bytes per dataset),
# which HDF5 keeps in the scale's object header, at most 64 KiB: attaching a 4086th dataset failed (measured,
# HDF5 1.12 through h5py). Refused beyond this many, before anything is attached.
MAX_SCALE_USERS = 4000
MAX_LISTED_NAMES = 60_000  # the 'variables' attribute of the block table (HDF5 attributes: 64 KiB)


# OPEN_DATASETS: a small variable's dataset is closed once created (its offset kept): HDF5 pins the object header of
# every open object in its metadata cache, and with 10,000 small datasets held open the creation ran 20% and the
# file's close 6x slower (measured with plain h5py: 1.03 -> 0.87 s and 0.46 -> 0.07 s); its one writer opens it again
# for the write (HDF5WriteHandle._dataset). A variable written collectively stays open from its creation (a reopened
# dataset made a 1 GiB collective write of 24 variables on 4 ranks 0.15 s slower, measured: 0.80-0.85 s against
# 0.65-0.69). All are closed after the write (HDF5WriteHandle.sync).


class HDF5WriteHandle:
    """The HDF5 format's :class:`~ckptio.backends.base.WriteHandle` (see there for who calls what). Every HDF5
    metadata operation (file, dataset, group and attribute creation) is collective in parallel HDF5: every rank
    makes them in the same order with the same arguments, from the plan's headers, which every rank has."""

    def __init__(self, path: str, comm, info, variables: Mapping[str, VariablePlan], placement: Mapping[str, Any],
                 options: CreateOptions):
        global h5py
        from ckptio.coord.mpi import MPI

        h5py = lib.load()
        self.path = path
        self._own = writeback.OwnDescriptor(path)  # what sync() fsyncs (opened at the first sync)
        self.variables = variables
        self.described = options.described
        self.attrs = options.attrs
        self._ncalls: Mapping[str, int] = placement["ncalls"]
        self._by_owner: Sequence[str] = placement.get("by_owner", ())  # written independently by their one writer
        # (_offsets, _open: see OPEN_DATASETS)
        self._offsets: dict[str, int | None] = {}
        self._open: dict[str, Any] = {}  # name -> h5py DatasetID, this rank's datasets during the write
        self._dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
        self._why_independent = options.independent_because  # where OMPIO would corrupt collective transfers
        self.transfer = "collective" if self._why_independent is None else "independent"
        self._dxpl.set_dxpl_mpio(h5py.h5fd.MPIO_INDEPENDENT if self.transfer == "independent"
                                 else h5py.h5fd.MPIO_COLLECTIVE)
        self._rounds = options.collective_rounds if self.transfer == "collective" else (0, 0)  # collective_calls
        self._dxpl_independent = h5py.h5p.create(h5py.h5p.DATASET_XFER)
        self._dxpl_independent.set_dxpl_mpio(h5py.h5fd.MPIO_INDEPENDENT)
        self._written: list[WrittenBlock] = []
        self._document: h5py.Dataset | None = None
        self._document_end = 0
        self.file: h5py.File | None = h5py.File(
            path, "w", driver="mpio", comm=comm, info=info if info is not None else MPI.Info(),
            alignment_threshold=options.stripe_unit, alignment_interval=options.stripe_unit)
        self.metadata_writers = "rank 0" if hdf5_mdc.metadata_from_rank_0(h5py, self.file.id.id) else "every rank"

    def notes(self) -> list[str]:
        """Why the data goes out with independent transfers, when it does."""
        if self._why_independent is None:
            return []
        return [f"ckptio hdf5 backend: independent data transfers instead of collective ones ({self._why_independent})"
                "; initialise MPI with MPI_THREAD_MULTIPLE or set OMPI_MCA_io=romio321 to keep collective buffering"]

    def define(self) -> None:
        """Collective: every dataset, the dimension scales, the /ckptio group and the block tables (their rows are
        written by the rank that holds them, in :meth:`write`, after the space was reserved)."""
        data_end = 0
        # one creation property list for every variable's dataset (h5py sets the same track-times and
        # attribute-order flags on it each time; ckptio passes no fill value, chunks or filters): its creation
        # cost 5 us per dataset, measured
        properties = dcpl()
        for name, var in self.variables.items():
            dset = self.file.create_dataset(name, shape=var.shape, dtype=np.dtype(var.dtype), dcpl=properties)
            for key, value in self.described.get(name, {}).get("attrs", {}).items():
                dset.attrs[key] = attr_value(value)
            offset = self._offsets[name] = dset.id.get_offset()
            if offset is not None:  # (contiguous, allocated at creation: its storage is its elements' bytes)
                data_end = max(data_end, int(offset) + var.nbytes)
            if self._ncalls.get(name, 0):  # written collectively, by every rank: kept open for the write (see
                self._open[name] = dset.id  # __init__)
            del dset  # closed unless kept (see __init__)
        scales = self._dimension_scales()
        group = self.file.create_group(GROUP)
        group.attrs["format_version"] = np.int64(FORMAT_VERSION)
        group.attrs["ckptio_version"] = np.bytes_(metamod.__version__)
        # every rank creates the same table datasets; their rows are the planning rank's (the whole plan)
        nrows, ncols = user_table_shape(self.variables)
        self._tables: list[h5py.Dataset] = []
        for key, shape, dtype, note in (("block_table", (nrows, ncols), np.int64, USER_TABLE_NOTE),
                                        ("block_checksums", (nrows,), np.uint64, USER_CHECKSUMS_NOTE)):
            dset = group.create_dataset(key, shape=shape, dtype=dtype, dcpl=dcpl())
            dset.attrs["description"] = note  # each its own (issue 27: the checksums carried the table's)
            self._tables.append(dset)
        self._tables[1].attrs["algorithm"] = metamod.CHECKSUM_ALGORITHM  # as netCDF's ckptio_block_checksums
        names = list(self.variables)
        listed = " ".join(names)  # an attribute holds at most 64 KiB in the file's default object headers
        self._tables[0].attrs["variables"] = (
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
        data_end = max([data_end, *(int(d.id.get_offset()) + int(d.id.get_storage_size())
                                    for d in (*scales, *self._tables) if d.id.get_offset() is not None)])
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
            if dim in self.variables:  # a coordinate variable (checked when declared): its dataset is the scale
                scales[dim] = self.file[dim]
                scales[dim].make_scale(dim)
            else:
                scales[dim] = self.file.create_dataset(dim, shape=(lengths[dim],), dtype=np.int8, dcpl=dcpl())
                scales[dim].make_scale(NOT_A_VARIABLE % lengths[dim])
                created.append(scales[dim])
        for name in sorted(self.described):
            dset = scales[name] if name in scales else self.file[name]
            for axis, dim in enumerate(self.described[name].get("dims", ())):
                if scales[dim] is not dset:
                    dset.dims[axis].attach_scale(scales[dim])
        return created

    def write(self, blocks: Sequence[BlockToWrite], tables: tuple[np.ndarray, np.ndarray] | None) -> Iterator[Step]:
        """One step of independent raw writes (the datasets are allocated at creation): the block tables by the
        rank that holds them and the small variables that one rank holds whole by that rank (``by_owner`` of the
        placement: an independent write cannot leave another rank waiting, so it needs no step of its own); then
        ``ncalls[name]`` collective ``H5Dwrite`` calls per other variable and cut call of it on every rank (see
        :func:`ckptio.backends.hdf5_lib.write_calls`, :func:`ckptio.backends.collective_calls.calls`)."""
        by_var: dict[str, list[tuple[Box, np.ndarray]]] = {}
        self._written = []
        for block in blocks:
            if block.box.size > 0:
                by_var.setdefault(block.var, []).append((block.box, block.data))
            self._written.append(WrittenBlock(None, int(block.data.nbytes)))

        def write_independently() -> None:
            for dset, rows in zip(self._tables, tables or (), strict=False):
                if rows.size:
                    self._io(f"write of /{GROUP}/{dset.name.rsplit('/', 1)[-1]}",
                             lambda dset=dset, rows=rows: dset.id.write(h5py.h5s.ALL, h5py.h5s.ALL, rows))
            for name in self._by_owner:
                mine = by_var.get(name, [])
                for group in write_groups([box for box, _ in mine]) if mine else ():
                    args = self._selection(name, [mine[i] for i in group])
                    self._io(f"write of variable {name!r}", lambda name=name, args=args: self._dataset(name).write(
                        *args, dxpl=self._dxpl_independent))

        yield "write the block tables and the small variables", write_independently
        for name, var in self.variables.items():
            mine = by_var.get(name, [])
            cut = collective_calls.variable_calls(var.shape, np.dtype(var.dtype).itemsize, *self._rounds)
            for pieces in collective_calls.calls(mine, write_groups([b for b, _ in mine]), self._ncalls[name], cut):
                args = self._selection(name, pieces)  # prepared here: the engine agrees before the collective call
                yield f"write {name!r}", lambda name=name, args=args: self._io(
                    f"write of variable {name!r}", lambda: self._dataset(name).write(*args, dxpl=self._dxpl))

    def written(self) -> list[WrittenBlock]:
        return list(self._written)

    def sync(self) -> None:
        """This rank's writes durable (:class:`.writeback.OwnDescriptor`, not ``H5Fflush``, whose ``MPI_File_sync``
        may fail on one rank alone); HDF5's cached metadata goes out at :meth:`close`. Closes the write's datasets."""
        self._open.clear()
        self._own.sync()

    def _dataset(self, name: str) -> Any:
        """Local: the low-level dataset of variable ``name``, opened for this rank's writes (kept until
        :meth:`sync`)."""
        dataset = self._open.get(name)
        if dataset is None:
            dataset = self._open[name] = h5py.h5d.open(self.file.id, name.encode("utf-8"))
        return dataset

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

    def _selection(self, name: str, pieces: Sequence[tuple[Box, np.ndarray]]) -> tuple[Any, Any, np.ndarray]:
        """Local: the memory and file dataspaces and the buffer of one collective H5Dwrite of these blocks
        (leading-axis disjoint; may be none) into dataset ``name``."""
        fspace = self._dataset(name).get_space()
        if not pieces:
            fspace.select_none()
            buf = np.empty(1, np.dtype(self.variables[name].dtype))
            mspace = h5py.h5s.create_simple((1,))
            mspace.select_none()
        else:
            if not self.variables[name].shape:
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
        return mspace, fspace, buf

    def storage_info(self) -> dict[str, dict[str, Any]]:
        return {name: {"format": "hdf5", "dataset": f"/{name}", "layout": "contiguous", "file_offset": offset,
                       "file_dtype": self.variables[name].dtype} for name, offset in self._offsets.items()}

    def in_small_calls(self, below: int) -> set[str]:
        """:func:`~ckptio.backends.hdf5_lib.small_collective_variables` of this file (none if independent)."""
        return small_collective_variables(self.variables, self._ncalls, self._by_owner, below) if (
            self.transfer == "collective") else set()

    def reserved_ranges(self) -> list[tuple[int, int]]:
        """All of ``[0, EOA)``, alignment holes included (HDF5 may put metadata into them later); after
        :meth:`document_slot`, through the end of the document's dataset, created last."""
        return [(0, max(self._data_end, self._document_end))]

    def effective_hints(self) -> dict[str, str]:
        try:
            hints = _mpi_file_info(self.file)
        except Exception:  # fall back to the hints HDF5 was given
            _, info = self.file.id.get_access_plist().get_fapl_mpio()
            hints = info_to_dict(info)
        hints["ckptio_hdf5_transfer"] = self.transfer
        hints["ckptio_hdf5_metadata_writers"] = self.metadata_writers
        return hints

    def document_slot(self, slot: DocumentSlot) -> None:
        """Collective (object and attribute creation are metadata operations: every rank makes them with the same
        values): the checkpoint's attributes, the completion mark set to 0, and the metadata document's dataset,
        created LAST so that everything HDF5 allocated lies before its end (which the engine reserves next: HDF5
        cannot recover from a failed flush, see :meth:`abort`)."""
        for key, value in self.attrs.items():
            self.file.attrs[key] = attr_value(value)
        group = self.file[GROUP]
        group.attrs["metadata_checksum"] = np.bytes_(slot.checksum)
        group.attrs["complete"] = np.int64(0)
        self._document = group.create_dataset("metadata", shape=(), dtype=np.dtype(f"S{slot.nbytes}"), dcpl=dcpl())
        self._document_end = int(self._document.id.get_offset()) + slot.nbytes

    def write_document(self, document: bytes | None) -> list[Step]:
        """An independent raw-data write by the rank that holds the document (a fixed-length string)."""
        def write() -> None:
            if document is not None:
                text = np.array(document)
                self._io("write of the metadata document",
                         lambda: self._document.id.write(h5py.h5s.ALL, h5py.h5s.ALL, text))

        return [("write the metadata document", write)]

    def mark_complete(self, mark: bool) -> list[Step]:
        """``complete`` set to 1 in place (no new space): an attribute change, collective on every rank alike."""
        return [("write the completion mark",
                 lambda: self.file[GROUP].attrs.modify("complete", np.int64(COMPLETE)))]

    def close(self) -> None:
        """Collective: ``H5Fclose`` (writes the cached metadata, syncs nothing), then this rank's own ``fsync``."""
        file, self.file = self.file, None
        self._own.after(lambda: (file.close(), self._release()))

    def _release(self) -> None:
        """Local, after the file's close: drop this handle's HDF5 objects (each freed into HDF5's free lists when
        its last reference goes), then give those lists' memory back (:func:`.hdf5_lib.release_free_lists`)."""
        self._open.clear()
        self._tables = []
        self._document = None
        lib.release_free_lists()

    def abort(self) -> None:
        """Collective (as every parallel HDF5 close): release the file after a failure; the file is discarded.

        ``H5Fclose`` first writes HDF5's cached metadata (from rank 0: :mod:`.hdf5_mdc`). When that fails, HDF5
        1.10 frees the file but keeps its ID, which its clean-up at exit closes again and crashes, and every later
        flush fails. Hence the space reservations before every write (a full file system never makes HDF5 fail
        to write), and the engine truncates the temporary file to 0 bytes before every rank aborts: the close
        then writes a few KiB of metadata, which fits even when a reservation just failed."""
        self._own.close()
        file, self.file = self.file, None
        if file is None:
            return
        try:
            file.close()  # closes every open dataset, group and attribute of the file, then the file
        except Exception:  # best effort after a failure (its objects are left as they are: see above)
            pass


def _mpi_file_info(h5file: h5py.File) -> dict[str, str]:
    """Hints of the MPI file under an mpio HDF5 file (``MPI_File_get_info``), via ``H5Fget_vfd_handle``.

    h5py does not expose the handle (its ``get_vfd_handle`` reads an int, a POSIX descriptor), so this calls
    the HDF5 C function through ctypes (hid_t is 64-bit since HDF5 1.10). Local; raises on any failure.
    """
    from ckptio.coord.mpi import MPI

    lib = ctypes.CDLL(h5py.h5f.__file__)  # dlsym on it also searches its dependency libhdf5
    get_handle = lib.H5Fget_vfd_handle
    get_handle.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p)]
    get_handle.restype = ctypes.c_int
    handle = ctypes.c_void_p()
    from h5py import _objects

    with _objects.phil:  # (h5py's lock: another thread of the process may be inside libhdf5)
        status = get_handle(h5file.id.id, 0, ctypes.byref(handle))  # 0 = H5P_DEFAULT
    if status < 0 or not handle.value:
        raise OSError("H5Fget_vfd_handle failed")
    fh = MPI.File.fromhandle(ctypes.c_void_p.from_address(handle.value).value)  # MPI_File is a pointer type
    info = fh.Get_info()
    try:
        return info_to_dict(info)
    finally:
        info.Free()
