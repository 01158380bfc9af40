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
    /ckptio/metadata         the metadata document of ckptio.model.meta (JSON), a scalar fixed-length string
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
an empty selection where it has nothing left, so the collective calls always match. Each such call is one step
of :meth:`_HDF5WriteHandle.write`, which the engine runs in an agreed phase: with collective buffering an I/O
error such as ENOSPC reaches only the aggregators, and the others must not go on into the next collective call.
A small variable one rank holds whole (no larger than the stripe unit:
:func:`~ckptio.backends.hdf5_lib.written_by_its_owner`) takes no collective call: its owner writes it with an
independent ``H5Dwrite`` in the write's first step, beside the block tables (a checkpoint of thousands of small
variables otherwise paid an MPI collective and an agreement per variable on every rank).

Space: after the define phase (every dataset allocated, nothing written yet; the block tables are written with
the data) the engine reserves HDF5's end of allocated space, and after :meth:`_HDF5WriteHandle.document_slot`
through the end of the metadata document's dataset, created last, before writing it. HDF5 1.10 cannot recover
from a failed flush (the file can no longer be closed and its exit handler crashes), so it must never meet a
full file system; see :meth:`_HDF5WriteHandle.abort` for what happens after other failures.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from struct import error as struct_error
from typing import Any

import numpy as np
from ckptio.backends import hdf5_checks as checks
from ckptio.backends import hdf5_lib as lib
from ckptio.backends import hdf5_write, rawio, version_mark
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
    Placement,
    VariablePlan,
    VariableRecord,
)
from ckptio.backends.detect import not_ckptio
from ckptio.backends.hdf5_lib import (
    ATTR_MESSAGE_LIMIT,
    COMPLETE,
    FORMAT_VERSION,
    GROUP,
    SIGNATURE,
    attr_value,
    utf8,
    write_calls,
    written_by_its_owner,
)
from ckptio.backends.rawio import SerialRawReader, leading_axis_bands

from ckptio.model import meta as metamod
from ckptio.model import plain

h5py: Any = None  # the module, once load_h5py() found it (every use below comes after a call)


def load_h5py() -> Any:
    """The h5py module, imported on first use (:func:`.hdf5_lib.load`); None when it cannot be imported."""
    global h5py
    h5py = lib.load()
    return h5py


