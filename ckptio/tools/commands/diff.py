"""``ckptio diff A B``: compare two checkpoints value by value, whatever their formats and writer rank counts.

Streams variable by variable, each in pieces of at most :data:`~ckptio.tools.commands.common.CHUNK_BYTES` per file
(:mod:`ckptio.tools.commands.stream`: each file read once, every block checksum verified), so memory stays bounded for
any checkpoint size; when the two store a variable differently (other format or decomposition) and it exceeds
CHUNK_BYTES, B's copy is gathered in a temporary file under TMPDIR first (disk, not memory). Elements ``a`` and
``b`` are equal when ``|a - b| <= atol + rtol * |b|`` (numpy.isclose; NaN equals NaN; with both tolerances 0:
exactly equal). Dimension names (``dims``, declared or the defaults) and attributes (checkpoint and per-variable)
are compared as stored, except the series bookkeeping attribute ``ckptio_series_seq`` (a commit counter,
different between runs by design). Exit: 0 identical (or within the
tolerances), 1 different, 2 error (also a damaged checkpoint: it cannot be compared). One process, no MPI.

``--key NAME`` (a 1-D per-rank segment variable, e.g. particle ids) or ``--key NAME:COL`` (column COL of a 2-D
segment variable, e.g. ``tracers:3``) matches the rows of particle data by that key instead of by position: after an
N -> M restart the segments are concatenated in another rank order, so row i of A is not row i of B although the
particles are the same. Every segment variable with as many rows as the key (in A and in B) is compared row by row
for the keys both hold; keys found in only one file are a difference of the key variable. The key's values must
be unique in each file (else exit 2). The keyed variables are read whole into memory (particle data is small next
to the grid); everything else is compared as without ``--key``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ckptio.errors import CheckpointError
from ckptio.model.dims_attrs import attrs_identical
from ckptio.model.document import VariableRecord
from ckptio.model.layout import Box
from ckptio.tiers.catalog import SEQ_ATTR
from ckptio.tools.commands.common import CHUNK_BYTES, EXIT_DIFFERENT, EXIT_OK, UsageError, error_exit, guarded, progress
from ckptio.tools.commands.stream import Source, nbytes_of

NAME = "diff"
IGNORED_ATTRS = frozenset({SEQ_ATTR})


@dataclass
class VariableDiff:
    """How one variable differs (``message`` for structural differences, counts for values)."""

    name: str
    message: str | None = None
    count: int = 0
    size: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    first_index: tuple[int, ...] | None = None
    notes: list[str] = field(default_factory=list)  # dtype or attribute differences besides the values

    def to_json(self) -> dict[str, Any]:
        return {"variable": self.name, "message": self.message, "count": self.count, "size": self.size,
                "max_abs_diff": self.max_abs, "max_rel_diff": self.max_rel,
                "first_index": list(self.first_index) if self.first_index is not None else None,
                "notes": self.notes}

    def __str__(self) -> str:
        if self.message is not None:
            return f"{self.name}: {self.message}"
        where = f", first at {self.first_index}" if self.first_index is not None else ""
        return (f"{self.name}: {self.count} of {self.size} elements differ, max abs diff {self.max_abs:.6g}, "
                f"max rel diff {self.max_rel:.6g}{where}" + "".join(f"; {n}" for n in self.notes))


def compare_chunk(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> tuple[np.ndarray, np.ndarray]:
    """Pure: (mask of differing elements, |a-b| as float64) for two same-shape arrays. Integers are compared
    exactly when both tolerances are 0 (no float64 rounding of large int64 values); NaN equals NaN."""
    kinds = {a.dtype.kind, b.dtype.kind}
    if not kinds <= set("biufc"):
        differ = a != b
        return differ, differ.astype(np.float64)
    work = np.complex128 if "c" in kinds else np.float64
    x, y = a.astype(work, copy=False), b.astype(work, copy=False)
    with np.errstate(invalid="ignore", over="ignore"):
        absdiff = np.asarray(np.abs(x - y), dtype=np.float64)
        if rtol == 0 and atol == 0:
            differ = a != b if kinds <= set("biu") else ~((x == y) | (np.isnan(x) & np.isnan(y)))
        else:
            differ = ~np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
    return np.asarray(differ), np.where(np.isnan(absdiff), np.inf, absdiff)  # NaN against a number: infinitely apart


def diff_variable(sa: Source, sb: Source, name: str, rtol: float, atol: float,
                  spool_dir: str | None = None) -> VariableDiff | None:
    """Local: the differences of variable ``name`` between two checkpoints, or None if it is the same.

    When both store the variable in the same pieces (same format and decomposition: the restart check), the
    pieces are compared in lockstep. Otherwise B's variable is first gathered into an array (in memory up to
    CHUNK_BYTES, beyond that a numpy.memmap in ``spool_dir``: disk, not memory), then A's pieces are compared
    against it. Each file is read once, every block checksum verified."""
    va, vb = sa.variables[name], sb.variables[name]
    shape = sa.shape(name)
    if shape != sb.shape(name):
        return VariableDiff(name, f"shape {shape} in A, {sb.shape(name)} in B")
    if va.kind != vb.kind:
        return VariableDiff(name, f"kind {va.kind} in A, {vb.kind} in B")
    out = VariableDiff(name, size=math.prod(shape))
    problems = []
    if sa.dtype(name) != sb.dtype(name):
        problems.append(f"dtype {sa.dtype(name)} in A, {sb.dtype(name)} in B")
    if (dims := _dims_difference(name, va, vb)) is not None:
        problems.append(dims)
    wa, wb = dict(va.attrs or {}), dict(vb.attrs or {})
    if not attrs_identical(wa, wb):
        problems.append(f"attributes differ ({_attr_diff(wa, wb)})")
    if sa.piece_boxes(name) == sb.piece_boxes(name):
        pairs = ((box, a, b) for (box, a), (_, b) in zip(sa.pieces(name), sb.pieces(name), strict=True))
    else:
        whole = Box((0,) * len(shape), shape)
        if nbytes_of(shape, sb.dtype(name)) <= CHUNK_BYTES or spool_dir is None:
            full_b = np.empty(shape, sb.dtype(name))
        else:
            full_b = np.lib.format.open_memmap(os.path.join(spool_dir, "b.npy"), mode="w+", dtype=sb.dtype(name),
                                               shape=shape)
        sb.read_all(name, full_b)
        pairs = ((box, a, full_b[box.relative_to(whole)]) for box, a in sa.pieces(name))
    for box, a, b in pairs:
        differ, absdiff = compare_chunk(a, np.asarray(b), rtol, atol)
        n = int(np.count_nonzero(differ))
        if not n:
            continue
        first = np.flatnonzero(differ)[0]
        local = np.unravel_index(int(first), differ.shape) if differ.ndim else ()
        index = tuple(int(o + i) for o, i in zip(box.offset, local, strict=True))
        if out.first_index is None or index < out.first_index:
            out.first_index = index
        out.count += n
        out.max_abs = max(out.max_abs, float(absdiff[differ].max()))
        ref = np.abs(np.asarray(b)[differ].astype(np.complex128 if b.dtype.kind == "c" else np.float64)) \
            if b.dtype.kind in "biufc" else np.zeros(n)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(ref > 0, absdiff[differ] / np.where(ref > 0, ref, 1), np.inf)
        out.max_rel = max(out.max_rel, float(rel.max()))
    return _finished(out, problems)


def _finished(out: VariableDiff, problems: list[str]) -> VariableDiff | None:
    """A variable's outcome: its differing elements and problems (a message when only problems), or None."""
    out.notes = problems
    if out.count:
        return out
    if problems:
        out.message = "; ".join(problems)
        return out
    return None


