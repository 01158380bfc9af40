"""Attribute values and dimension names as a checkpoint stores them (the checkpoint's ``attrs``, each variable's
``dims`` and ``attrs``). Pure: no MPI, no files.

Attribute values are plain JSON (numbers, strings, booleans, None, lists of them): :func:`normalize_attrs` turns
what a user declares (numpy scalars and 1-D arrays included) into that form, :func:`attrs_identical` compares
two stored values as stored. ``dims`` names each axis of a variable (:func:`variable_dims` gives ``<name>_d<i>``
when none were declared, the netCDF backend's names), one name meaning one length across the whole checkpoint
(:func:`shared_dim_lengths`). Functions here take a variable as any mapping with ``shape`` and optional ``dims``
(a :class:`ckptio.model.document.VariableRecord`, or the write side's dict entries).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ckptio.errors import DeclarationError
from ckptio.model.layout import check_name

# Attribute names the HDF5 dimension-scale API and netCDF-4 manage themselves on a dataset (a user value would
# break the dimensions every HDF5/netCDF reader sees). Names starting with "_" are netCDF's (``_FillValue``
# changes how readers decode the data, and must have the variable's type): refused as well.
RESERVED_VARIABLE_ATTRS = frozenset({"CLASS", "NAME", "DIMENSION_LIST", "REFERENCE_LIST", "DIMENSION_LABELS"})


# ------------------------------------------------------------------------------------------ attribute values
def jsonable_attr(key: str, value: Any) -> Any:
    """Convert an attribute value to plain JSON types (numpy scalars accepted), or raise DeclarationError."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, list | tuple):
        return [jsonable_attr(key, v) for v in value]
    if isinstance(value, np.ndarray) and value.ndim <= 1 and value.dtype.kind in "biuf":
        return [jsonable_attr(key, v) for v in value.tolist()]
    raise DeclarationError(
        f"attribute {key!r}: value of type {type(value).__name__} is not JSON-compatible "
        "(use numbers, strings, booleans, None or lists of them)"
    )



def numeric_list_array(value: Any) -> Any:
    """A stored attribute value that is a non-empty list of numbers (no booleans) as the array a file format keeps
    natively: int64 when every item is an integer, else float64; None for anything else, or for integers beyond
    int64 (the backends then store the value as JSON text)."""
    if not (isinstance(value, list) and value and all(isinstance(v, int | float) and not isinstance(v, bool)
                                                      for v in value)):
        return None
    try:
        return np.asarray(value, dtype=np.int64 if all(isinstance(v, int) for v in value) else np.float64)
    except OverflowError:
        return None

