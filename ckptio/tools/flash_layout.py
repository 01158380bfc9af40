"""FLASH checkpoint layout (HDF5, FLASH file format version 9) of a block-structured ckptio checkpoint, for
analysis tools that read FLASH files (yt's FLASH frontend: ``yt.load``).

What a FLASH file holds and where it comes from:

* one dataset per grid variable, ``/<name>`` of shape ``(nblocks, nzb, nyb, nxb)`` (block, z, y, x), and
  ``/unknown names`` listing them: every checkpoint variable of rank 4 whose first axis is the block axis
  (``nblocks`` = the first axis of the bounding-box variable); the values are copied unchanged (same dtype);
* ``/bounding box`` ``(nblocks, 3, 2)``: the checkpoint's variable :data:`BBOX_VARIABLE` (``bbox``),
  ``(nblocks, ndim or 3, 2)``, lower/upper corner of each block;
* ``/refine level``, ``/gid`` (same-level neighbours, parent, children; 1-based, -1 = none), ``/node type``,
  ``/coordinates``, ``/block size``: computed from the bounding boxes and the domain (a block twice as narrow
  as a root block is one level finer), so they always agree with the geometry;
* ``/sim info`` (file format version 9) and the name/value tables ``integer scalars``, ``real scalars``,
  ``integer runtime parameters``, ``real runtime parameters``, ``string runtime parameters``: from the
  checkpoint's attributes :data:`REQUIRED_ATTRS` (``time``, ``geometry``, ``xmin`` .. ``zmax``, ``nblockx`` ..
  ``nblockz``: the domain and the root-block lattice) and, if present, ``step``, ``dt``, ``dimensionality``.

Not converted (reported by :func:`write_flash`): variables that are not block-structured grid variables
(particles, per-block integers, scalars). The neighbour entries of ``/gid`` are those at the same refinement
level only (no boundary codes), which analysis needs none of: the file is for reading, not for restarting FLASH.

Local: one process, serial h5py, no MPI collective. Memory: the bounding boxes plus one piece of one variable
(:class:`ckptio.tools.commands.stream.Source`, bounded, every block checksum verified).
"""

from __future__ import annotations

import math
import os
import time as _time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio.errors import CheckpointError

BBOX_VARIABLE = "bbox"
REQUIRED_ATTRS = ("time", "geometry", "xmin", "xmax", "ymin", "ymax", "zmin", "zmax",
                  "nblockx", "nblocky", "nblockz")
GEOMETRIES = ("cartesian", "cylindrical", "polar", "spherical")
FILE_FORMAT_VERSION = 9
NAME_LEN = 80  # FLASH's MAX_STRING_LENGTH: every name and string value is space-padded to it
MARKER = "ckptio_flash_layout"  # root attribute of every file written here (so --force may replace it)


class FlashLayoutError(CheckpointError):
    """The checkpoint lacks what a FLASH file needs (an attribute, the bounding boxes, grid variables) or its
    blocks do not form a FLASH block tree. The message names the missing or offending item."""


@dataclass(frozen=True)
class FlashGrid:
    """The FLASH description of a checkpoint's blocks (pure data, computed by :func:`plan_grid`)."""

    ndim: int
    block_cells: tuple[int, int, int]  # nxb, nyb, nzb
    nblock: tuple[int, int, int]  # root blocks along x, y, z
    domain: np.ndarray  # (3, 2) lower/upper edge per axis
    bbox: np.ndarray  # (nblocks, 3, 2)
    refine_level: np.ndarray  # (nblocks,) int32, 1 = root
    gid: np.ndarray  # (nblocks, 2*ndim + 1 + 2**ndim) int32, 1-based, -1 = none
    node_type: np.ndarray  # (nblocks,) int32: 1 leaf, 2 parent

    @property
    def nblocks(self) -> int:
        return int(self.bbox.shape[0])


def _attr(attrs: dict[str, Any], name: str, path: str) -> Any:
    if name not in attrs:
        raise FlashLayoutError(f"{path}: attribute {name!r} is missing (a FLASH file needs the checkpoint "
                               f"attributes {', '.join(REQUIRED_ATTRS)}; write them with "
                               "ckptio.create(..., attrs={...}))")
    value = attrs[name]
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bytes):
        value = value.decode()
    return value