def _dims_difference(name: str, va: VariableRecord, vb: VariableRecord) -> str | None:
    """Pure: how the dimension names of ``name`` differ between A and B (declared ``dims=`` or the defaults
    ``<name>_d0``, ...; the names HDF5 and netCDF files show), or None. Issue 23: they were not compared."""
    da, db = va.dim_names(name), vb.dim_names(name)
    return None if da == db else f"dims {list(da)} in A, {list(db)} in B"


@dataclass(frozen=True)
class Key:
    """``--key NAME`` or ``--key NAME:COL``: the segment variable (and column) whose values identify a row."""

    var: str
    column: int | None = None

    @classmethod
    def parse(cls, text: str) -> Key:
        name, sep, col = text.rpartition(":") if ":" in text else (text, "", "")
        if not sep:
            return cls(text)
        try:
            column = int(col)
        except ValueError:
            raise UsageError(f"--key {text!r}: expected NAME or NAME:COLUMN (an integer column index)") from None
        if not name or column < 0:
            raise UsageError(f"--key {text!r}: expected NAME or NAME:COLUMN (a column index >= 0)")
        return cls(name, column)

    def __str__(self) -> str:
        return self.var if self.column is None else f"{self.var}:{self.column}"

    def values(self, src: Source, which: str) -> np.ndarray:
        """Local: the key column of checkpoint ``src`` (A or B), checked: a segment variable, 1-D (or 2-D with the
        column), unique values. UsageError otherwise."""
        var = src.variables.get(self.var)
        if var is None:
            raise UsageError(f"--key {self}: no variable {self.var!r} in {which} ({src.path})")
        shape = src.shape(self.var)
        if not var.is_segment:
            raise UsageError(f"--key {self}: {self.var!r} is a {var.kind} variable, not a per-rank segment "
                             "(write(name, rows) without offset/global_shape)")
        want = 1 if self.column is None else 2
        if len(shape) != want or (self.column is not None and self.column >= shape[1]):
            raise UsageError(f"--key {self}: {self.var!r} has shape {shape}; NAME needs a 1-D segment, NAME:COL a "
                             "2-D one with that column")
        whole = np.empty(shape, src.dtype(self.var))
        src.read_all(self.var, whole)
        keys = whole if self.column is None else np.ascontiguousarray(whole[:, self.column])
        uniq, counts = np.unique(keys, return_counts=True)
        if len(uniq) != len(keys):
            twice = uniq[counts > 1][0]
            raise UsageError(f"--key {self}: the key is not unique in {which} ({src.path}): {twice.item()!r} "
                             f"occurs {int(counts[uniq == twice][0])} times")
        return keys


