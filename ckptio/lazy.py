"""Lazy, h5py-like views of an open checkpoint's variables (``ck["dens"][3:5]``) and readable reprs.

``reader[name]`` returns a :class:`LazyVariable`: nothing is read until it is indexed. Indexing takes integers
(negative ones count from the end), slices with any non-zero step, ``...`` and ``()``, as h5py and numpy
do, and reads the selected hyperslab through the public :meth:`ckptio.Reader.read` (a strided slice reads
the hyperslab its first and last element span, then keeps every step-th element: cheap for small steps, a
whole span for large ones). Integers drop their axis, so ``ck["dens"][3]`` is 3-D and ``ck["dens"][3, 0, 0, 0]``
a numpy scalar. Lists, boolean masks and ``None`` are refused (TypeError): read the hyperslab, then index the
numpy array.

Which ranks call what: like :meth:`ckptio.Reader.read`, indexing is **collective** over the reader's
communicator (every rank indexes, each may select differently). With ``ckptio.open(path)`` (no communicator:
``COMM_SELF``, one process, no mpirun needed) that is just the calling process. Everything else here (shape,
dims, attrs, repr) is local.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ckptio.errors import ClosedCheckpointError, ReadRequestError
from ckptio.model.document import as_document
from ckptio.model.units import format_bytes

MAX_REPR_VARIABLES = 40
MAX_REPR_TEXT = 100


class LazyVariable:
    """One variable of an open reader, read when indexed (see the module docstring)."""

    def __init__(self, reader: Any, name: str):
        variables = reader.variables
        if not isinstance(name, str) or name not in variables:
            raise ReadRequestError(f"variable {name!r} is not in checkpoint {reader.path} "
                                   f"(it has: {', '.join(sorted(variables)) or 'no variables'})")
        self.reader = reader
        self.name = name
        self.info = variables[name]

    # ------------------------------------------------------------------------------------ description
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.info.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.info.dtype

    @property
    def ndim(self) -> int:
        return len(self.info.shape)

    @property
    def size(self) -> int:
        return math.prod(self.info.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.info.dtype.itemsize

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(self.info.dims)

    @property
    def attrs(self) -> Mapping[str, Any]:
        return self.info.attrs

    @property
    def kind(self) -> str:
        return self.info.kind

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError(f"variable {self.name!r} is a scalar (len() of a 0-d variable)")
        return self.shape[0]

    def __repr__(self) -> str:
        attrs = _attrs_text(self.attrs)
        return (f"<ckptio variable {self.name!r} {_dims_text(self.dims, self.shape)} {self.dtype.name}, "
                f"{format_bytes(self.nbytes, digits=1)}, {self.kind}{', ' + attrs if attrs else ''}>")

    # ------------------------------------------------------------------------------------------ reading
    def __getitem__(self, key: Any) -> np.ndarray | np.generic:
        """Collective over the reader's communicator: the selected elements (see the module docstring)."""
        offset, count, local = selection(self.name, key, self.shape)
        if self.ndim == 0:
            box = self.reader.read(self.name)
        else:
            box = self.reader.read(self.name, offset=offset, shape=count)
        out = box[local]
        if isinstance(out, np.ndarray) and not out.flags.c_contiguous:
            out = out.copy()  # a strided view would keep the whole span alive
        return out

    def read(self) -> np.ndarray:
        """Collective: the whole variable (``v[...]``)."""
        return np.asarray(self[...])

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """Collective: ``np.asarray(v)`` reads the whole variable."""
        out = self.read()
        return out if dtype is None else out.astype(dtype, copy=False)


