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

from ckptio.model.block_table import BlockTable
from ckptio.model.document import NO_CHECKSUM, CheckpointDocument, StorageRecord, VariableRecord

NUMERIC = "biufc"


def one_block(shape: tuple[int, ...]) -> BlockTable:
    nd = len(shape)
    z = np.zeros(1, np.int64)
    return BlockTable(z, np.zeros((1, nd), np.int64), np.array([shape], np.int64).reshape(1, nd),
                      np.zeros(1, np.uint64), np.full(1, -1, np.int64), z, np.full(1, -1, np.int64), [])


def variable(shape: tuple[int, ...], file_dtype: np.dtype, file_offset: int, attrs: dict[str, Any],
              dims: tuple[str, ...] | None = None) -> VariableRecord:
    native = file_dtype.newbyteorder("=")
    storage = StorageRecord({"file_offset": int(file_offset), "file_dtype": file_dtype.str, "format": "plain"})
    return VariableRecord(native.str, tuple(int(n) for n in shape), "array", one_block(shape), 1, dims, attrs,
                          storage)


def document(backend: str, variables: dict[str, VariableRecord], skipped: dict[str, str],
              attrs: dict[str, Any]) -> CheckpointDocument:
    return CheckpointDocument(2, backend, 1, NO_CHECKSUM, attrs, variables, plain=True, plain_skipped=skipped)


def json_value(value: Any) -> Any:
    """An attribute value as a plain JSON value (numbers, strings, lists), or None when it has no such form."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        if value.dtype.kind in NUMERIC and value.ndim <= 1:  # netCDF attributes are arrays: one value is a scalar
            return value.item() if value.size == 1 else value.tolist()
        if value.dtype.kind == "S" and value.size == 1:
            return value.reshape(-1)[0].decode("utf-8", "replace")
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value if isinstance(value, bool | int | float | str) else None


def attrs_of(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in ((str(k), json_value(v)) for k, v in raw.items()) if v is not None}


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
