"""The HDF5 backend's check of a checkpoint's datasets against its metadata document: each variable a dataset of
its shape at the byte offset the document records. It finds object headers a full file system lost, a file
another tool rewrote (every dataset moved), and a dataset another program deleted, renamed or re-created (a
restart would otherwise return the bytes ckptio committed, still at their old offset and passing their
checksums, while HDF5 readers see other values). Serial, no MPI: rank 0 at a restart's open, the commit's last
check, ``inspect``; on a file opened with h5py (or on what the built-in parser found)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ckptio.errors import CorruptCheckpointError, IncompleteCheckpointError, RewrittenCheckpointError
from ckptio.model.document import CheckpointDocument, VariableRecord

BACKEND = "hdf5"  # the backend name an HDF5 checkpoint's document must give

Found = Mapping[str, tuple[list[int] | None, int | None]]  # name -> a dataset's (shape, offset), Nones: none


def check_dataset(path: str, name: str, var: VariableRecord, shape: list[int] | None, offset: int | None,
                  size: int) -> None:
    """Variable ``name`` of the document is a dataset of its shape (``shape``; None: no such dataset) at its
    recorded offset (``offset``), inside the file (``size`` bytes)."""
    recorded = var.file_offset
    if shape is None or shape != list(var.shape):
        raise CorruptCheckpointError(f"{path}: variable {name!r}: no dataset /{name} of shape {list(var.shape)}")
    if var.nbytes and (recorded is None or offset != recorded):
        raise CorruptCheckpointError(f"{path}: variable {name!r}: dataset offset {offset} does "
                                     f"not match the metadata ({recorded})")
    if var.nbytes and recorded + var.nbytes > size:
        raise IncompleteCheckpointError(f"{path}: variable {name!r}: file ends inside the dataset (truncated)")


def check_datasets(path: str, f: Any, meta: CheckpointDocument, size: int) -> None:
    """Every variable of the document is a dataset of its shape at its recorded offset, inside the file (first,
    before HDF5 opens any of them, that the datatypes HDF5 would crash on are intact: :func:`check_datatypes`)."""
    if meta.backend != BACKEND:
        raise CorruptCheckpointError(f"{path}: metadata says backend {meta.backend!r}, file is HDF5")
    check_datatypes(path, meta)
    check_found_datasets(path, meta, found_datasets(f, meta.variables), size)


_WALKED_TYPES = "bc"  # numpy kinds h5py stores as HDF5 types with member tables: bool (enum), complex (compound)


def check_datatypes(path: str, meta: CheckpointDocument) -> None:
    """CorruptCheckpointError naming the variable when a dataset of a bool or complex variable has a damaged
    datatype message. HDF5 stores these as an enum (members FALSE, TRUE) and a compound (members r, i) and walks
    their member tables when a dataset is opened: a flipped byte in a size or count there made ``H5Dopen``
    crash the process (SIGSEGV in ``H5T_copy``, HDF5 1.10.8), so that ``inspect``, ``ls``, ``open`` and
    ``latest()`` died instead of reporting the damage and falling back. The message is read with the built-in
    parser (:mod:`.h5lite`, pure Python) and compared with the one this HDF5 encodes for the variable's file
    dtype: a message of another class, or of the same version and class with other bytes, is damage. One of the
    same class in another version of the message (a file written by another HDF5 release) is left to HDF5.
    Other datatypes are not looked at (no cost for the usual float and integer variables). Serial, no MPI."""
    walked = {name: var for name, var in meta.variables.items() if _kind(var.file_dtype) in _WALKED_TYPES}
    if not walked:
        return
    from ckptio.backends import h5lite

    try:
        with h5lite.H5Lite(path) as lite:
            for name, var in walked.items():
                addr = lite.lookup(f"/{name}")
                body = lite.datatype_message(addr) if addr is not None else None
                expected = _encoded_datatype(var.file_dtype)
                if not body or expected is None:
                    continue  # (no dataset, or none HDF5 can make of the dtype: the dataset check decides)
                if (body[0] & 0x0F) == (expected[0] & 0x0F) and body[0] >> 4 != expected[0] >> 4:
                    continue  # (the class, in another version of the message: another HDF5 release, left to it)
                if body[:len(expected)] != expected or body[len(expected):].strip(b"\0"):
                    raise CorruptCheckpointError(f"{path}: variable {name!r}: the HDF5 datatype of dataset /{name} "
                                                 f"is damaged (not the {var.file_dtype} type ckptio wrote)")
    except h5lite.Unsupported:  # (a structure the parser does not implement: nothing it can look at)
        return


_KINDS: dict[str, str] = {}


def _kind(dtype: str) -> str:
    """The numpy kind of a document's dtype string ("" for none numpy knows); one parse per distinct string."""
    found = _KINDS.get(dtype)
    if found is None:
        import numpy as np

        try:
            found = np.dtype(dtype).kind
        except TypeError:
            found = ""
        _KINDS[dtype] = found
    return found