def normalize_attrs(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The checkpoint's attributes as stored (:func:`jsonable_attr` of each); DeclarationError naming the first
    name or value that cannot be stored."""
    out: dict[str, Any] = {}
    for key, value in (attrs or {}).items():
        if not isinstance(key, str) or not key or "/" in key:
            raise DeclarationError(f"attribute name {key!r} must be a non-empty string without '/'")
        out[key] = jsonable_attr(key, value)
    return out


def attrs_identical(a: Any, b: Any) -> bool:
    """Whether two normalized attribute values (or attribute dicts) are the same value as stored: same JSON
    types (``1``, ``1.0`` and ``True`` differ), floats bit-identical except that every NaN equals every NaN
    (``nan != nan`` would make a NaN attribute "differ" from itself), lists and dicts element by element."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a.hex() == b.hex()
    if isinstance(a, list):
        return len(a) == len(b) and all(attrs_identical(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(attrs_identical(a[k], b[k]) for k in a)
    return a == b


def check_variable_attr_name(key: Any) -> None:
    """DeclarationError if ``key`` cannot be a variable attribute's name in every format."""
    if not isinstance(key, str) or not key or "/" in key:
        raise DeclarationError(f"attribute name {key!r} must be a non-empty string without '/'")
    if key in RESERVED_VARIABLE_ATTRS or key.startswith("_"):
        raise DeclarationError(f"attribute name {key!r} is reserved (HDF5 dimension scales use CLASS, NAME, "
                               "DIMENSION_LIST, REFERENCE_LIST and DIMENSION_LABELS; netCDF names starting with '_')")


def check_stored_variable_attrs(attrs: Mapping[str, Any]) -> None:
    """A variable's stored ``attrs`` (of a parsed document): names every format accepts, plain JSON values as
    :func:`normalize_attrs` stores them; ValueError (DeclarationError) naming the first that is not."""
    for key, value in attrs.items():
        check_variable_attr_name(key)
        if not attrs_identical(jsonable_attr(key, value), value):
            raise ValueError(f"attribute {key!r} is {value!r}, not a stored attribute value")


# ------------------------------------------------------------------------------------------ dimension names
def default_dims(name: str, ndim: int) -> list[str]:
    """The dimension names of a variable declared without ``dims``: ``<name>_d0``, ``<name>_d1``, ..."""
    return [f"{name}_d{i}" for i in range(ndim)]


def variable_dims(name: str, var: Mapping[str, Any]) -> tuple[str, ...]:
    """The dimension names of variable ``name`` (an entry of a validated document): declared, or the defaults."""
    return tuple(var.get("dims") or default_dims(name, len(var["shape"])))


def variable_nbytes(var: Mapping[str, Any]) -> int:
    """The bytes of a variable's whole global array (an entry with ``shape`` and ``dtype``)."""
    return math.prod(var["shape"]) * np.dtype(var["dtype"]).itemsize


def check_dim_name(dim: Any) -> str:
    """A dimension name follows the variable-name rules (portable to HDF5 and netCDF); DeclarationError (a
    ValueError) otherwise."""
    try:
        return check_name(dim)
    except DeclarationError as exc:
        raise DeclarationError(str(exc).replace("variable name", "dimension name", 1)) from None


def check_dims(dims: Any, ndim: int) -> list[str]:
    """``dims`` as stored: a list of ``ndim`` distinct dimension names (DeclarationError otherwise)."""
    if isinstance(dims, str | bytes) or not isinstance(dims, list | tuple):
        raise DeclarationError(f"dims {dims!r} must be a sequence of dimension names (one per axis)")
    if len(dims) != ndim:
        raise DeclarationError(f"dims {list(dims)} name {len(dims)} axes, but the variable has {ndim}")
    for dim in dims:
        check_dim_name(dim)
    if len(set(dims)) != len(dims):
        raise DeclarationError(f"dims {list(dims)} name one dimension twice (each axis needs its own dimension)")
    return list(dims)


def check_shared_dim_lengths(variables: Mapping[str, Mapping[str, Any]]) -> None:
    """:func:`shared_dim_lengths`' check alone (DeclarationError naming both variables). Default names never meet
    (``<name>_d<axis>``: the axis is digits, so the name and axis are read back unambiguously), so a document in
    which no variable declares ``dims`` passes without listing them: 10,000 small variables, none declared."""
    if any(var.get("dims") for var in variables.values()):
        shared_dim_lengths(variables)


def shared_dim_lengths(variables: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Every dimension name of ``variables`` (name -> entry with ``shape`` and optional ``dims``; defaults
    count) with its length. DeclarationError (a ValueError) naming both variables when one name has two
    lengths: a dimension is shared, so HDF5 and netCDF files hold it once."""
    lengths: dict[str, tuple[int, str]] = {}
    for name, var in variables.items():
        for dim, n in zip(variable_dims(name, var), var["shape"], strict=True):
            first = lengths.setdefault(dim, (n, name))
            if first[0] != n:
                raise DeclarationError(f"dimension {dim!r} has length {first[0]} in variable {first[1]!r} but {n} in "
                                       f"variable {name!r}; a dimension name means one length in a checkpoint")
    return {dim: n for dim, (n, _) in lengths.items()}
