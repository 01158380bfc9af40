"""The write plan and the vocabulary of the read side. Pure: a plan is a function of the gathered declarations
and the hints, so the planner can be tested for 10,000 simulated ranks without MPI.

Write plan
    :func:`plan_write` takes every rank's declarations (gathered on one coordinator rank) and returns the
    validated variables with their block tables; per-rank segments (rows along the first axis, the same
    trailing shape on every rank) get their offsets from an exclusive prefix sum of the row counts.

Read side
    The stored data is described as *extents* (:class:`Extent`): contiguous byte ranges of the file that hold
    a C-ordered box of one variable (a native-format block, or a leading-axis band of an HDF5/netCDF dataset);
    a rank asks for hyperslabs (:class:`Request`); :func:`choose_aggregators` picks the ranks that open the
    file. The restart plan itself is distributed and columnar: :mod:`ckptio.model.extent_table` holds the extents as
    numpy columns and :mod:`ckptio.model.readplan` partitions them among the aggregators at open and matches the
    requests each aggregator receives per read (ROMIO's two-phase pattern: no rank holds every rank's
    requests or the whole exchange map). The global planner that ran on every rank for every rank is gone.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio.errors import DeclarationError
from ckptio.model.agreement import groups_text
from ckptio.model.layout import Box, tiles_exactly, validate_variable
from ckptio.model.variable_plan import PlannedVariables, VariablePlan, _read_only

ARRAY = "array"
SEGMENT = "segment"


# --------------------------------------------------------------------------------------------- write plan
# What a rank sends rank 0 of its declarations (the declare gather): a few strings and bytes instead of a dict per
# block, so that rank 0 unpickles O(ranks) small objects and plans with numpy (2.4 million blocks at 100,000 ranks)
PackedDeclarations = tuple  # (signature, ints, checksums, stored, codecs); see pack_declarations


def pack_declarations(decls: Sequence[Mapping[str, Any]]) -> PackedDeclarations:
    """Local, any rank: its declarations (:func:`declaration` dicts, in order, with the prepare step's
    ``checksum`` and, when compressed, ``stored_nbytes`` and ``codec``) as

    * ``signature``: one line per declaration, ``name<TAB>dtype<TAB>kind<TAB>dims`` (``dims``: the global shape
      of an array block, the trailing shape of a segment, comma-separated) -- the part most ranks share;
    * ``ints``: int64 bytes, per declaration the block's offset and shape (an array) or its row count (a segment);
    * ``checksums``: 16 hex digits per declaration;
    * ``stored``, ``codecs``: None when nothing is compressed, else one entry per declaration (None: raw)."""
    lines, ints = [], []
    for d in decls:
        if d["kind"] == ARRAY:
            dims = d["global_shape"]
            ints.extend(d["offset"])
            ints.extend(d["shape"])
        else:
            dims = d["trailing"]
            ints.append(d["length"])
        lines.append(f"{d['name']}\t{d['dtype']}\t{d['kind']}\t{','.join(map(str, dims))}")
    stored = [d.get("stored_nbytes") for d in decls]
    codecs = [d.get("codec") for d in decls]
    compressed = any(c is not None for c in codecs) or any(n is not None for n in stored)
    return ("\n".join(lines), np.asarray(ints, np.int64).tobytes(),
            "".join(d.get("checksum") or "0" * 16 for d in decls),
            stored if compressed else None, codecs if compressed else None)


def _parse_signature(signature: str) -> list[tuple[str, str, str, tuple[int, ...]]]:
    """(name, dtype, kind, dims) of each line of a :func:`pack_declarations` signature."""
    out = []
    for line in signature.split("\n") if signature else ():
        name, dtype, kind, dims = line.split("\t")
        out.append((name, dtype, kind, tuple(map(int, dims.split(","))) if dims else ()))
    return out


def plan_write(declarations_by_rank: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, VariablePlan]:
    """Coordinator: :func:`plan_packed` of declaration dicts (packed here, as every rank packs its own)."""
    return plan_packed([pack_declarations(d) for d in declarations_by_rank])


def plan_packed(packs: Sequence[PackedDeclarations]) -> PlannedVariables:
    """Coordinator: validate all ranks' declarations (:func:`pack_declarations`, one per rank) together; return
    the variables (sorted by name) with their block columns (every rank's), as a
    :class:`~ckptio.model.variable_plan.PlannedVariables` (their joined columns made once for the placement and
    the index phase).

    Raises DeclarationError naming the variable and ranks for: different dtype, kind or global shape for the
    same name, per-rank segments whose trailing shapes differ, more than one segment of a name on one rank, and
    (via :func:`validate_variable`) blocks outside the shape, overlapping blocks or uncovered regions.

    Ranks with the same signature (usually all of them) are planned together: their offsets and shapes are one
    numpy matrix, one column slice per declaration; no Python step per block (the block-by-block checks run
    only to name a problem).
    """
    by_signature: dict[str, list[int]] = {}
    for r, pack in enumerate(packs):
        by_signature.setdefault(pack[0], []).append(r)
    parsed = {signature: _parse_signature(signature) for signature in by_signature}
    declared = Counter(name for signature, ranks in by_signature.items() for name, *_ in parsed[signature]
                       for _ in range(min(len(ranks), 2)))  # (more than once is all that matters)
    chunks: dict[str, list[_Chunk]] = defaultdict(list)
    whole: dict[str, VariablePlan] = {}
    for signature, ranks in by_signature.items():
        decls = parsed[signature]
        if not decls:
            continue
        if len(ranks) == 1 and packs[ranks[0]][3] is None:  # one rank's own declarations, none compressed
            decls = _plan_whole_blocks(decls, packs[ranks[0]], ranks[0], declared, whole)
            if all(name is None for name, *_ in decls):  # (every declaration planned there)
                continue
        rank = np.array(ranks, np.int64)
        ints = np.frombuffer(b"".join(packs[r][1] for r in ranks), np.int64).reshape(len(ranks), -1)
        sums = _checksums("".join(packs[r][2] for r in ranks)).reshape(len(ranks), len(decls))
        stored = np.full((len(ranks), len(decls)), -1, np.int64)
        compressed = [i for i, r in enumerate(ranks) if packs[r][3] is not None]
        # per declaration, each rank's codec; None for the whole signature when no rank of it compressed anything
        codecs: list[list[str | None] | None] = [None] * len(decls)
        if compressed:
            codecs = [[None] * len(ranks) for _ in decls]
        for i in compressed:
            stored[i] = [-1 if n is None else n for n in packs[ranks[i]][3]]
            for j, c in enumerate(packs[ranks[i]][4]):
                codecs[j][i] = c
        col = 0
        for j, (name, dtype, kind, dims) in enumerate(decls):
            width = 2 * len(dims) if kind == ARRAY else 1
            if name is not None:  # (None: planned by _plan_whole_blocks)
                chunks[name].append(_Chunk(rank, j, dtype, kind, dims, ints[:, col:col + width], sums[:, j],
                                           stored[:, j], codecs[j]))
            col += width
    nprocs = len(packs)
    # in sorted name order, as before the whole-block path: of several wrong variables, the first name is reported
    planned = {name: _plan_variable(name, chunks[name], nprocs) for name in sorted(chunks)}
    planned.update(whole)
    return PlannedVariables((name, planned[name]) for name in sorted(planned))


_NO_CODEC_1 = _read_only(np.full(1, -1, np.int64))


def _plan_whole_blocks(decls: list[tuple[str, str, str, tuple[int, ...]]], pack: PackedDeclarations, rank: int,
                       declared: Counter, whole: dict[str, VariablePlan]) -> list[tuple[Any, str, str, tuple]]:
    """Coordinator, one rank's signature (no other rank has it) with nothing compressed: plans into ``whole``
    each variable that this rank alone declared, once, as one block covering the whole array (thousands of small
    variables per checkpoint: columns that are views of the rank's packed integers, no per-variable check or
    concatenation; a block that is the whole array, declared once, is valid by itself). Returns ``decls`` with
    the name of each declaration planned here replaced by None (the general path skips those)."""
    ints = np.frombuffer(pack[1], np.int64)
    values = ints.tolist()
    sums = _checksums(pack[2])
    stored = np.full(len(decls), -1, np.int64)
    local = np.arange(len(decls), dtype=np.int64)
    ranks = np.full(1, rank, np.int64)
    out: list[tuple[Any, str, str, tuple]] = []
    col = 0
    for j, decl in enumerate(decls):
        name, dtype, kind, dims = decl
        if kind != ARRAY:
            out.append(decl)
            col += 1
            continue
        nd = len(dims)
        if declared[name] == 1 and not any(values[col:col + nd]) and tuple(values[col + nd:col + 2 * nd]) == dims:
            plan = object.__new__(VariablePlan)  # every field, as the constructor would set them
            plan.__dict__.update(name=name, dtype=dtype, shape=dims, kind=ARRAY, rank=ranks,
                                 local_index=local[j:j + 1], offset=ints[col:col + nd].reshape(1, nd),
                                 size=ints[col + nd:col + 2 * nd].reshape(1, nd), stored_nbytes=stored[j:j + 1],
                                 codec=_NO_CODEC_1, codecs=[], checksum=sums[j:j + 1], nblocks=None, _given=None)
            whole[name] = plan
            out.append((None, dtype, kind, dims))
        else:
            out.append(decl)
        col += 2 * nd
    return out


@dataclass
class _Chunk:
    """The declarations of one variable at one position of one signature: one row per rank that has it."""

    rank: np.ndarray
    local_index: int
    dtype: str
    kind: str
    dims: tuple[int, ...]
    ints: np.ndarray  # per rank: offset and shape (array), or the row count (segment)
    checksum: np.ndarray
    stored: np.ndarray
    codec: list[str | None] | None  # per rank; None: no rank of this chunk compressed anything


def _plan_variable(name: str, chunks: list[_Chunk], nprocs: int) -> VariablePlan:
    """Coordinator: the checked columns of one variable from its chunks of declarations."""
    if len(chunks) > 1:  # (one chunk: one declaration position of one signature, the same everywhere by itself)
        for value, what, why in ((lambda c: c.kind, "kind (array block vs per-rank segment)", ""),
                                 (lambda c: c.dtype, "dtype", ""),
                                 (lambda c: list(c.dims), "global shape" if chunks[0].kind == ARRAY else
                                  "per-rank segments of rows of shape", "" if chunks[0].kind == ARRAY else
                                  ": every dimension but the rows' must agree")):
            _same_everywhere(name, chunks, value, what, why)
    first = chunks[0]
    n = sum(len(c.rank) for c in chunks)
    if len(chunks) == 1:  # one position of one signature: its rows are in rank order already
        order = None
        rank, local, ints = first.rank, np.full(n, first.local_index, np.int64), first.ints
    else:
        rank = np.concatenate([c.rank for c in chunks])
        local = np.concatenate([np.full(len(c.rank), c.local_index, np.int64) for c in chunks])
        order = np.lexsort((local, rank))  # rank order, each rank's in declaration order
        rank, local = rank[order], local[order]
        ints = np.concatenate([c.ints for c in chunks])[order]
    if first.kind == ARRAY:
        shape = first.dims
        nd = len(shape)
        offset, size = ints[:, :nd], ints[:, nd:]
        if not tiles_exactly(rank, offset, size, shape, nprocs, False):
            validate_variable(name, shape, [(int(r), Box(tuple(o), tuple(s))) for r, o, s in
                                            zip(rank.tolist(), offset.tolist(), size.tolist(), strict=True)])
    else:
        twice = np.flatnonzero(np.diff(rank) == 0)
        if len(twice):
            raise DeclarationError(f"variable {name!r}: rank {int(rank[twice[0]])} declared more than one segment "
                                   f"(one per rank allowed)")
        lengths = ints[:, 0]
        offset = np.zeros((n, 1 + len(first.dims)), np.int64)
        offset[:, 0] = np.cumsum(lengths) - lengths  # the exclusive scan of the row counts
        size = np.empty_like(offset)
        size[:, 0] = lengths
        size[:, 1:] = first.dims
        shape = (int(lengths.sum()), *first.dims)
    if any(chunk.codec is not None for chunk in chunks):
        codec_of = [c for chunk in chunks for c in (chunk.codec or [None] * len(chunk.rank))]
        codec_of = codec_of if order is None else [codec_of[i] for i in order.tolist()]
        codecs = sorted(set(codec_of) - {None})
        codec_id = {None: -1, **{c: i for i, c in enumerate(codecs)}}
        codec = np.fromiter(map(codec_id.__getitem__, codec_of), np.int64, n)
    else:
        codecs, codec = [], np.full(n, -1, np.int64)

    def column(values: list[np.ndarray]) -> np.ndarray:
        return values[0] if order is None else np.concatenate(values)[order]

    return VariablePlan(name, first.dtype, tuple(shape), first.kind, rank, local, np.ascontiguousarray(offset),
                        np.ascontiguousarray(size), column([c.stored for c in chunks]), codec, codecs,
                        column([c.checksum for c in chunks]))



def _same_everywhere(name: str, chunks: list[_Chunk], value, what: str, why: str) -> None:
    """Raise the DeclarationError naming the lowest rank that declared ``name`` and the lowest rank whose
    declaration differs from it, and, where more ranks declared it, every value with its ranks (bounded:
    :func:`ckptio.model.agreement.groups_text`), so that one odd rank among many is found at once."""
    values = [value(c) for c in chunks]
    if all(v == values[0] for v in values):
        return
    # chunks in order of (lowest rank, declaration position): the first declaration, then the first that differs
    order = sorted(range(len(chunks)), key=lambda i: (int(chunks[i].rank.min()), chunks[i].local_index))
    first = order[0]
    other = next(i for i in order if values[i] != values[first])
    r0, r1 = int(chunks[first].rank.min()), int(chunks[other].rank.min())
    groups: dict[str, list[int]] = {}
    for i in order:
        groups.setdefault(repr(values[i]), []).extend(chunks[i].rank.tolist())
    every = ""
    if len({r for ranks in groups.values() for r in ranks}) > 2:
        every = f" (every declaration: {groups_text(groups, str)})"
    raise DeclarationError(f"variable {name!r}: rank {r0} declared {what} {values[first]!r} but "
                           f"{'the same rank also' if r1 == r0 else f'rank {r1}'} declared {values[other]!r}{every}"
                           f"{why}")


def _checksums(hexes: str) -> np.ndarray:
    """Concatenated 16-hex-digit checksums as ``uint64``."""
    return np.frombuffer(bytes.fromhex(hexes), ">u8").astype(np.uint64)


def segment_box(start: int, length: int, trailing: Sequence[int]) -> Box:
    """The box of one per-rank segment: ``length`` rows from row ``start``, whole along the trailing axes."""
    return Box((int(start), *(0 for _ in trailing)), (int(length), *(int(n) for n in trailing)))


# ---------------------------------------------------------------------------------------------- read side
@dataclass(frozen=True)
class Extent:
    """Contiguous bytes of the file holding a C-ordered box of one variable.

    ``verify`` lists the writer blocks wholly inside this extent as ``(block_index, box, checksum)``;
    an aggregator checks them after reading. ``chain`` identifies extents that are parts of one stored block
    split because it exceeds the buffer (``(block_key, part, nparts)``); the aggregator hashes those in
    streaming fashion across rounds.
    """

    var: str
    box: Box
    file_offset: int
    nbytes: int
    verify: tuple[tuple[int, Box, str], ...] = ()
    chain: tuple[str, int, int] | None = None
    codec: str | None = None  # stored compressed: read whole, decompress to box.size elements
    label: str | None = None  # what it holds, for messages (default: the variable and the file offset)

    @classmethod
    def made(cls, var: str, box: Box, file_offset: int, nbytes: int, codec: str | None = None,
             label: str | None = None) -> Extent:
        """An extent with nothing to verify and no chain, its fields set as the constructor would without a frozen
        dataclass's ``object.__setattr__`` per field (an aggregator makes one per part it reads: 10,000 small
        variables, 10,000 parts)."""
        extent = object.__new__(cls)
        extent.__dict__.update(var=var, box=box, file_offset=file_offset, nbytes=nbytes, verify=(), chain=None,
                               codec=codec, label=label)
        return extent


@dataclass(frozen=True)
class Request:
    """One hyperslab of one variable that one rank wants."""

    var: str
    box: Box

    @classmethod
    def made(cls, var: str, box: Box) -> Request:
        """The same Request as the constructor's, without a frozen dataclass's ``object.__setattr__`` per field
        (a restart of 10,000 small variables makes one per variable on every rank)."""
        request = object.__new__(cls)
        request.__dict__.update(var=var, box=box)
        return request


def choose_aggregators(nprocs: int, node_of_rank: Sequence[int], stripe_count: int, override: int | None = None,
                       cap: int = 80) -> list[int]:
    """Pick aggregator ranks: ``min(nprocs, stripe_count, cap)`` unless overridden, spread one per node first.

    ``node_of_rank[r]`` is a node id (from ``MPI.COMM_TYPE_SHARED``). Ranks are taken round-robin over nodes:
    the first rank of every node, then the second rank of every node, and so on.
    """
    want = override if override is not None else min(nprocs, max(stripe_count, 1), cap)
    want = max(1, min(want, nprocs))
    by_node: dict[int, list[int]] = defaultdict(list)
    for rank in range(nprocs):
        by_node[node_of_rank[rank]].append(rank)
    nodes = sorted(by_node, key=lambda n: by_node[n][0])
    chosen: list[int] = []
    depth = 0
    while len(chosen) < want:
        for node in nodes:
            if depth < len(by_node[node]) and len(chosen) < want:
                chosen.append(by_node[node][depth])
        depth += 1
    return sorted(chosen)