def selection(name: str, key: Any, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple]:
    """Pure: an h5py-style index ``key`` of an array of ``shape`` as (offset, count) of the hyperslab to read
    and the index that takes the selection out of that hyperslab. IndexError for an index out of range,
    TypeError for an unsupported kind of index, ValueError for a zero step."""
    items = key if isinstance(key, tuple) else (key,)
    if sum(1 for k in items if k is Ellipsis) > 1:
        raise IndexError(f"variable {name!r}: an index can only have a single ellipsis ('...')")
    explicit = sum(1 for k in items if k is not Ellipsis)
    if explicit > len(shape):
        raise IndexError(f"variable {name!r}: too many indices ({explicit}) for a {len(shape)}-d variable")
    expanded: list[Any] = []
    for k in items:
        if k is Ellipsis:
            expanded += [slice(None)] * (len(shape) - explicit)
        else:
            expanded.append(k)
    expanded += [slice(None)] * (len(shape) - len(expanded))
    offset, count, local = [], [], []
    for axis, (k, n) in enumerate(zip(expanded, shape, strict=True)):
        if isinstance(k, int | np.integer) and not isinstance(k, bool | np.bool_):
            i = int(k) + n if k < 0 else int(k)
            if not 0 <= i < n:
                raise IndexError(f"variable {name!r}: index {int(k)} is out of bounds for axis {axis} with size {n}")
            offset.append(i), count.append(1), local.append(0)
        elif isinstance(k, slice):
            picked = range(*k.indices(n))  # ValueError for a zero step, as numpy
            if not picked:
                offset.append(0), count.append(0), local.append(slice(0, 0))
                continue
            lo, hi = min(picked[0], picked[-1]), max(picked[0], picked[-1]) + 1
            offset.append(lo), count.append(hi - lo)
            local.append(slice(0, None, picked.step) if picked.step > 0 else slice(picked[0] - lo, None, picked.step))
        else:
            raise TypeError(f"variable {name!r}: index {k!r} is not supported (use integers, slices and '...'; "
                            "for lists or masks read the hyperslab first, then index the numpy array)")
    return tuple(offset), tuple(count), tuple(local)


# ------------------------------------------------------------------------------------------------ reprs
def describe_reader(reader: Any) -> str:
    """Local: a readable summary of an open checkpoint (its repr): format, writer, attributes, variables."""
    kind = type(reader).__name__
    try:
        variables, attrs = reader.variables, reader.attrs
    except ClosedCheckpointError:
        return f"<ckptio.{kind} {reader.path} (closed)>"
    meta = getattr(reader, "meta", None)  # a staged reader has none (no file index)
    doc = None if meta is None else as_document(meta)
    where = getattr(reader, "source", None) or (reader.backend.name if hasattr(reader, "backend") else "?")
    written = f", written on {doc.nprocs} rank(s)" if doc is not None else ""
    written += f" at {doc.created}" if doc is not None and doc.created is not None else ""
    lines = [f"<ckptio.{kind} {reader.path}: {where}{written}, open on {reader.comm.Get_size()} rank(s)>"]
    if attrs:
        lines.append(f"attributes: {_attrs_text(attrs, limit=4 * MAX_REPR_TEXT)}")
    lines.append(f"variables ({len(variables)}):")
    rows = [(name, _dims_text(v.dims, v.shape), v.dtype.name, format_bytes(v.nbytes, digits=1), _attrs_text(v.attrs))
            for name, v in list(variables.items())[:MAX_REPR_VARIABLES]]
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(4)]
    for name, dims, dtype, size, text in rows:
        lines.append(f"  {name:<{widths[0]}}  {dims:<{widths[1]}}  {dtype:<{widths[2]}}  {size:>{widths[3]}}"
                     f"{'  ' + text if text else ''}".rstrip())
    if len(variables) > MAX_REPR_VARIABLES:
        lines.append(f"  ... {len(variables) - MAX_REPR_VARIABLES} more")
    return "\n".join(lines)


def _dims_text(dims: tuple[str, ...], shape: tuple[int, ...]) -> str:
    if len(dims) != len(shape):
        return str(tuple(shape))
    return "(" + ", ".join(f"{d}: {n}" for d, n in zip(dims, shape, strict=True)) + ")"


def _attrs_text(attrs: Mapping[str, Any], limit: int = MAX_REPR_TEXT) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in attrs.items())
    return text if len(text) <= limit else text[:limit - 3] + "..."

