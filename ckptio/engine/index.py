"""The index phase of a write: every rank's report of what it wrote, joined on the planning rank into the metadata
document (schema in :mod:`ckptio.model.meta`), and what every other rank gets back of it. Pure: no MPI, no files (the
engine runs it inside its agreed phase; the scale harness runs it for 100,000 simulated ranks).
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ckptio.coord import hints as hintsmod
from ckptio.engine import fslayout, placement_stats
from ckptio.model import meta as metamod
from ckptio.model.block_table import BlockTable
from ckptio.model.document import CheckpointDocument
from ckptio.model.joined_blocks import JoinedBlocks
from ckptio.model.series_record import SeriesRecord
from ckptio.model.variable_plan import VariablePlan, joined_columns


@dataclass
class WriteStats:
    """Per-phase seconds (max over ranks) and the bytes handed to the write: in total and the least and most of
    any rank (O(1), whatever the job; where the bytes went per node: ``meta["stats"]["write"]["placement"]``)."""

    seconds: dict[str, float] = field(default_factory=dict)
    bytes_total: int = 0
    bytes_min: int = 0
    bytes_max: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "bytes_total": self.bytes_total, "bytes_min": self.bytes_min,
                "bytes_max": self.bytes_max}


@dataclass(frozen=True)
class DocumentInputs:
    """What the planning rank knows of a checkpoint besides the plan and the reports: the document's fields that
    do not come from the ranks."""

    backend: str
    backend_format_version: int
    hints: Mapping[str, str]
    attrs: Mapping[str, Any]
    described: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per variable: dims, attrs
    fs_layout: Any = None  # (path, what ckptio.engine.fslayout.prepare did), or None: no layout set
    prepare_seconds: float = 0.0
    series_record: SeriesRecord | None = None
    io_component: str | None = None  # None: asked of the MPI library (hints.io_component); a contract run
    # without MPI (ckptio.testing.contract, comm None) names its own, so building a document never starts MPI


@dataclass(frozen=True)
class WrittenColumns:
    """What a rank wrote of its blocks (``WrittenBlock`` s, in its declaration order) as three short lists:
    file offsets (-1: none, as in HDF5/netCDF), stored bytes, codecs (None: raw)."""

    file_offset: list[int]
    stored: list[int]
    codec: list[str | None]


@dataclass
class RankReport:
    """Any rank, the index phase: what it sends the planning rank of its write: its blocks as written, the bytes
    it handed to the write, its phase timings, its placement record (:func:`ckptio.engine.placement_stats
    .local_record`) and, with ckptio's own collective buffering, its aggregation figures."""

    written: WrittenColumns
    bytes: int
    timings: Mapping[str, float]
    placement: Mapping[str, Any]
    aggregation: Mapping[str, Any] | None = None


def light_copy(document: Mapping[str, Any]) -> CheckpointDocument:
    """Planning rank: what every other rank receives of the document it committed: no block tables (each variable's
    ``nblocks`` instead) and of the write statistics the seconds and bytes (the per-node placement stays in the
    file): O(variables), whatever the job."""
    light = CheckpointDocument.of(document).without_blocks()
    stats = light.stats
    if stats is None or stats.write is None:
        return light
    return dataclasses.replace(light, stats=dataclasses.replace(
        stats, write=dataclasses.replace(stats.write, placement=None), extra={}))


def written_columns(written: Sequence[Any]) -> WrittenColumns:
    """Any rank: what it wrote of its blocks (``WrittenBlock`` s, in its declaration order) as the three short
    lists of :class:`WrittenColumns` for the planning rank's :func:`build_index`."""
    return WrittenColumns([-1 if w.file_offset is None else int(w.file_offset) for w in written],
                          [int(w.stored_nbytes) for w in written], [w.codec for w in written])


def byte_summary(per_rank: Sequence[int]) -> dict[str, int]:
    """The bytes of every rank as the O(1) summary the metadata and :class:`WriteStats` keep."""
    return {"total": int(sum(per_rank)), "min": int(min(per_rank, default=0)), "max": int(max(per_rank, default=0))}


def aggregation_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Planning rank, pure: how ckptio's own collective buffering wrote the data (engine.write_aggregate), from
    every rank's figures: the domains (the planning rank's record: kind, aggregators, stripe unit or cell, round
    size), whether any rank sent another a piece (agreed: the same on every rank; without it the aggregators wrote
    their rounds with no collective between them) and the sums over the ranks (bytes sent between ranks, messages,
    file calls, write-backs started early, rounds). O(aggregators)."""
    total = {k: int(sum(r[k] for r in records)) for k in ("bytes_sent", "messages", "file_bytes", "file_calls",
                                                          "own_bytes", "writebacks")}
    return {"io": records[0]["io"], **records[0]["domains"], "rounds": int(max(r["rounds"] for r in records)),
            "threaded": any(r["threaded"] for r in records), "exchanged": bool(records[0]["exchanged"]), **total}


def created_now() -> str:
    """The commit time a document records (UTC, microseconds)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class BuiltDocument:
    """The planning rank's document as :func:`build_index` makes it: the in-memory dict form the commit stores and,
    where no block is compressed, every variable's blocks already joined (the plan's columns with the reports'),
    so that the typed form (:meth:`typed`) and its encoding do not join the tables again."""

    document: dict[str, Any]
    joined: JoinedBlocks | None

    def typed(self) -> CheckpointDocument:
        """Local: the typed document, keeping the joined columns."""
        typed = CheckpointDocument.of(self.document)
        if self.joined is not None:
            typed.keep_joined_blocks(self.joined)
        return typed


