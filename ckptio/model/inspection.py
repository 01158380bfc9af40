"""What ``ckptio inspect`` reports of one path, typed: :class:`InspectReport` and its parts. Pure data: no MPI, no
files.

The report is built from the typed document (:class:`~ckptio.model.document.CheckpointDocument`) and printed from
these fields; :meth:`InspectReport.to_json` is the JSON document ``ckptio inspect --json`` prints and
:func:`ckptio.tools.cli.inspect_report` returns (its keys are unchanged)::

    {"path": ..., "format": "mpiio", "status": "complete", "error": null, "verified": false, "problems": [],
     # once the metadata document was read:
     "format_version": 2, "schema": 2, "ckptio_version": ..., "created": ..., "nprocs": 4, "byteorder": "little",
     "checksum": "xxh3_64", "attrs": {...}, "layout": {...}, "hints": {...}, "stats": {...},
     "dimensions": {"x": 64, ...},
     "variables": {"dens": {"dtype": "<f8", "shape": [...], "kind": "array", "nblocks": 4, "nbytes": ...,
                            "stored_nbytes": ..., "codec": null, "compression_ratio": null, "dims": [...],
                            "dims_declared": true, "attrs": {...},
                            "min": ..., "max": ..., "nan_count": 0}},   # (min/max/nan_count: --verify)
     "verified_on": {"ranks": 4, "aggregators": 2}}                   # (python -m ckptio.verify only)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ckptio.model.document import CheckpointDocument, VariableRecord
from ckptio.model.records import HintsRecord, LayoutRecord, StatsRecord


@dataclass
class VariableSummary:
    """One variable as ``inspect`` shows it: its document entry summed up over its blocks (stored bytes, the
    codec), its dimension names (declared or the defaults) and, after ``--verify``, its values' range
    (``ranges``: ``min``, ``max``, ``nan_count``; None before)."""

    dtype: str
    shape: tuple[int, ...]
    kind: str
    nblocks: int
    nbytes: int
    stored_nbytes: int
    codec: str | None
    dims: tuple[str, ...]
    dims_declared: bool
    attrs: Mapping[str, Any]
    ranges: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, name: str, var: VariableRecord) -> VariableSummary:
        """The summary of variable ``name`` (a document with block tables: rank 0's)."""
        blocks = var.block_table()
        codecs = sorted({c for c in blocks.codec_names() if c})
        return cls(var.dtype, var.shape, var.kind, var.nblocks, var.nbytes, int(blocks.stored_nbytes.sum()),
                   codecs[0] if codecs else None, var.dim_names(name), bool(var.dims), dict(var.attrs or {}))

    @property
    def compression_ratio(self) -> float | None:
        return (self.nbytes / self.stored_nbytes) if self.codec and self.stored_nbytes else None

    @property
    def is_numeric(self) -> bool:
        """An integer or float variable (those have a min and max)."""
        import numpy as np

        return np.dtype(self.dtype).kind in "iuf"

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": list(self.shape), "kind": self.kind, "nblocks": self.nblocks,
                "nbytes": self.nbytes, "stored_nbytes": self.stored_nbytes, "codec": self.codec,
                "compression_ratio": self.compression_ratio, "dims": list(self.dims),
                "dims_declared": self.dims_declared, "attrs": dict(self.attrs), **(self.ranges or {})}


@dataclass
class DocumentSummary:
    """What ``inspect`` reports of a checkpoint's metadata document (once it was read): its fields, the records as
    typed, every variable's :class:`VariableSummary` and the length of every dimension name. ``stats`` None:
    left out of the report (``--json`` without ``--stats``)."""

    format_version: int | None
    schema: int
    ckptio_version: str | None
    created: str | None
    nprocs: int
    byteorder: str | None
    checksum: str
    attrs: Mapping[str, Any]
    layout: LayoutRecord | None
    hints: HintsRecord | None
    variables: dict[str, VariableSummary]
    dimensions: dict[str, int]
    stats: StatsRecord | None = None
    show_stats: bool = True  # False: "stats" left out of the JSON form

    @classmethod
    def of(cls, meta: CheckpointDocument) -> DocumentSummary:
        variables: dict[str, VariableSummary] = {}
        dimensions: dict[str, int] = {}
        for name, var in meta.variables.items():
            summary = variables[name] = VariableSummary.of(name, var)
            for dim, length in zip(summary.dims, var.shape, strict=True):
                dimensions.setdefault(dim, int(length))
        return cls(meta.backend_format_version, meta.schema, meta.ckptio_version, meta.created, meta.nprocs,
                   meta.byteorder, meta.checksum, dict(meta.attrs), meta.layout, meta.hints, variables, dimensions,
                   meta.stats)

    def to_json(self) -> dict[str, Any]:
        out = {"format_version": self.format_version, "schema": self.schema, "ckptio_version": self.ckptio_version,
               "created": self.created, "nprocs": self.nprocs, "byteorder": self.byteorder,
               "checksum": self.checksum, "attrs": dict(self.attrs), "layout": _json_or_empty(self.layout),
               "hints": _json_or_empty(self.hints), "dimensions": dict(self.dimensions),
               "variables": {name: v.to_json() for name, v in self.variables.items()}}
        if self.show_stats:
            out["stats"] = _json_or_empty(self.stats)
        return out


def _json_or_empty(record: Any) -> dict[str, Any]:
    """A record of the document in its JSON form for the report (``{}`` where the checkpoint has none)."""
    return {} if record is None else record.to_json()


@dataclass
class InspectReport:
    """``ckptio inspect`` of one path (see the module docstring): where it got (``status``, ``error``: None or why
    not), whether the blocks were verified and their problems (each in its JSON form), the document's summary
    once it was read, and, verified in parallel, on how many ranks and aggregators."""

    path: str
    format: str | None = None
    status: str | None = None
    error: str | None = None
    verified: bool = False
    problems: list[dict[str, Any]] = field(default_factory=list)
    document: DocumentSummary | None = None
    verified_on: Mapping[str, int] | None = None

    def set_status(self, status: str, error: str | None = None) -> None:
        self.status, self.error = status, error

    def add_ranges(self, ranges: Mapping[str, Mapping[str, Any]]) -> None:
        """Each variable's min/max (``{name: {"min", "max", "nan_count"}}``) from a verification's pass."""
        if self.document is None:
            return
        for name, r in ranges.items():
            self.document.variables[name].ranges = dict(r)

    def has_ranges(self) -> bool:
        """Whether every integer and float variable has its min/max already."""
        variables = self.document.variables.values() if self.document is not None else ()
        return all(v.ranges is not None for v in variables if v.is_numeric)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "format": self.format, "status": self.status, "error": self.error,
                               "verified": self.verified, "problems": list(self.problems)}
        if self.document is not None:
            out.update(self.document.to_json())
        if self.verified_on is not None:
            out["verified_on"] = dict(self.verified_on)
        return out