def open_for_reading(path: str) -> h5py.File:
    """Serial: ``path`` opened read-only without file locking (a checkpoint on a file system without locks reads
    as well). HDF5 refuses a second open of a file this process already holds with other locking flags ("file
    locking flag values don't match": the user's own ``h5py.File(path)``): then with the default flags, so a
    good checkpoint is not reported as damaged because the program has it open."""
    load_h5py()
    try:
        return h5py.File(path, "r", locking=False)
    except OSError as exc:
        if "file locking flag values don't match" not in str(exc):
            raise
        return h5py.File(path, "r")


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
        if "\x00" in name or not utf8(name):
            raise CapabilityError(f"{where} its name (a NUL character or an invalid surrogate)")
        stored = attr_value(value)
        if isinstance(stored, str) and isinstance(value, str) and ("\x00" in value or not utf8(value)):
            what = "a NUL character" if "\x00" in value else "an invalid surrogate (not UTF-8)"
            raise CapabilityError(f"{where} a string holding {what} (use backend='mpiio', or encode the value)")
        if isinstance(stored, np.ndarray) and stored.nbytes + len(name.encode()) > ATTR_MESSAGE_LIMIT:
            raise CapabilityError(f"{where} a list of {len(value)} numbers ({stored.nbytes} bytes): HDF5 keeps an "
                                  f"attribute in the object header, at most 64 KiB; write it as a variable instead")

    @classmethod
    def write_problem(cls) -> str | None:
        return lib.write_problem()

    def place(self, variables: Mapping[str, VariablePlan], stripe_unit: int, nprocs: int) -> Placement:
        """How many collective ``H5Dwrite`` calls each variable takes (the most any rank needs: every rank makes
        that many), from every rank's blocks, and which small variables their one writer writes independently
        instead (:func:`~ckptio.backends.hdf5_lib.written_by_its_owner`: no collective call for them); O(variables)
        for every rank (HDF5 places the data itself)."""
        own = sorted(name for name, var in variables.items() if written_by_its_owner(var, stripe_unit))
        skip = set(own)
        share = {"ncalls": {name: 0 if name in skip else write_calls(var) for name, var in variables.items()},
                 "by_owner": own}
        return Placement(share, [share] * nprocs, same_for_all=True)

    def create(self, path: str, comm, info, variables: Mapping[str, VariablePlan], placement: Mapping[str, Any],
               options: CreateOptions) -> hdf5_write.HDF5WriteHandle:
        self.require_writable()
        return hdf5_write.HDF5WriteHandle(path, comm, info, variables, placement, options)

    def read_document(self, path: str) -> dict[str, Any]:
        """Serial, no MPI: the document in ``/ckptio``, checked against the datasets. With h5py (any build,
        serial wheels too) through h5py; without it through the built-in parser :mod:`.h5lite`."""
        if load_h5py() is None:
            return _read_metadata_lite(path)
        return self._read_document(path, decoded=True)

    def stored_document(self, path: str) -> bytes | None:
        """Serial, no MPI: the document's stored bytes after :meth:`read_document`'s checks, the datasets' included
        (each variable a dataset of its shape at its recorded offset: what finds object headers a full file system
        lost), the document parsed only as far as those need (names, shapes, offsets: no typed document, no
        validation; the commit compares the bytes with its own right after). None without h5py."""
        if load_h5py() is None:
            return None
        return self._read_document(path, decoded=False)

    def _read_document(self, path: str, decoded: bool) -> Any:
        """:meth:`read_document` (``decoded``) or :meth:`stored_document`, through h5py. A layout version mark
        newer than this ckptio's is decided once the rest has been read (:mod:`.version_mark`)."""
        newer = None
        try:
            size = os.path.getsize(path)
            with open_for_reading(path) as f:
                group = f.get(GROUP)
                if not isinstance(group, h5py.Group):
                    raise not_ckptio(path, "hdf5", f"an HDF5 file without a /{GROUP} group")
                version = group.attrs.get("format_version")
                newer = version_mark.newer(None if version is None else int(version), FORMAT_VERSION)
                if group.attrs.get("complete") != COMPLETE:
                    raise IncompleteCheckpointError(f"{path}: no completion mark (/{GROUP} attribute 'complete'): "
                                                    "the checkpoint was not committed")
                document = group.get("metadata")
                if (not isinstance(document, h5py.Dataset) or document.shape != () or document.dtype.kind != "S"
                        or document.dtype.itemsize > size):
                    raise CorruptCheckpointError(f"{path}: /{GROUP}/metadata is missing or damaged")
                text = document[()]
                if newer is not None:  # (decided below, outside the conversion of errors)
                    _check_document_checksum(path, text, group.attrs.get("metadata_checksum"))
                elif decoded:
                    meta = _parse_document(path, text, group.attrs.get("metadata_checksum"))
                else:
                    _check_document_checksum(path, text, group.attrs.get("metadata_checksum"))
                    meta = _listed_datasets(path, text)
                if newer is None:
                    checks.check_datasets(path, f, meta, size)
        except CheckpointError:
            _refuse_newer(path, newer)  # the rest is not what this ckptio reads: a newer layout
            raise
        except OSError as exc:  # HDF5 cannot open or read the file
            _refuse_newer(path, newer)
            if "truncated" in str(exc):
                raise IncompleteCheckpointError(f"{path}: HDF5 file is truncated ({exc})") from None
            if isinstance(exc, FileNotFoundError | PermissionError):
                raise CheckpointIOError(f"{path}: cannot read checkpoint: {exc}") from None
            raise CorruptCheckpointError(f"{path}: HDF5 cannot read the file ({exc})") from None
        except (KeyError, RuntimeError, TypeError, ValueError) as exc:  # h5py's errors on damaged structures
            _refuse_newer(path, newer)
            raise CorruptCheckpointError(f"{path}: HDF5 structure is damaged ({exc})") from None
        finally:  # (the file is closed: its datasets' memory back to the C library, see lib.release_free_lists)
            lib.release_free_lists()
        if newer is not None:
            raise version_mark.verdict(path, "HDF5", newer, FORMAT_VERSION, bytes(text))
        return meta if decoded else bytes(text)

    def extents(self, meta: Mapping[str, Any]) -> list[Extent]:
        return leading_axis_bands(meta)

    def extent_table(self, meta: Mapping[str, Any]) -> ExtentTable:
        return ExtentTable.of_bands(meta)

    def plain_document(self, path: str) -> CheckpointDocument:
        return plain_hdf5_document(path)

    def open_extents(self, path: str, comm, info, meta: Mapping[str, Any]) -> ExtentReader:
        return rawio.open_extents(path, comm, info, meta)

    def serial_extents(self, path: str, meta: Mapping[str, Any]) -> ExtentReader:
        return SerialRawReader(path, meta)