_ENCODED: dict[str, bytes | None] = {}


def _encoded_datatype(dtype: str) -> bytes | None:
    """The body of the datatype message this HDF5 writes for numpy dtype ``dtype`` (``H5Tencode`` without its
    two-byte prefix), or None where h5py cannot make one. One per distinct dtype."""
    if dtype not in _ENCODED:
        import numpy as np

        try:
            _ENCODED[dtype] = bytes(_h5py().h5t.py_create(np.dtype(dtype)).encode())[2:]
        except (TypeError, ValueError):
            _ENCODED[dtype] = None
    return _ENCODED[dtype]


def found_datasets(f: Any, names: Iterable[str]) -> Found:
    """Name -> (shape, storage offset) of each named dataset of ``f``'s root group, (None, None) where there is
    no dataset of that name."""
    found = {}
    group = f.id
    h5py = _h5py()
    for name in names:  # h5py's low-level objects: half the cost of f.get() per variable
        try:
            obj = h5py.h5o.open(group, name.encode("utf-8"))
        except KeyError:  # no such object (h5py's error for HDF5's "not found"; other errors are damage)
            obj = None
        found[name] = (list(obj.shape), obj.get_offset()) if isinstance(obj, h5py.h5d.DatasetID) else (None, None)
    return found


def check_found_datasets(path: str, meta: CheckpointDocument, found: Found,
                          size: int) -> None:
    """Every variable of the document against ``found`` (name -> the dataset's shape and offset, or Nones: no
    such dataset): first whether another tool rewrote the file (:func:`rewritten_by_another_tool`), then each
    variable (:func:`check_dataset`)."""
    why = rewritten_by_another_tool(meta, found, size)
    if why is not None:
        raise RewrittenCheckpointError(f"{path}: rewritten by another tool after ckptio committed it (h5repack, "
                                       f"h5copy or a program that copied every object into a new file?): {why}; "
                                       "ckptio cannot read or verify the values there (they are probably intact: "
                                       "h5dump shows them); restart from the file as ckptio wrote it")
    for name, var in meta.variables.items():
        check_dataset(path, name, var, found[name][0], found[name][1], size)


def rewritten_by_another_tool(meta: CheckpointDocument, found: Found,
                              size: int) -> str | None:
    """Local: why the file looks rewritten by another tool, or None. The evidence: the metadata document is intact
    (checked before), every variable holding data is a dataset of its shape, and EVERY one of them is somewhere
    else than where ckptio wrote it (another offset, or no longer contiguous: ``offset`` None). A damaged
    address (a flipped bit) moves one dataset, not all of them, and stays "corrupt"; so does a single-variable
    file whose one dataset now points outside the file."""
    moved = []
    for name, var in meta.variables.items():
        nbytes = var.nbytes
        if not nbytes:
            continue
        shape, offset = found.get(name, (None, None))
        recorded = var.file_offset
        if shape != list(var.shape) or offset == recorded:
            return None
        if offset is not None and offset + nbytes > size:
            return None
        moved.append(f"{name!r} at {'no single offset (no longer contiguous)' if offset is None else offset}, "
                     f"written at {recorded}")
    if not moved:
        return None
    shown = "; ".join(moved[:3]) + (f"; ... ({len(moved)} variables)" if len(moved) > 3 else "")
    return f"every dataset moved ({shown})"




def _h5py() -> Any:
    """The h5py module (loaded by the backend before any file is opened)."""
    from ckptio.backends import hdf5_lib

    return hdf5_lib.load()