def keyed_rows(key: Key, sa: Source, sb: Source) -> tuple[np.ndarray, np.ndarray, np.ndarray, str | None]:
    """Local: (common keys sorted, their rows in A, their rows in B, a description of the keys found in only one
    of the files or None)."""
    ka, kb = key.values(sa, "A"), key.values(sb, "B")
    common, ia, ib = np.intersect1d(ka, kb, assume_unique=True, return_indices=True)
    missing = []
    for which, mine, other in (("A", ka, kb), ("B", kb, ka)):
        only = np.setdiff1d(mine, other, assume_unique=True)
        if len(only):
            missing.append(f"{len(only)} key(s) only in {which} (first {only[0].item()!r})")
    return common, ia, ib, ("; ".join(missing) or None)


def diff_keyed(sa: Source, sb: Source, name: str, key: Key, rows: tuple[np.ndarray, ...],
               rtol: float, atol: float, missing: str | None) -> VariableDiff | None:
    """Local: the differences of segment variable ``name`` between A and B, row matched to row by ``key`` (only
    the keys both hold; ``missing``, reported on the key variable, says which are not). ``first_index`` is the
    position in A."""
    common, ia, ib = rows
    shape_a, shape_b = sa.shape(name), sb.shape(name)
    problems = [] if name != key.var or missing is None else [missing]
    if shape_a[1:] != shape_b[1:]:
        return VariableDiff(name, f"row shape {shape_a[1:]} in A, {shape_b[1:]} in B")
    if sa.dtype(name) != sb.dtype(name):
        problems.append(f"dtype {sa.dtype(name)} in A, {sb.dtype(name)} in B")
    wa, wb = sa.variables[name].get("attrs", {}), sb.variables[name].get("attrs", {})
    if not attrs_identical(wa, wb):
        problems.append(f"attributes differ ({_attr_diff(wa, wb)})")
    a, b = np.empty(shape_a, sa.dtype(name)), np.empty(shape_b, sb.dtype(name))
    sa.read_all(name, a)
    sb.read_all(name, b)
    a, b = a[ia], b[ib]
    out = VariableDiff(name, size=a.size)
    differ, absdiff = compare_chunk(a, b, rtol, atol)
    n = int(np.count_nonzero(differ))
    if n:
        rows_differ = differ.reshape(len(common), -1).any(axis=1) if differ.ndim else differ
        first = int(np.flatnonzero(rows_differ)[0])
        rest = np.unravel_index(int(np.flatnonzero(differ[first])[0]), differ.shape[1:]) if differ.ndim > 1 else ()
        out.first_index = (int(ia[first]), *(int(i) for i in rest))
        out.count = n
        out.max_abs = float(absdiff[differ].max())
        ref = np.abs(b[differ].astype(np.complex128 if b.dtype.kind == "c" else np.float64)) \
            if b.dtype.kind in "biufc" else np.zeros(n)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(ref > 0, absdiff[differ] / np.where(ref > 0, ref, 1), np.inf)
        out.max_rel = float(rel.max())
        problems.append(f"rows matched by --key {key}; first differing key {common[first].item()!r}")
    return _finished(out, problems)


def _attr_diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    parts = []
    for key in sorted(set(a) | set(b)):
        if key in IGNORED_ATTRS:
            continue
        if key not in a:
            parts.append(f"{key} only in B")
        elif key not in b:
            parts.append(f"{key} only in A")
        elif not attrs_identical(a[key], b[key]):
            parts.append(f"{key}: {a[key]!r} vs {b[key]!r}")
    return ", ".join(parts)