def _read_metadata_lite(path: str) -> dict[str, Any]:
    """:meth:`HDF5Backend.read_document` without h5py: the same checks, through :mod:`.h5lite`. A structure the
    parser does not implement raises CapabilityError naming h5py (never CorruptCheckpointError)."""
    from ckptio.backends import h5lite

    newer = None
    try:
        size = os.path.getsize(path)
        with h5lite.H5Lite(path) as f:
            group = f.lookup(f"/{GROUP}")
            document = f.lookup(f"/{GROUP}/metadata") if group is not None else None
            if group is None:
                raise not_ckptio(path, "hdf5", f"an HDF5 file without a /{GROUP} group")
            attrs = f.attrs(group)
            version = attrs.get("format_version")
            newer = version_mark.newer(None if version is None else int(version), FORMAT_VERSION)
            if attrs.get("complete") != COMPLETE:
                raise IncompleteCheckpointError(f"{path}: no completion mark (/{GROUP} attribute 'complete'): "
                                                "the checkpoint was not committed")
            ds = f.dataset(document) if document is not None else None
            if ds is None or ds.shape != () or ds.dtype is None or ds.dtype.kind != "S" or ds.dtype.itemsize > size:
                raise CorruptCheckpointError(f"{path}: /{GROUP}/metadata is missing or damaged")
            text = f.read(ds)[()]
            if newer is not None:  # (decided below, outside the conversion of errors)
                _check_document_checksum(path, text, attrs.get("metadata_checksum"))
            else:
                meta = _parse_document(path, text, attrs.get("metadata_checksum"))
                if meta.backend != HDF5Backend.name:
                    raise CorruptCheckpointError(f"{path}: metadata says backend {meta.backend!r}, file is HDF5")
                found = {}
                for name in meta.variables:
                    addr = f.lookup(f"/{name}")
                    dset = f.dataset(addr) if addr is not None else None
                    found[name] = (None, None) if dset is None else (list(dset.shape), dset.address)
                checks.check_found_datasets(path, meta, found, size)
    except CheckpointError:
        _refuse_newer(path, newer)
        raise
    except OSError as exc:
        raise CheckpointIOError(f"{path}: cannot read checkpoint: {exc.strerror or exc}") from None
    except (IndexError, KeyError, TypeError, ValueError, struct_error) as exc:  # values a damaged file holds
        _refuse_newer(path, newer)
        raise CorruptCheckpointError(f"{path}: HDF5 structure is damaged ({exc})") from None
    if newer is not None:
        raise version_mark.verdict(path, "HDF5", newer, FORMAT_VERSION, bytes(text))
    return meta


def _refuse_newer(path: str, newer: int | None) -> None:
    """Local, in an except clause of a read whose version mark said ``newer`` (None: not newer): what failed is a
    layout this ckptio does not read, FormatVersionError (:mod:`.version_mark`)."""
    if newer is not None:
        raise version_mark.newer_layout(path, "HDF5", newer, FORMAT_VERSION) from None


