"""Restart from HDF5 and netCDF files ckptio did not write: an existing code moves its restart reads to ckptio's
two-phase aggregated read without changing its file format. Rank 0 only, no MPI.

An HDF5 file without ckptio's ``/ckptio`` group, or a classic netCDF file (CDF-1, CDF-2, CDF-5) without its
``ckptio_metadata``, is described by a metadata document built here from the file's own structures: every
variable stored as one contiguous, unfiltered run of bytes (an HDF5 dataset with the contiguous layout and no
filters, at the root of the file; a fixed-size netCDF variable) of a numeric type becomes a variable with one
block (the whole array) at its file offset, so the aggregators read it as raw byte ranges like a checkpoint's.
Such a file carries **no checksums**: the document says ``"checksum": "none"``, :attr:`ckptio.Reader.checksummed`
is False and nothing is verified. Variables that cannot be read that way (chunked or compressed HDF5 datasets,
HDF5 datasets with external, compact or virtual storage, netCDF record variables, strings, compound types,
datasets in subgroups, HDF5 datasets never written) are listed in ``plain_skipped`` with the reason; reading one
is a :class:`~ckptio.ReadRequestError` naming it. So are **packed** variables (a CF ``scale_factor`` or
``add_offset`` attribute): ckptio does not unpack, and refuses them rather than return the stored values as if
they were the physical ones (:func:`packed_problem`).

Reading an HDF5 file's structure needs h5py (any build, serial wheels too); netCDF headers are parsed by ckptio.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ckptio.errors import CapabilityError, UnknownFormatError
from ckptio.model.block_table import BlockTable
from ckptio.model.document import NO_CHECKSUM, CheckpointDocument, StorageRecord, VariableRecord

_NUMERIC = "biufc"


def _one_block(shape: tuple[int, ...]) -> BlockTable:
    nd = len(shape)
    z = np.zeros(1, np.int64)
    return BlockTable(z, np.zeros((1, nd), np.int64), np.array([shape], np.int64).reshape(1, nd),
                      np.zeros(1, np.uint64), np.full(1, -1, np.int64), z, np.full(1, -1, np.int64), [])


def _variable(shape: tuple[int, ...], file_dtype: np.dtype, file_offset: int, attrs: dict[str, Any],
              dims: tuple[str, ...] | None = None) -> VariableRecord:
    native = file_dtype.newbyteorder("=")
    storage = StorageRecord({"file_offset": int(file_offset), "file_dtype": file_dtype.str, "format": "plain"})
    return VariableRecord(native.str, tuple(int(n) for n in shape), "array", _one_block(shape), 1, dims, attrs,
                          storage)


def _document(backend: str, variables: dict[str, VariableRecord], skipped: dict[str, str],
              attrs: dict[str, Any]) -> CheckpointDocument:
    return CheckpointDocument(2, backend, 1, NO_CHECKSUM, attrs, variables, plain=True, plain_skipped=skipped)


def _json_value(value: Any) -> Any:
    """An attribute value as a plain JSON value (numbers, strings, lists), or None when it has no such form."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        if value.dtype.kind in _NUMERIC and value.ndim <= 1:  # netCDF attributes are arrays: one value is a scalar
            return value.item() if value.size == 1 else value.tolist()
        if value.dtype.kind == "S" and value.size == 1:
            return value.reshape(-1)[0].decode("utf-8", "replace")
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value if isinstance(value, bool | int | float | str) else None


def _attrs(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in ((str(k), _json_value(v)) for k, v in raw.items()) if v is not None}


def hdf5_document(path: str) -> CheckpointDocument:
    """Rank 0: the document of a plain HDF5 file (see the module docstring)."""
    try:
        import h5py
    except ImportError:
        raise CapabilityError(f"{path}: reading an HDF5 file ckptio did not write needs h5py (pip install h5py)") \
            from None
    variables: dict[str, VariableRecord] = {}
    skipped: dict[str, str] = {}
    from ckptio.backends.hdf5 import open_for_reading

    with open_for_reading(path) as f:
        for name, obj in f.items():
            if not isinstance(obj, h5py.Dataset):
                skipped[name] = "a group (only datasets at the root of the file are read)"
                continue
            dcpl = obj.id.get_create_plist()
            if obj.dtype.kind not in _NUMERIC or obj.dtype.fields is not None:
                skipped[name] = f"type {obj.dtype} is not numeric"
            elif (why := _hdf5_storage_problem(h5py, dcpl)) is not None:
                skipped[name] = why
            elif obj.id.get_offset() is None and obj.size:
                skipped[name] = "never written (no storage allocated)"
            elif (why := packed_problem(obj.attrs)) is not None:
                skipped[name] = why
            else:
                variables[name] = _variable(tuple(obj.shape), obj.dtype, obj.id.get_offset() or 0,
                                            _attrs(dict(obj.attrs)))
        attrs = _attrs(dict(f.attrs))
    return _document("hdf5", variables, skipped, attrs)


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


# CF packing attributes: the stored values are not the physical ones (netCDF's "packed data")
PACKING_ATTRS = ("scale_factor", "add_offset")


def packed_problem(attrs: Any) -> str | None:
    """Why a variable of a foreign file is refused because it is packed, or None.

    Decision (issue 23): a variable with a CF ``scale_factor`` or ``add_offset`` attribute (netCDF, or HDF5 as
    netCDF-4 writes it) is **refused**, listed in ``plain_skipped``; reading it raises ReadRequestError naming
    the reason. ckptio reads raw bytes and never applies the unpacking, so returning the stored integers would
    hand a restart silently wrong physical values (they were ignored before). Unpack with netCDF4/xarray, or
    write the unpacked values with ckptio."""
    present = [a for a in PACKING_ATTRS if a in attrs]
    if not present:
        return None
    return (f"packed ({' and '.join(present)} set): ckptio reads the stored values and would not apply the "
            f"unpacking (value * scale_factor + add_offset), so it refuses the variable; read it with netCDF4 or "
            f"xarray, which unpack")


def netcdf_document(path: str) -> CheckpointDocument:
    """Rank 0: the document of a plain classic netCDF file (CDF-1, CDF-2 or CDF-5)."""
    from ckptio.backends.cdf import NC_TYPES, read_header

    header = read_header(path)
    variables: dict[str, VariableRecord] = {}
    skipped: dict[str, str] = {}
    for name, var in header.vars.items():
        if var.is_record:
            skipped[name] = "a record variable (along the unlimited dimension, interleaved with the others)"
            continue
        dtype = np.dtype(NC_TYPES[var.nc_type])
        if dtype.kind not in _NUMERIC:
            skipped[name] = "a char variable (text), not numeric"
            continue
        if (why := packed_problem(var.attrs)) is not None:
            skipped[name] = why
            continue
        shape = tuple(header.dims[d][1] for d in var.dimids)
        dims = tuple(header.dims[d][0] for d in var.dimids)  # netCDF's shared dimensions
        variables[name] = _variable(shape, dtype, var.begin, _attrs(var.attrs), dims)
    return _document("pnetcdf", variables, skipped, _attrs(header.attrs))


def plain_document(path: str, backend: str) -> CheckpointDocument:
    """Rank 0: the document of a file in ``backend``'s container format that ckptio did not write."""
    if backend == "hdf5":
        return hdf5_document(path)
    if backend == "pnetcdf":
        return netcdf_document(path)
    raise UnknownFormatError(f"{path}: not a ckptio checkpoint, nor an HDF5 or netCDF file")
