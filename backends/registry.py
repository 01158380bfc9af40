"""The registry of file formats: built-in ones, ones installed through the entry-point group ``ckptio.backends``,
and ones registered at run time with ``register`` (h5py's ``register_driver`` pattern).

A fourth format is one module plus one entry point in the package that ships it::

    [project.entry-points."ckptio.backends"]
    myformat = "mypackage.myformat:MyFormatBackend"

Cost per rank: the three built-in formats are found without reading any package metadata, so ``get_backend("hdf5")``
on 100,000 ranks does not make 100,000 scans of site-packages on a parallel file system (the import storm HPC
centres warn about). The entry points are read once per process, only when a name is not a built-in or when every
format is needed (detecting the format of a file, listing formats: one process, serial).

Everything here is local (no MPI).
"""

from __future__ import annotations

import importlib

from ckptio.backends.base import Backend, CapabilityError

GROUP = "ckptio.backends"
# name -> "module:class" of the formats shipped with ckptio (also declared as entry points in pyproject.toml, so
# tools that list the group see them). Order matters for detection only in that it is stable.
BUILTIN = {"hdf5": "ckptio.backends.hdf5:HDF5Backend", "mpiio": "ckptio.backends.mpiio:NativeBackend",
           "pnetcdf": "ckptio.backends.pnetcdf:PnetCDFBackend"}

_classes: dict[str, type[Backend]] = {}  # loaded so far
_entry_points_read = False
_broken: dict[str, str] = {}  # entry point name -> why it could not be loaded (named in messages)


# What a class must have to serve as a format (it normally subclasses Backend and inherits the rest)
REQUIRED = ("name", "format_version", "capabilities", "sniff", "write_problem", "check_dtype", "check_attr", "place",
            "create", "read_document", "extents", "extent_table", "open_extents", "serial_extents")


def _load(name: str, target: str) -> type[Backend]:
    module, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    lacking = [a for a in REQUIRED if not hasattr(cls, a)] if isinstance(cls, type) else ["a class"]
    if lacking or cls.name != name:
        raise TypeError(f"{target} is not a ckptio backend class named {name!r} (it lacks {', '.join(lacking)}; "
                        f"subclass ckptio.backends.base.Backend)" if lacking else
                        f"{target} is named {cls.name!r}, but its entry point says {name!r}")
    return cls


def _builtins() -> None:
    for name, target in BUILTIN.items():
        if name not in _classes:
            _classes[name] = _load(name, target)


def _entry_points() -> None:
    """Read the group ``ckptio.backends`` once; an entry point that fails to load is remembered with why (a
    broken third-party package must not make ckptio unusable)."""
    global _entry_points_read
    if _entry_points_read:
        return
    _entry_points_read = True
    _builtins()
    # imported here, not at the top: importlib.metadata (with the email and socket modules it brings) is ~35 ms
    # of the ~190 ms that `import ckptio` adds to numpy's on the reference machine, in every rank of every job
    from importlib import metadata

    for ep in metadata.entry_points(group=GROUP):
        if ep.name in _classes:
            continue
        try:
            _classes[ep.name] = _load(ep.name, ep.value)
        except Exception as exc:  # a third party's import error: reported when that name is asked for
            _broken[ep.name] = f"its entry point {ep.value} failed to load: {type(exc).__name__}: {exc}"


def register(cls: type[Backend]) -> type[Backend]:
    """Make ``cls`` available by its ``name`` in this process (a class decorator; a backend shipped as a package
    uses an entry point instead, which every process finds by itself)."""
    _classes[cls.name] = cls
    return cls


def classes() -> list[type[Backend]]:
    """Every format this process knows (built-in, entry points, registered), built-ins first."""
    _entry_points()
    return list(_classes.values())


def get_backend(name: str) -> Backend:
    """A new instance of the format ``name``; CapabilityError naming what is available otherwise."""
    if name in BUILTIN:
        _builtins()
    if name not in _classes:
        _entry_points()
    cls = _classes.get(name)
    if cls is not None:
        return cls()
    missing = missing_libraries()
    available = ", ".join(known_backends())
    if name in missing:
        raise CapabilityError(f"backend {name!r} is not available in this installation ({missing[name]}); "
                              f"available: {available}")
    if name in _broken:
        raise CapabilityError(f"backend {name!r} cannot be loaded: {_broken[name]}; available: {available}")
    raise CapabilityError(f"unknown backend {name!r}; available: {available}")


def known_backends() -> list[str]:
    """Every registered format: detecting and reading work for all of them."""
    return sorted(cls.name for cls in classes())


def available_backends() -> list[str]:
    """The formats this process can write."""
    return sorted(cls.name for cls in classes() if cls.write_problem() is None)


def missing_libraries() -> dict[str, str]:
    """Format name -> why this process cannot write it (``Backend.write_problem``)."""
    return {cls.name: why for cls in classes() if (why := cls.write_problem()) is not None}
