"""Per-variable metadata of a checkpoint being written: dimension names and attributes. Pure: no MPI, no files.

``Writer.write(name, a, ..., dims=(...), attrs={...})`` declares them with each block (:func:`declare`, local);
every block of a variable, on every rank, must declare the same ones, as the checkpoint's attributes must be
the same on every rank. The writer's declare phase gathers one description per variable and rank, and rank 0
checks them together (:func:`agree`, :func:`check_dimensions`); any difference is a DeclarationError raised on
every rank before anything is written. The result goes into the metadata document (``dims``, ``attrs``: see
:mod:`ckptio.model.meta`) and, natively, into the HDF5 and netCDF files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ckptio.errors import DeclarationError
from ckptio.model import meta as metamod

Description = dict[str, Any]  # {"dims": [...]} and/or {"attrs": {...}}; {} when neither was declared


def declare(name: str, ndim: int, dims: Sequence[str] | None, attrs: Mapping[str, Any] | None,
            rank: int) -> Description:
    """Local: the description one ``write()`` call declares for variable ``name`` (``ndim`` axes), checked and
    normalized (JSON values), or DeclarationError naming the variable and ``rank``. An empty ``attrs`` is the
    same as none."""
    out: Description = {}
    try:
        if dims is not None:
            out["dims"] = metamod.check_dims(list(dims) if isinstance(dims, tuple) else dims, ndim)
        if attrs:
            if not isinstance(attrs, Mapping):
                raise DeclarationError(f"attrs must be a mapping of attribute names to values, got "
                                       f"{type(attrs).__name__}")
            for key in attrs:
                metamod.check_variable_attr_name(key)
            out["attrs"] = metamod.normalize_attrs(attrs)
    except DeclarationError as exc:
        raise DeclarationError(f"variable {name!r} on rank {rank}: {exc}") from None
    return out


def same(a: Description, b: Description) -> bool:
    """Whether two descriptions are the same (attribute values compared as stored, see attrs_identical)."""
    if a is b or (not a and not b):  # (a variable's first block: its own description; none declared)
        return True
    return a.get("dims") == b.get("dims") and metamod.attrs_identical(a.get("attrs", {}), b.get("attrs", {}))


def show(d: Description) -> str:
    """A description for messages: ``dims ['x', 'y'] and attrs {'units': 'K'}``, ``no dims and no attrs``."""
    dims = f"dims {d['dims']}" if "dims" in d else "no dims"
    attrs = f"attrs {d['attrs']}" if "attrs" in d else "no attrs"
    return f"{dims} and {attrs}"


def pack(described: Mapping[str, Description]) -> dict[str, list[str]]:
    """Local: one rank's descriptions as sent to rank 0, each distinct one once: its JSON text -> the variables
    declaring it (typically one or two texts for all variables: the gather grows by about a name per variable
    and rank, not a description). JSON text equality is :func:`same`: ``1``, ``1.0`` and ``true`` differ."""
    out: dict[str, list[str]] = {}
    for name, d in described.items():  # (nothing declared, the usual small variable: "{}" without json.dumps)
        out.setdefault(json.dumps(d, sort_keys=True, allow_nan=True) if d else _NOTHING, []).append(name)
    return out


_NOTHING = json.dumps({}, sort_keys=True, allow_nan=True)  # what pack says of a variable without dims or attrs


def agree(by_rank: Sequence[Mapping[str, list[str]]]) -> dict[str, Description]:
    """Rank 0: every variable's description, from each rank's :func:`pack` (one per variable it declared blocks
    of; a rank without blocks of a variable has no say). DeclarationError naming the variable and two ranks
    when ranks declared different ones."""
    first: dict[str, tuple[int, str]] = {}
    for rank, packed in enumerate(by_rank):
        for text, names in packed.items():
            for name in names:
                r0, text0 = first.setdefault(name, (rank, text))
                if text0 != text:
                    d0, d = json.loads(text0), json.loads(text)
                    raise DeclarationError(f"variable {name!r}: rank {r0} declared {show(d0)} but rank {rank} "
                                           f"declared {show(d)}; every block of a variable must declare the same "
                                           "dims and attrs on every rank")
    # (nothing declared, the usual small variable: a fresh {} without json.loads; each variable its own dict)
    return {name: {} if text == _NOTHING else json.loads(text) for name, (_, text) in first.items()}


def check_dimensions(shapes: Mapping[str, Sequence[int]], described: Mapping[str, Description]) -> None:
    """Rank 0, once the global shapes are known (``shapes``: every variable's): DeclarationError when one
    dimension name of the checkpoint has two lengths, or when a dimension is named like a variable that is not
    its coordinate (1-D, along that dimension only): HDF5 would need one dataset for both.

    When no variable declares ``dims`` (thousands of small variables), only a default name ``<name>_d<axis>``
    that is also a variable's name can break a rule, so only names of that form are looked at
    (:func:`_default_dim_clash`); the general check lists every dimension."""
    if not any("dims" in d for d in described.values()):
        clash = _default_dim_clash(shapes)
        if clash is not None:
            name, dim = clash
            raise DeclarationError(_not_coordinate(name, dim, False))
        return
    entries = {name: {"shape": list(shape), **({"dims": described[name]["dims"]} if "dims" in described.get(
        name, {}) else {})} for name, shape in shapes.items()}
    metamod.shared_dim_lengths(entries)
    for name, entry in entries.items():
        declared = "dims" in entry
        for dim in metamod.variable_dims(name, entry):  # declared, or the default <name>_d0, ...
            if dim in entries and dim != name and metamod.variable_dims(dim, entries[dim]) != (dim,):
                raise DeclarationError(_not_coordinate(name, dim, declared))
        d = described.get(name, {})
        for dim in d.get("dims", ()):
            if dim == name and d["dims"] != [name]:
                raise DeclarationError(f"variable {name!r}: a dimension named like its variable must be its only "
                                       f"dimension (a coordinate variable), got dims {d['dims']}")


def _not_coordinate(name: str, dim: str, declared: bool) -> str:
    what, fix = (("dimension", "rename the dimension or the variable") if declared else
                 ("default dimension", f"give {name!r} dims=, or rename variable {dim!r}"))
    return (f"variable {name!r}: {what} {dim!r} is also the name of variable {dim!r}, which is not its coordinate "
            f"(a 1-D variable declared with dims=({dim!r},)); {fix}")


def _default_dim_clash(shapes: Mapping[str, Sequence[int]]) -> tuple[str, str] | None:
    """With no ``dims`` declared anywhere: the first variable (in ``shapes``' order) one of whose default
    dimension names is also a variable's name, with that name; None when there is none. (Default names never
    share a length: ``<name>_d<axis>`` reads back as one name and axis. And no variable is a coordinate, so any
    variable named like another's default dimension breaks the rule.)"""
    owners = set()
    for dim in shapes:
        base, sep, axis = dim.rpartition("_d")
        if sep and axis.isascii() and axis.isdigit() and axis == str(int(axis)) and base in shapes \
                and int(axis) < len(shapes[base]):
            owners.add(base)
    if not owners:
        return None
    name = next(n for n in shapes if n in owners)
    dim = next(d for d in metamod.default_dims(name, len(shapes[name])) if d in shapes)
    return name, dim