def _number(attrs: dict[str, Any], name: str, path: str, kind: type) -> Any:
    value = _attr(attrs, name, path)
    wanted = "an integer" if kind is int else "a number"
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or (kind is int and not float(value).is_integer())):
        raise FlashLayoutError(f"{path}: attribute {name!r} = {value!r} is not {wanted}")
    return kind(value)


def plan_grid(attrs: dict[str, Any], bbox: np.ndarray, block_cells: tuple[int, int, int], path: str) -> FlashGrid:
    """Pure: the FLASH block tree of blocks with bounding boxes ``bbox`` ``(nblocks, ndim or 3, 2)`` and
    ``block_cells`` = (nxb, nyb, nzb) cells each, in the domain the attributes describe. Raises
    FlashLayoutError naming the attribute or the block that does not fit."""
    domain = np.array([[_number(attrs, f"{ax}min", path, float), _number(attrs, f"{ax}max", path, float)]
                       for ax in "xyz"])
    nblock = tuple(_number(attrs, f"nblock{ax}", path, int) for ax in "xyz")
    geometry = _attr(attrs, "geometry", path)
    if geometry not in GEOMETRIES:
        raise FlashLayoutError(f"{path}: attribute 'geometry' = {geometry!r} is not one of {', '.join(GEOMETRIES)}")
    if "dimensionality" in attrs:
        ndim = _number(attrs, "dimensionality", path, int)
    else:
        ndim = max(1, sum(1 for n in block_cells if n > 1))
    if not 1 <= ndim <= 3 or any(n != 1 for n in block_cells[ndim:]):
        raise FlashLayoutError(f"{path}: dimensionality {ndim} does not fit blocks of (nxb, nyb, nzb) = "
                               f"{block_cells} cells")
    if any(n < 1 for n in nblock) or any(n != 1 for n in nblock[ndim:]):
        raise FlashLayoutError(f"{path}: attributes nblockx/y/z = {nblock} do not fit dimensionality {ndim}")
    if not (domain[:ndim, 1] > domain[:ndim, 0]).all():
        raise FlashLayoutError(f"{path}: the domain {domain[:ndim].tolist()} (attributes xmin .. zmax) is empty")
    bbox = np.asarray(bbox, dtype=np.float64)
    if bbox.ndim != 3 or bbox.shape[2] != 2 or not ndim <= bbox.shape[1] <= 3:
        raise FlashLayoutError(f"{path}: variable {BBOX_VARIABLE!r} has shape {bbox.shape}, expected "
                               f"(nblocks, {ndim} to 3, 2) lower/upper block corners")
    full = np.empty((bbox.shape[0], 3, 2))
    full[:] = domain[None]  # inactive axes span the domain, as FLASH writes them
    full[:, :ndim] = bbox[:, :ndim]
    nb = full.shape[0]

    root = (domain[:, 1] - domain[:, 0]) / np.array(nblock)  # root block width per axis
    levels = np.empty(nb, dtype=np.int32)
    index: dict[tuple[int, ...], int] = {}  # (level, i, j, k) -> block
    cells: list[tuple[int, ...]] = []
    for b in range(nb):
        lo, hi = full[b, :ndim, 0], full[b, :ndim, 1]
        ratio = root[:ndim] / (hi - lo)
        level = round(math.log2(ratio[0])) if ratio[0] > 0 and np.isfinite(ratio[0]) else -1
        scale = 2.0 ** level
        ijk = np.round((lo - domain[:ndim, 0]) / root[:ndim] * scale)
        if (level < 0 or not np.allclose(ratio, scale, rtol=1e-9)
                or not np.allclose(domain[:ndim, 0] + ijk * root[:ndim] / scale, lo, rtol=0,
                                   atol=1e-9 * root[:ndim].max())
                or (ijk < 0).any() or (ijk >= np.array(nblock[:ndim]) * scale).any()):
            raise FlashLayoutError(f"{path}: block {b} (bounding box {full[b, :ndim].tolist()}) is not a root "
                                   f"block of the {nblock[:ndim]} lattice over the domain or one refined from it "
                                   "by halving")
        levels[b] = level + 1
        key = (level, *(int(v) for v in ijk))
        if key in index:
            raise FlashLayoutError(f"{path}: blocks {index[key]} and {b} have the same bounding box")
        index[key] = b
        cells.append(key)

    nchild = 2 ** ndim
    gid = np.full((nb, 2 * ndim + 1 + nchild), -1, dtype=np.int32)
    for b, (level, *ijk) in enumerate(cells):
        for axis in range(ndim):
            for side, step in ((0, -1), (1, 1)):
                n = list(ijk)
                n[axis] += step
                gid[b, 2 * axis + side] = index.get((level, *n), -2) + 1
        if level > 0:
            gid[b, 2 * ndim] = index.get((level - 1, *(v // 2 for v in ijk)), -2) + 1
        for c in range(nchild):  # FLASH's child order: x fastest
            child = (level + 1, *(2 * v + ((c >> a) & 1) for a, v in enumerate(ijk)))
            gid[b, 2 * ndim + 1 + c] = index.get(child, -2) + 1
    children = gid[:, 2 * ndim + 1:]
    partial = ((children > 0).any(axis=1)) & ~((children > 0).all(axis=1))
    if partial.any():
        b = int(np.flatnonzero(partial)[0])
        raise FlashLayoutError(f"{path}: block {b} has some but not all of its {nchild} children")
    node_type = np.where((children > 0).all(axis=1), 2, 1).astype(np.int32)
    return FlashGrid(ndim, tuple(block_cells), nblock, domain, full, levels, gid, node_type)


def _table(entries: list[tuple[str, Any]], value_dtype: str) -> np.ndarray:
    """A FLASH name/value table: names (and string values) space-padded to NAME_LEN characters."""
    table = np.zeros(len(entries), dtype=[("name", f"S{NAME_LEN}"), ("value", value_dtype)])
    for row, (name, value) in enumerate(entries):
        table[row]["name"] = name.ljust(NAME_LEN).encode()
        table[row]["value"] = value.ljust(NAME_LEN).encode() if isinstance(value, str) else value
    return table


def parameter_tables(attrs: dict[str, Any], grid: FlashGrid, path: str) -> dict[str, np.ndarray]:
    """Pure: FLASH's scalar and runtime-parameter tables (dataset name -> table) of a checkpoint."""
    nxb, nyb, nzb = grid.block_cells
    integer_scalars = [("nxb", nxb), ("nyb", nyb), ("nzb", nzb), ("dimensionality", grid.ndim),
                       ("globalnumblocks", grid.nblocks)]
    if "step" in attrs:
        integer_scalars.append(("nstep", _number(attrs, "step", path, int)))
    real_scalars = [("time", _number(attrs, "time", path, float))]
    if "dt" in attrs:
        real_scalars.append(("dt", _number(attrs, "dt", path, float)))
    integer_runtime = [("nblockx", grid.nblock[0]), ("nblocky", grid.nblock[1]), ("nblockz", grid.nblock[2]),
                       ("lrefine_min", 1), ("lrefine_max", int(grid.refine_level.max()))]
    real_runtime = [(f"{ax}{edge}", float(grid.domain[a, e])) for a, ax in enumerate("xyz")
                    for e, edge in enumerate(("min", "max"))]
    string_runtime = [("geometry", str(_attr(attrs, "geometry", path)))]
    return {"integer scalars": _table(integer_scalars, "<i4"),
            "real scalars": _table(real_scalars, "<f8"),
            "integer runtime parameters": _table(integer_runtime, "<i4"),
            "real runtime parameters": _table(real_runtime, "<f8"),
            "string runtime parameters": _table(string_runtime, f"S{NAME_LEN}")}


def _sim_info() -> np.ndarray:
    fields = [("file format version", "<i4"), ("setup call", "S400"), ("file creation time", "S80"),
              ("flash version", "S80"), ("build date", "S80"), ("build dir", "S80"), ("build machine", "S80"),
              ("cflags", "S400"), ("fflags", "S400"), ("setup time stamp", "S80"), ("build time stamp", "S80")]
    info = np.zeros(1, dtype=fields)
    info["file format version"] = FILE_FORMAT_VERSION
    info["setup call"] = b"ckptio convert --to flash"
    info["file creation time"] = _time.strftime("%Y-%m-%d %H:%M:%S").encode()
    info["flash version"] = b"written by ckptio (FLASH checkpoint layout)"
    return info


def grid_variables(source: Any, nblocks: int) -> tuple[list[str], list[str], tuple[int, int, int]]:
    """The checkpoint's grid variables (rank 4, first axis = blocks, all with the same block shape), the other
    variables (not converted), and (nxb, nyb, nzb). Raises FlashLayoutError when there is no grid variable."""
    grid, other, block = [], [], None
    for name in sorted(source.variables):
        shape = source.shape(name)
        segment = source.variables[name].is_segment
        if name == BBOX_VARIABLE:
            continue  # written as /bounding box
        if len(shape) != 4 or shape[0] != nblocks or segment:
            other.append(name)
            continue
        if block is None:
            block = shape[1:]
        if shape[1:] != block:
            raise FlashLayoutError(f"{source.path}: grid variable {name!r} has blocks of {shape[1:]} cells (z, y, x), "
                                   f"{grid[0]!r} of {block}: a FLASH file has one block size")
        grid.append(name)
    if block is None:
        raise FlashLayoutError(f"{source.path}: no grid variable of shape ({nblocks}, nzb, nyb, nxb) (block, z, y, "
                               f"x) to convert")
    nzb, nyb, nxb = block
    return grid, other, (nxb, nyb, nzb)


def is_flash_file(path: str) -> bool:
    """True if ``path`` is an HDF5 file that :func:`write_flash` wrote (carries :data:`MARKER`)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            return bool(f.attrs.get(MARKER, False))
    except OSError:
        return False


@dataclass(frozen=True)
class FlashSummary:
    """What :func:`write_flash` wrote: the grid ``variables`` converted, the variables ``skipped`` (not grid
    variables), the number of ``blocks``."""

    src: str
    dst: str
    variables: list[str]
    skipped: list[str]
    blocks: int


def write_flash(source: Any, dst: str, progress: Any = None) -> FlashSummary:
    """Local: write the checkpoint opened as ``source`` (:class:`~ckptio.tools.commands.stream.Source`) to ``dst`` in
    FLASH's checkpoint layout, through a temporary file next to ``dst`` renamed at the end (never a partial
    ``dst``). Returns what it wrote.
    Raises FlashLayoutError (nothing written) or the source's CheckpointError (temporary removed)."""
    import h5py

    progress = progress or (lambda items, **_kw: items)
    if BBOX_VARIABLE not in source.variables:
        raise FlashLayoutError(f"{source.path}: variable {BBOX_VARIABLE!r} (the blocks' bounding boxes, "
                               "(nblocks, ndim, 2)) is missing: a FLASH file needs it")
    bbox_shape = source.shape(BBOX_VARIABLE)
    if len(bbox_shape) != 3:
        raise FlashLayoutError(f"{source.path}: variable {BBOX_VARIABLE!r} has shape {bbox_shape}, expected "
                               "(nblocks, ndim, 2)")
    bbox = np.empty(bbox_shape, source.dtype(BBOX_VARIABLE))
    source.read_all(BBOX_VARIABLE, bbox)
    names, skipped, block_cells = grid_variables(source, bbox_shape[0])
    attrs = source.attrs
    grid = plan_grid(attrs, bbox, block_cells, source.path)
    tables = parameter_tables(attrs, grid, source.path)

    tmp = os.path.join(os.path.dirname(os.path.abspath(dst)), f".{os.path.basename(dst)}.ckptio-{os.getpid()}.tmp")
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs[MARKER] = True
            f["sim info"] = _sim_info()
            for table_name, table in tables.items():
                f[table_name] = table
            width = max(len(n) for n in names)
            f["unknown names"] = np.array([[n.encode()] for n in names], dtype=f"S{width}")
            f["bounding box"] = grid.bbox
            f["refine level"] = grid.refine_level
            f["gid"] = grid.gid
            f["node type"] = grid.node_type
            f["coordinates"] = grid.bbox.mean(axis=2)
            f["block size"] = grid.bbox[:, :, 1] - grid.bbox[:, :, 0]
            for name in progress(names, desc="convert", unit="var"):
                shape = source.shape(name)
                dset = f.create_dataset(name, shape=shape, dtype=source.dtype(name))
                for box, arr in source.pieces(name):
                    dset[tuple(slice(o, o + s) for o, s in zip(box.offset, box.shape, strict=True))] = arr
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)  # our own temporary, never dst
        raise
    return FlashSummary(source.path, dst, names, skipped, grid.nblocks)
