"""Storage backends, installed as ``ckptio.backends``. Importing this package registers every backend
whose Python dependencies are importable (h5py with MPI for ``hdf5``, pnetcdf-python for ``pnetcdf``)."""

from __future__ import annotations

import importlib

from . import mpiio  # noqa: F401 - registers "mpiio"
from .base import (
    Backend,
    Capabilities,
    ExtentReader,
    WriteSession,
    WrittenBlock,
    available_backends,
    detect_backend,
    get_backend,
    register,
)

MISSING: dict[str, str] = {}
for _module in ("hdf5", "pnetcdf"):
    try:
        importlib.import_module(f"{__name__}.{_module}")
    except ImportError as _exc:  # the format's library is not installed: say so when it is asked for
        MISSING[_module] = str(_exc)

__all__ = ["MISSING", "Backend", "Capabilities", "ExtentReader", "WriteSession", "WrittenBlock",
           "available_backends", "detect_backend", "get_backend", "register"]