def diff_checkpoints(path_a: str, path_b: str, rtol: float = 0.0, atol: float = 0.0,
                     key: Key | None = None) -> dict[str, Any]:
    """Local: the comparison document (``identical``, ``attributes``, ``only_in_a``/``only_in_b``,
    ``differences`` per variable, ``bytes_read``; with ``key``: ``key`` and ``keyed``, the variables matched by
    it). Raises CheckpointError if either cannot be read or fails verification (a damaged checkpoint cannot be
    compared), UsageError for a key that cannot be used."""
    with Source(path_a) as sa, Source(path_b) as sb, tempfile.TemporaryDirectory(prefix="ckptio-diff-") as spool:
        attrs_a = {k: v for k, v in sa.attrs.items() if k not in IGNORED_ATTRS}
        attrs_b = {k: v for k, v in sb.attrs.items() if k not in IGNORED_ATTRS}
        attr_text = None if attrs_identical(attrs_a, attrs_b) else _attr_diff(attrs_a, attrs_b)
        names_a, names_b = set(sa.variables), set(sb.variables)
        common = sorted(names_a & names_b)
        keyed: list[str] = []
        rows: tuple[np.ndarray, ...] = ()
        missing = None
        if key is not None:
            *matched, missing = keyed_rows(key, sa, sb)
            rows = tuple(matched)
            na, nb = sa.shape(key.var)[0], sb.shape(key.var)[0]
            keyed = [n for n in common if sa.variables[n].is_segment and sb.variables[n].is_segment
                     and sa.shape(n)[0] == na and sb.shape(n)[0] == nb]
        diffs = []
        for name in progress(common, desc="diff", unit="var"):
            d = (diff_keyed(sa, sb, name, key, rows, rtol, atol, missing) if key is not None and name in keyed
                 else diff_variable(sa, sb, name, rtol, atol, spool))
            if d is not None:
                diffs.append(d)
        nread = sa.bytes_read + sb.bytes_read
    doc = {"a": path_a, "b": path_b, "rtol": rtol, "atol": atol, "attributes": attr_text,
           "only_in_a": sorted(names_a - names_b), "only_in_b": sorted(names_b - names_a),
           "compared": len(common), "differences": diffs, "bytes_read": nread}
    if key is not None:
        doc.update(key=str(key), keyed=keyed)
    doc["identical"] = not (attr_text or doc["only_in_a"] or doc["only_in_b"] or diffs)
    return doc


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(NAME, help="compare two checkpoints value by value (any formats, any rank counts)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default 0: exact)")
    p.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default 0: exact)")
    p.add_argument("--max", type=int, default=10, metavar="N", help="show at most N differing variables (10)")
    p.add_argument("--key", metavar="NAME[:COL]",
                   help="match the rows of per-rank segment variables (particles) by this key: a 1-D segment "
                        "variable (ids) or column COL of a 2-D one, instead of by position (rank order differs "
                        "after an N -> M restart)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=run)


@guarded(NAME)
def run(args: argparse.Namespace) -> int:
    if args.rtol < 0 or args.atol < 0 or not (math.isfinite(args.rtol) and math.isfinite(args.atol)):
        return error_exit(NAME, ValueError(f"tolerances must be finite and >= 0 (rtol={args.rtol}, "
                                           f"atol={args.atol})"))
    try:
        doc = diff_checkpoints(args.a, args.b, args.rtol, args.atol, Key.parse(args.key) if args.key else None)
    except (CheckpointError, OSError) as exc:
        return error_exit(NAME, exc)
    if args.json:
        out = {**doc, "differences": [d.to_json() for d in doc["differences"]]}
        json.dump(out, sys.stdout, indent=2, sort_keys=True)
        print()
    else:
        _print(doc, args.max)
    return EXIT_OK if doc["identical"] else EXIT_DIFFERENT


def _print(doc: dict[str, Any], shown: int) -> None:
    tol = "" if not (doc["rtol"] or doc["atol"]) else f" within rtol={doc['rtol']:g} atol={doc['atol']:g}"
    if doc.get("key"):
        tol += f" (rows of {', '.join(doc['keyed']) or 'no variable'} matched by --key {doc['key']})"
    if doc["identical"]:
        print(f"identical{tol}: {doc['compared']} variables and the attributes of {doc['a']} and {doc['b']}")
        return
    print(f"{doc['a']} and {doc['b']} differ{tol}:")
    if doc["attributes"]:
        print(f"  attributes: {doc['attributes']}")
    for which in ("a", "b"):
        if doc[f"only_in_{which}"]:
            print(f"  only in {which.upper()}: {', '.join(doc[f'only_in_{which}'])}")
    diffs = doc["differences"]
    for d in diffs[:shown]:
        print(f"  {d}")
    if len(diffs) > shown:
        print(f"  ... and {len(diffs) - shown} more differing variable(s)")
    print(f"{len(diffs)} of {doc['compared']} common variables differ")
