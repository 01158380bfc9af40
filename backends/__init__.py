"""Storage backends, installed as ``ckptio.backends``. Every backend is always registered: detecting and reading
a checkpoint need no format library (the built-in header parsers and the raw extent reader do it). Writing
HDF5 needs h5py built with MPI, writing PnetCDF needs pnetcdf-python; without them ``create`` raises
CapabilityError naming the library and its install command (:data:`MISSING`, :func:`available_backends`)."""

from __future__ import annotations

from . import hdf5, mpiio, pnetcdf  # noqa: F401 - register "hdf5", "mpiio", "pnetcdf"
from .base import (
    Backend,
    Capabilities,
    ExtentReader,
    WriteSession,
    WrittenBlock,
    available_backends,
    detect_backend,
    get_backend,
    known_backends,
    looks_like_checkpoint,
    missing_libraries,
    register,
)

MISSING: dict[str, str] = missing_libraries()  # backend -> why this process cannot write it

__all__ = ["MISSING", "Backend", "Capabilities", "ExtentReader", "WriteSession", "WrittenBlock",
           "available_backends", "detect_backend", "get_backend", "known_backends", "looks_like_checkpoint",
           "missing_libraries", "register"]
