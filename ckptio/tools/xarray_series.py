"""A series of checkpoints as one ``xarray.Dataset`` with a ``step`` dimension (issue 27, item 11). Serial.

::

    ds = ckptio.open_series("run", prefix="chk")      # dims: step, then each variable's own
    ds.dens.sel(step=120)                              # reads that checkpoint's blocks only
    ds.dens[:, 3].mean("y")                            # one block row of every checkpoint
    ds.time                                            # coordinate along step, from each checkpoint's attribute

One process, no communicator and no mpirun (as in a notebook): every checkpoint is opened with
:func:`ckptio.open` on ``COMM_SELF``. The checkpoints are the series' timeline (:func:`ckptio.tiers.catalog.scan` and
:func:`ckptio.tiers.catalog.timeline`): committed checkpoints named exactly ``{prefix}_{step}{suffix}``, oldest step
first; checkpoints superseded by a restart from an older step are left out, and a file whose metadata cannot be
read is left out with a warning. Any backend, any writer count, mixed within a series.

Lazy as ``engine="ckptio"`` is: opening reads each checkpoint's metadata (and its index coordinates, as xarray
does), not its data; indexing reads only the selected checkpoints' hyperslabs, checksums verified unless
``verify=False``. Every checkpoint stays open until the Dataset is closed (``ds.close()`` or ``with``).

Variables. A variable becomes ``(step, *its dims)`` when every checkpoint has it with the same dims, shape and
dtype; a variable that differs (particles whose count changes, a variable added later) is an error naming it:
leave it out with ``drop_variables=`` and read it per checkpoint with :func:`ckptio.open`. An index coordinate (a
1-D variable named like its dimension) must be equal in every checkpoint and stays 1-D. Its attributes are the
first checkpoint's. The Dataset's attributes are those equal in every checkpoint, without ``ckptio*`` ones (see
:mod:`ckptio.tools.xarray_helpers`). Coordinates along ``step``: ``step`` (from the names) and, when every checkpoint
has a numeric attribute ``time_attr`` (default ``"time"``), that attribute.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ckptio import _warn
from ckptio.tiers import catalog


def open_series(directory: str | os.PathLike, prefix: str = "chk", *, suffix: str = "",
                dim: str = "step", time_attr: str | None = "time", verify: bool = True,
                drop_variables: str | Iterable[str] | None = None) -> Any:
    """Serial: the timeline of the series ``{prefix}_{step}{suffix}`` in ``directory`` as one lazy
    ``xarray.Dataset`` concatenated along ``dim`` (see the module docstring). Raises
    :class:`~ckptio.CheckpointIOError` if ``directory`` is missing, :class:`FileNotFoundError` if the series has no
    readable checkpoint, :class:`ValueError` for a variable that is not alike in every checkpoint."""
    import xarray as xr
    from xarray.core import indexing

    from ckptio.api import open as open_checkpoint
    from ckptio.tools.xarray_helpers import user_attrs

    entries = catalog.scan(directory, catalog.NamePattern.for_prefix(prefix, suffix))
    for e in entries:
        if not e.committed:
            _warn.warn(f"ckptio.open_series: skipping {e.path}: {e.problem or 'unreadable'}")
    line = sorted(catalog.timeline(entries), key=lambda e: e.step)
    if not line:
        raise FileNotFoundError(f"no checkpoint named {prefix}_<step>{suffix} in {os.fspath(directory)}")
    dropped = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables or ())
    readers: list[Any] = []
    try:
        for e in line:
            readers.append(open_checkpoint(e.path, verify=verify))
        variables = _stacked_variables(readers, [e.path for e in line], dim, dropped, xr, indexing)
        attrs = _common_attrs([user_attrs(r.attrs) for r in readers])
        coords: dict[str, Any] = {dim: (dim, np.array([e.step for e in line], dtype=np.int64))}
        times = [r.attrs.get(time_attr) for r in readers] if time_attr else []
        if times and all(_is_number(t) for t in times) and time_attr not in variables:
            coords[time_attr] = (dim, np.asarray(times))  # type: ignore[index]
            attrs.pop(time_attr, None)  # type: ignore[arg-type]
        dataset = xr.Dataset(variables, coords=coords, attrs=attrs)
    except BaseException:
        for r in readers:
            r.close()
        raise

    def close() -> None:
        for r in readers:
            r.close()

    dataset.set_close(close)
    return dataset


class _SeriesArray:
    """One variable of every checkpoint, stacked along a leading step axis, for xarray: basic indexing; each
    checkpoint's part is read through its LazyVariable (reads of one checkpoint are serialized: a Reader is not
    thread-safe)."""

    def __init__(self, parts: list[Any], locks: list[threading.Lock]):
        self.parts, self.locks = parts, locks
        self.shape = (len(parts), *parts[0].shape)
        self.dtype = parts[0].dtype

    def read(self, key: tuple) -> np.ndarray:
        first, rest = key[0], key[1:]
        if isinstance(first, slice):
            chosen = range(len(self.parts))[first]
        else:
            chosen = [first]
        pieces = []
        for i in chosen:
            with self.locks[i]:
                pieces.append(np.asarray(self.parts[i][rest]))
        if not isinstance(first, slice):
            return pieces[0]
        if not pieces:  # an empty step selection: the shape the other axes' selection would have
            inner = np.broadcast_to(np.empty((), self.dtype), self.shape[1:])[rest].shape
            return np.empty((0, *inner), self.dtype)
        return np.stack(pieces)


def _stacked_variables(readers: list[Any], paths: list[str], dim: str, dropped: set[str], xr: Any,
                       indexing: Any) -> dict[str, Any]:
    from xarray.backends import BackendArray

    class SeriesBackendArray(BackendArray):
        def __init__(self, inner: _SeriesArray):
            self.inner, self.shape, self.dtype = inner, inner.shape, inner.dtype

        def __getitem__(self, key: Any) -> np.ndarray:
            return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC,
                                                      self.inner.read)

    first = readers[0].variables
    names = [n for n in first if n not in dropped]
    unlike = []
    for name in names:
        info = first[name]
        for r, path in zip(readers[1:], paths[1:], strict=True):
            other = r.variables.get(name)
            if other is None or (other.dims, tuple(other.shape), other.dtype) != (info.dims, tuple(info.shape),
                                                                                  info.dtype):
                unlike.append(f"{name!r} ({_describe(info)} in {os.path.basename(paths[0])}, "
                              f"{_describe(other)} in {os.path.basename(path)})")
                break
    later = sorted({n for r in readers[1:] for n in r.variables} - set(first) - dropped)
    unlike += [f"{n!r} (absent from {os.path.basename(paths[0])})" for n in later]
    if unlike:
        raise ValueError(f"ckptio.open_series: variables not alike in every checkpoint: {', '.join(unlike)}; "
                         "leave them out with drop_variables= and read them per checkpoint with ckptio.open")
    if dim in names:
        raise ValueError(f"ckptio.open_series: a variable is named {dim!r}, like the series dimension: pass another "
                         "dim=")
    locks = [threading.Lock() for _ in readers]
    out: dict[str, Any] = {}
    for name in names:
        info = first[name]
        if dim in info.dims:
            raise ValueError(f"ckptio.open_series: variable {name!r} already has a dimension {dim!r}: pass another "
                             "dim=")
        if info.dims == (name,):  # an index coordinate: one, equal in every checkpoint
            values = [np.asarray(r[name][...]) for r in readers]
            for v, path in zip(values[1:], paths[1:], strict=True):
                if not np.array_equal(v, values[0], equal_nan=values[0].dtype.kind in "fc"):
                    raise ValueError(f"ckptio.open_series: coordinate {name!r} differs between "
                                     f"{os.path.basename(paths[0])} and {os.path.basename(path)} (a moving grid): "
                                     "leave it out with drop_variables=")
            out[name] = xr.Variable(info.dims, values[0], attrs=dict(info.attrs))
            continue
        array = SeriesBackendArray(_SeriesArray([r[name] for r in readers], locks))
        out[name] = xr.Variable((dim, *info.dims), indexing.LazilyIndexedArray(array), attrs=dict(info.attrs))
    return out


def _describe(info: Any) -> str:
    if info is None:
        return "absent"
    return f"dims {tuple(info.dims)} shape {tuple(info.shape)} {np.dtype(info.dtype).name}"


def _common_attrs(all_attrs: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The attributes equal in every mapping (the first one's order)."""
    first = all_attrs[0]
    return {k: v for k, v in first.items() if all(k in a and _same(a[k], v) for a in all_attrs[1:])}


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    except (TypeError, ValueError):
        return a == b


def _is_number(value: Any) -> bool:
    return (isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)
            and math.isfinite(float(value)))