def build_index(variables: Mapping[str, VariablePlan], reports: Sequence[RankReport],
                inputs: DocumentInputs, effective: Mapping[str, str],
                storage: Mapping[str, Mapping[str, Any]]) -> BuiltDocument:
    """Planning rank: the metadata document. The block tables are the plan's columns (where each block is, its
    checksum from the declaration) with what every rank reported writing (file offset, stored bytes, codec:
    :func:`written_columns`, in its declaration order), joined without a Python step per block."""
    firsts = np.cumsum([0] + [len(rep.written.file_offset) for rep in reports])
    file_offset = np.fromiter(itertools.chain.from_iterable(rep.written.file_offset for rep in reports),
                              np.int64, int(firsts[-1]))
    stored = np.fromiter(itertools.chain.from_iterable(rep.written.stored for rep in reports), np.int64,
                         int(firsts[-1]))
    codec_of = list(itertools.chain.from_iterable(rep.written.codec for rep in reports))
    codec_names = sorted(set(codec_of) - {None})
    ids = {None: -1, **{c: i for i, c in enumerate(codec_names)}}
    codec = np.fromiter(map(ids.__getitem__, codec_of), np.int64, len(codec_of))
    # every variable's blocks at once: where each block's report is, and what it says (views per variable below)
    columns = joined_columns(variables)
    rows = firsts[columns.rank] + columns.local_index
    file_offset, stored, codec = file_offset[rows], stored[rows], codec[rows]
    out_vars: dict[str, Any] = {}
    described = inputs.described
    for (name, var), start, count in zip(variables.items(), columns.starts.tolist(), columns.counts.tolist(),
                                         strict=True):
        mine = slice(start, start + count)
        if codec_names:
            ids = codec[mine]
            used = np.unique(ids[ids >= 0])
            codec_ids = np.where(ids >= 0, np.searchsorted(used, ids), -1)
            names = [codec_names[u] for u in used.tolist()]
        else:
            codec_ids, names = codec[mine], []  # (all -1)
        blocks = BlockTable.of_columns(var.rank, var.offset, var.size, var.checksum, file_offset[mine],
                                       stored[mine], codec_ids, names)
        out_vars[name] = {"dtype": var.dtype, "shape": list(var.shape), "kind": var.kind, "blocks": blocks,
                          **(described[name] if name in described else {}),
                          **({"storage": storage[name]} if name in storage else {})}
    stripe_count, stripe_unit = hintsmod.stripe_layout(inputs.hints)
    seconds = {"prepare": inputs.prepare_seconds}
    for phase in ("declare", "open", "write"):
        seconds[phase] = max(rep.timings.get(phase, 0.0) for rep in reports)
    for phase in sorted({k for rep in reports for k in rep.timings} - set(seconds)):  # e.g. write_exchange
        seconds[phase] = max(rep.timings.get(phase, 0.0) for rep in reports)
    per_rank = [rep.bytes for rep in reports]
    write_stats = {"seconds": seconds, "bytes": byte_summary(per_rank),
                   "placement": placement_stats.summarize([rep.placement for rep in reports], per_rank)}
    if reports[0].aggregation is not None:
        write_stats["aggregation"] = aggregation_summary([rep.aggregation for rep in reports])
    joined = None if codec_names else JoinedBlocks.of_columns(columns.counts, columns.offset, columns.size,
                                                               columns.rank, columns.checksum, file_offset, stored,
                                                               codec)
    return BuiltDocument({
        "schema": metamod.SCHEMA_VERSION,
        "ckptio_version": metamod.__version__,
        "backend": inputs.backend,
        "backend_format_version": inputs.backend_format_version,
        "created": created_now(),
        "nprocs": len(reports),
        "byteorder": sys.byteorder,
        "checksum": metamod.CHECKSUM_ALGORITHM,
        "attrs": dict(inputs.attrs),
        "layout": {"stripe_count": stripe_count, "stripe_unit": stripe_unit, **fslayout.recorded(inputs.fs_layout)},
        "hints": {"requested": dict(inputs.hints), "effective": dict(effective),
                  "io_component": inputs.io_component or hintsmod.io_component()},
        "stats": {"write": write_stats},
        "variables": out_vars,
        **({"series": inputs.series_record.to_json()} if inputs.series_record is not None else {}),
    }, joined)
