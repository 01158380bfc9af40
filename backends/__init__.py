"""Storage backends, installed as ``ckptio.backends``: one module per file format behind the storage contract of
:mod:`.base`, found through :mod:`.registry` (built-ins, the entry-point group ``ckptio.backends``, or
:func:`register`). Detecting and reading a checkpoint need no format library (the built-in header parsers and the
raw extent reader do it). Writing HDF5 needs h5py built with MPI, writing PnetCDF needs pnetcdf-python; without
them ``create`` raises CapabilityError naming the library and its install command (:data:`MISSING`,
:func:`available_backends`).

No backend module imports its library at import time (h5py and pnetcdf-python load on the first write or h5py
read), and the format modules themselves load on first use: ``import ckptio`` stays cheap on every rank."""

from __future__ import annotations

from typing import Any

from ckptio.backends.base import Backend, Capabilities, ExtentReader, WriteHandle, WrittenBlock
from ckptio.backends.detect import detect_backend, looks_like_checkpoint
from ckptio.backends.registry import available_backends, get_backend, known_backends, missing_libraries, register


def __getattr__(name: str) -> Any:
    """``MISSING`` (backend -> why this process cannot write it), computed on first access: finding out imports
    the backends' libraries (h5py), which ``import ckptio`` must not do (issue 16, startup cost per rank)."""
    if name == "MISSING":
        missing = missing_libraries()
        globals()["MISSING"] = missing
        return missing
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["MISSING", "Backend", "Capabilities", "ExtentReader", "WriteHandle", "WrittenBlock",
           "available_backends", "detect_backend", "get_backend", "known_backends", "looks_like_checkpoint",
           "missing_libraries", "register"]
