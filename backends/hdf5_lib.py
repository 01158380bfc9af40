"""What the HDF5 backend's reading and writing share: h5py loaded on first use (never by ``import ckptio``), the
file layout's constants and the planning of collective writes. Local, no MPI.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from ckptio.backends import install_hints
from ckptio.backends.base import Box, VariablePlan

from ckptio.model import meta as metamod

# Reading needs no h5py (h5lite parses ckptio's HDF5 files); writing needs h5py built with parallel HDF5. It is
# imported on first use, never by ``import ckptio`` (issue 16: h5py and libhdf5 cost ~100 opened files and ~20 MB
# per rank at startup). Every use of the module global below comes after load().
h5py: Any = None
_h5py_tried = False


def load() -> Any:
    """The h5py module, imported on the first call; None when it cannot be imported (any rank, not collective)."""
    global h5py, _h5py_tried
    if not _h5py_tried:
        try:
            import h5py as module
        except ImportError:
            module = None
        h5py, _h5py_tried = module, True
    return h5py


INSTALL_HINT = install_hints.HDF5  # names ckptio-install-parallel and the Debian setting (issue 27)


def write_problem() -> str | None:
    if load() is None:
        return f"h5py is not installed; {INSTALL_HINT}"
    if not h5py.get_config().mpi:
        return f"h5py {h5py.__version__} is built without MPI (a serial HDF5 wheel); {INSTALL_HINT}"
    return None

def release_free_lists() -> None:
    """Local, after ckptio closed an HDF5 file: ``H5garbage_collect()``, which hands the memory HDF5 keeps in its
    free lists back to the C library. A file of 10,000 small datasets leaves tens of MB there, spread over the
    heap, and every allocation afterwards, the simulation's own included, runs slower (measured: the next
    10,000-variable checkpoint of the process took 60 us per variable instead of 47, Python's own allocations
    included, and without Python's allocator 140 instead of 54). h5py does not wrap the call: it goes through
    ctypes into the libhdf5 h5py is linked against, under h5py's lock (another thread of the process may be inside
    the library). Nothing happens when it cannot be found."""
    try:  # (an optimisation: never the reason a close or a check fails, nor what hides its own error)
        collect = _garbage_collect()
        if collect is None:
            return
        from h5py import _objects

        with _objects.phil:
            collect()
    except Exception:
        pass


_collect: Any = None


def _garbage_collect() -> Any:
    """``H5garbage_collect`` from the libhdf5 under h5py (looked up once), or None."""
    global _collect
    if _collect is None:
        _collect = False
        if load() is not None:
            import ctypes

            try:
                function = ctypes.CDLL(h5py.h5f.__file__).H5garbage_collect  # dlsym searches its libhdf5 too
            except (OSError, AttributeError):
                return None
            function.argtypes, function.restype = [], ctypes.c_int
            _collect = function
    return _collect or None


SIGNATURE = b"\x89HDF\r\n\x1a\n"
# The NAME of a dimension scale that is no variable, as netCDF-C and h5netcdf write and recognise it
NOT_A_VARIABLE = "This is a netCDF dimension but not a netCDF variable.%10d"
FORMAT_VERSION = 2
GROUP = "ckptio"
COMPLETE = 1


def write_groups(boxes: Sequence[Box]) -> list[list[int]]:
    """Indices of ``boxes`` (non-empty, of one variable, on one rank) in groups whose leading-axis intervals
    are pairwise disjoint, each sorted by leading offset: one collective write per group. Greedy interval
    partitioning in order of start, so the number of groups is the largest number of boxes sharing a row."""
    if boxes and boxes[0].ndim == 0:
        return [[i] for i in range(len(boxes))]  # a scalar: one block at most
    groups: list[list[int]] = []
    for i in sorted(range(len(boxes)), key=lambda i: boxes[i].offset[0]):
        for group in groups:
            if boxes[group[-1]].end[0] <= boxes[i].offset[0]:
                group.append(i)
                break
        else:
            groups.append([i])
    return groups


def write_calls(var: VariablePlan) -> int:
    """Coordinator: the collective ``H5Dwrite`` calls of one variable, the most any rank needs (every rank makes
    that many): 1 when no rank has more than one non-empty block (no Python step per block), else the groups of
    :func:`write_groups` of the ranks that have several."""
    rows = np.flatnonzero(var.size.prod(axis=1) > 0)
    if not len(rows):
        return 0
    rows = rows[np.argsort(var.rank[rows], kind="stable")]  # grouped by rank, in declaration order
    _, starts, counts = np.unique(var.rank[rows], return_index=True, return_counts=True)
    calls = 1
    for start, count in zip(starts[counts > 1].tolist(), counts[counts > 1].tolist(), strict=True):
        boxes = [Box(tuple(var.offset[i].tolist()), tuple(var.size[i].tolist()))
                 for i in rows[start:start + count].tolist()]
        calls = max(calls, len(write_groups(boxes)))
    return calls


def small_collective_variables(variables: Mapping[str, VariablePlan], ncalls: Mapping[str, int],
                               by_owner: Sequence[str], below: int) -> set[str]:
    """Local: the variables of fewer than ``below`` bytes that go out in collective ``H5Dwrite`` calls (one call,
    or its cut calls, per variable, :func:`write_calls`): not those their one holder writes independently
    (:func:`written_by_its_owner`) nor those with no data (:meth:`ckptio.backends.base.WriteHandle.in_small_calls`)."""
    return {name for name, var in variables.items()
            if ncalls.get(name, 0) and name not in by_owner and var.nbytes < below}


def written_by_its_owner(var: VariablePlan, stripe_unit: int) -> bool:
    """Coordinator: whether a variable goes out with an independent ``H5Dwrite`` by the one rank that holds it,
    instead of collective calls on every rank: all of its non-empty blocks are one rank's and it is no larger
    than ``stripe_unit``. A collective ``H5Dwrite`` per such variable made every rank enter an MPI collective,
    and the engine agree, for another rank's kilobyte: ~0.3 ms per variable on 4 ranks (more on many), most of a
    checkpoint of many small variables. (HDF5 1.10 has no multi-dataset write to combine them into one collective
    call. Small datasets are not stripe-aligned, so on Lustre or GPFS owners whose datasets share a stripe write
    it concurrently, as direct h5py codes do; not measured there.)"""
    rows = np.flatnonzero(var.size.prod(axis=1) > 0)
    return bool(len(rows)) and var.nbytes <= stripe_unit and bool((var.rank[rows] == var.rank[rows[0]]).all())


def dcpl():
    """Dataset creation properties of every ckptio dataset: contiguous, allocated at creation, never filled."""
    h5py = load()
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.CONTIGUOUS)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    return dcpl


ATTR_MESSAGE_LIMIT = 65472  # bytes of data + name in one attribute header message (measured, HDF5 1.12)


def utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def attr_value(value: Any) -> Any:
    """A JSON-compatible attribute as h5py stores it natively, or as JSON text when HDF5 has no match."""
    if isinstance(value, bool | str | float):
        return value
    if isinstance(value, int) and -2**63 <= value < 2**63:
        return np.int64(value)
    array = metamod.numeric_list_array(value)
    return array if array is not None else json.dumps(value)