def _parse_document(path: str, text: bytes, stored_checksum: Any) -> CheckpointDocument:
    """The metadata document of ``/ckptio`` (read through h5py or the built-in parser), checked against its
    stored checksum; damage is CorruptCheckpointError, a newer schema FormatVersionError. Local."""
    _check_document_checksum(path, text, stored_checksum)
    return metamod.loads_stored(text, path, f"/{GROUP}/metadata")


def _check_document_checksum(path: str, text: bytes, stored_checksum: Any) -> None:
    if np.bytes_(metamod.checksum(text)) != stored_checksum:
        raise CorruptCheckpointError(f"{path}: /{GROUP}/metadata checksum mismatch (the metadata document is "
                                     "damaged)")


def _listed_datasets(path: str, text: bytes) -> CheckpointDocument:
    """Local: what ``hdf5_checks.check_datasets`` needs of a document whose checksum matched (the backend, each
    variable's dtype, shape and storage offset: :func:`ckptio.model.meta.loads_listing`, no typed blocks, no validation;
    the commit's check compares the bytes with the ones it wrote). CorruptCheckpointError when it is not that."""
    try:
        return metamod.loads_listing(text)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CorruptCheckpointError(f"{path}: /{GROUP}/metadata is not a ckptio document ({exc})") from None


def plain_hdf5_document(path: str) -> CheckpointDocument:
    """Rank 0: the document of a plain HDF5 file ckptio did not write (see :mod:`ckptio.model.plain`)."""
    try:
        import h5py
    except ImportError:
        raise CapabilityError(f"{path}: reading an HDF5 file ckptio did not write needs h5py (pip install h5py)") \
            from None
    variables: dict[str, VariableRecord] = {}
    skipped: dict[str, str] = {}
    with open_for_reading(path) as f:
        for name, obj in f.items():
            if not isinstance(obj, h5py.Dataset):
                skipped[name] = "a group (only datasets at the root of the file are read)"
                continue
            dcpl = obj.id.get_create_plist()
            if obj.dtype.kind not in plain.NUMERIC or obj.dtype.fields is not None:
                skipped[name] = f"type {obj.dtype} is not numeric"
            elif (why := _hdf5_storage_problem(h5py, dcpl)) is not None:
                skipped[name] = why
            elif obj.id.get_offset() is None and obj.size:
                skipped[name] = "never written (no storage allocated)"
            elif (why := plain.packed_problem(obj.attrs)) is not None:
                skipped[name] = why
            else:
                variables[name] = plain.variable(tuple(obj.shape), obj.dtype, obj.id.get_offset() or 0,
                                            plain.attrs_of(dict(obj.attrs)))
        attrs = plain.attrs_of(dict(f.attrs))
    return plain.document("hdf5", variables, skipped, attrs)


def _hdf5_storage_problem(h5py: Any, dcpl: Any) -> str | None:
    """Why an HDF5 dataset's storage is not one contiguous run of bytes in this file (its layout, as HDF5 names
    it), or None. Issue 23: external, compact and virtual datasets were all called "chunked or filtered"."""
    layout = dcpl.get_layout()
    if layout == h5py.h5d.CONTIGUOUS:
        if dcpl.get_external_count():
            return "external storage: its data is in another file (H5Pset_external), not in this one"
        if dcpl.get_nfilters():
            return "filtered (compressed): not one contiguous run of bytes"
        return None
    if layout == h5py.h5d.COMPACT:
        return "compact layout: its data is stored inside the object header, not as a run of bytes ckptio can read"
    if layout == getattr(h5py.h5d, "VIRTUAL", -1):
        return "a virtual dataset (VDS): its data is mapped from other datasets or files"
    if layout == h5py.h5d.CHUNKED:
        return "chunked or filtered (compressed): not one contiguous run of bytes"
    return f"HDF5 layout {layout}: not one contiguous run of bytes"
