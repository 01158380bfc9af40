"""xarray backend: ``xr.open_dataset(path, engine="ckptio")`` opens any ckptio checkpoint (native, HDF5, netCDF).

Registered as the ``ckptio`` engine in ``pyproject.toml`` (``[project.entry-points."xarray.backends"]``). The
checkpoint is opened with :func:`ckptio.open` on ``COMM_SELF`` (this process alone, no mpirun needed); every
variable becomes a lazily indexed xarray variable along its dimensions (declared with ``write(dims=)``, else
``<name>_d0, ...``) with its attributes; the checkpoint's attributes are the Dataset's. Values are read on
demand through :class:`ckptio.lazy.LazyVariable` (hyperslabs, checksums verified unless ``verify=False``), so
``ds.dens[3:5]`` reads two blocks, not the file. Only the user's variables appear: no block tables, no
metadata document, no ``ckptio*`` global attribute (``ckptio_series_seq`` of older files: see
:mod:`ckptio.tools.xarray_helpers`). A 1-D variable named like its dimension becomes an index coordinate
(read at open, as
xarray does for every backend).

xarray imports this module whenever it lists its engines, so it imports neither ckptio's reader nor MPI
until a file is opened (``guess_can_open`` reads 8 bytes: it claims native checkpoints only; HDF5 and netCDF
checkpoints open with their usual engines, or with ``engine="ckptio"``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import Any

import numpy as np
from xarray.backends import BackendArray, BackendEntrypoint
from xarray.core import indexing

NATIVE_MAGIC = b"\x89CKPTIO\n"  # ckptio.backends.mpiio.MAGIC, repeated so that guessing imports nothing


class CkptioBackendArray(BackendArray):
    """One checkpoint variable for xarray: basic (integer and slice) indexing, through a LazyVariable. Reads of
    one checkpoint are serialized (a Reader is not thread-safe; dask may read from several threads)."""

    def __init__(self, variable: Any, lock: threading.Lock):
        self.variable = variable
        self.shape = variable.shape
        self.dtype = variable.dtype
        self.lock = lock

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._read)

    def _read(self, key: tuple) -> np.ndarray:
        with self.lock:
            return np.asarray(self.variable[key])


class CkptioBackendEntrypoint(BackendEntrypoint):
    """``engine="ckptio"``: see the module docstring."""

    description = "Open ckptio checkpoints (native MPI-IO, HDF5 and netCDF formats) through ckptio's reader"
    open_dataset_parameters = ("filename_or_obj", "drop_variables", "verify")

    def open_dataset(self, filename_or_obj: Any, *, drop_variables: str | Iterable[str] | None = None,
                     verify: bool = True) -> Any:
        import xarray as xr

        import ckptio
        from ckptio.tools.xarray_helpers import user_attrs

        if not isinstance(filename_or_obj, str | os.PathLike):
            raise TypeError(f"engine='ckptio' opens a checkpoint by its path, not a {type(filename_or_obj).__name__}")
        dropped = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables or ())
        reader = ckptio.open(os.fspath(filename_or_obj), verify=verify)
        try:
            lock = threading.Lock()
            variables = {}
            for name, info in reader.variables.items():
                if name in dropped:
                    continue
                data = indexing.LazilyIndexedArray(CkptioBackendArray(reader[name], lock))
                variables[name] = xr.Variable(info.dims, data, attrs=dict(info.attrs))
            dataset = xr.Dataset(variables, attrs=user_attrs(reader.attrs))
        except BaseException:
            reader.close()
            raise
        dataset.set_close(reader.close)
        return dataset

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if not isinstance(filename_or_obj, str | os.PathLike):
            return False
        try:
            with open(filename_or_obj, "rb") as f:
                return f.read(len(NATIVE_MAGIC)) == NATIVE_MAGIC
        except OSError:
            return False
