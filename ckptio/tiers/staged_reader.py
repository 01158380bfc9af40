"""Restart from staged pieces (SCR-style): read a staged checkpoint straight from the node-local stages.

:func:`open_staged` (collective) returns a :class:`StagedReader` when the newest staged copy of ``path`` is
usable by this job: the same number of ranks, and every rank finds its own piece on its own node with every
checksum verified, and the copy is not older than the file at ``path``. Otherwise it returns None on every
rank (with a warning saying which rank lacks what) and the caller opens ``path`` on the parallel file system.

A StagedReader answers the same reads as :class:`ckptio.Reader` (any hyperslab on any rank, per-rank
segments): every rank holds its own blocks (memory-mapped from its stage) and each ``read_many`` moves every
requested piece from the rank that wrote it straight into the array of the rank that asks for it (matched
point-to-point messages, zero-copy on both sides, as the file restart's exchange).

No rank learns every rank's blocks or requests (the design's scale rule): the variables are merged from the
manifests over a reduction tree (O(variables) per rank), each block is published to the directory ranks of the
tiles it meets, and each request asks those of its tiles, which tell owners and requesters about their pieces
(:mod:`ckptio.model.staged_directory`). What a rank receives is O(its own blocks, requests and pieces + the peers
it exchanges with); every collective goes through :mod:`ckptio.coord`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ckptio import coord
from ckptio.coord import comms, exchange
from ckptio.coord import datatypes as memtypes
from ckptio.engine import placement_stats
from ckptio.engine.restart import ReadStats
from ckptio.engine.restart_plan import checked_verify
from ckptio.errors import CheckpointError, ClosedCheckpointError
from ckptio.model import pagealign
from ckptio.model import staged_directory as sd
from ckptio.model.layout import Box
from ckptio.model.meta import default_dims
from ckptio.model.plan import ARRAY, segment_box
from ckptio.model.requests import VariableInfo, checked_requests
from ckptio.model.stage_manifest import StagedBlock, StageManifest
from ckptio.tiers import stage_files


def _candidate(stage_dir: str, path: str, rank: int, nprocs: int) -> tuple[str | None, str | None]:
    """Local: (token, problem) of the newest staged copy of ``path`` holding this rank's manifest."""
    data_name = f"rank-{rank:06d}-of-{nprocs:06d}.json"
    name = os.path.basename(path)
    tokens = sorted((tok for n, tok, d in stage_files.staged_copies(stage_files.key_dir(stage_dir, path))
                     if n == name and os.path.exists(os.path.join(d, data_name))), reverse=True)
    if not tokens:
        from ckptio.coord.mpi import MPI

        return None, f"no staged piece of {path} for rank {rank} of {nprocs} on {MPI.Get_processor_name()}"
    return tokens[0], None


def _is_current(stage_dir: str, path: str, token: str) -> bool:
    """Rank 0: is the staged copy ``token`` at least as new as the file at ``path`` (or is there none)?"""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return True
    marker = stage_files.drained_identity(stage_files.checkpoint_dir(stage_dir, path, token))
    if marker is not None:
        return marker == stage_files.file_identity(st)
    return st.st_mtime_ns < int(token.split("-")[0])


def open_staged(path: str, comm, stage_dir: str, verify: bool = True) -> StagedReader | None:
    """Collective: a StagedReader of the newest usable staged copy of ``path``, or None on every rank."""
    rank, nprocs = comm.Get_rank(), comm.Get_size()
    path = os.path.abspath(path)

    def candidate() -> tuple[str | None, str | None]:
        checked_verify(verify)  # (a bad verify= on one rank: the same error on every rank, here)
        return _candidate(stage_dir, path, rank, nprocs)

    found = coord.gather_and_plan(comm, f"open {path}: staged copies", candidate,
                                  lambda views: _agree_token(views, stage_dir, path))
    token, problem = found
    if token is not None:
        directory = stage_files.checkpoint_dir(stage_dir, path, token)

        def load() -> tuple[Any, str | None]:
            try:
                return stage_files.read_piece(directory, rank, nprocs, path, verify), None
            except CheckpointError as exc:
                return None, str(exc)

        piece, mine = load()
        problems = coord.gather_and_plan(comm, f"open {path}: verify staged pieces", lambda: mine,
                                         lambda all_: {r: p for r, p in enumerate(all_) if p})
        if not problems:
            return StagedReader(path, comm, directory, *piece)
        first = min(problems)
        problem = f"rank {first}: {problems[first]}" + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
    coord.warn_from_root(comm, f"open {path}: staged copy not used", problem and (
        f"ckptio: not restarting {path} from the stage: {problem}; reading the parallel file system copy"))
    return None


def _agree_token(views: Sequence[tuple[str | None, str | None]], stage_dir: str, path: str
                 ) -> tuple[str | None, str | None]:
    """Rank 0: the token every rank found, or (None, why not)."""
    missing = [(r, p) for r, (t, p) in enumerate(views) if t is None]
    if len(missing) == len(views):
        return None, None  # nothing staged: not worth a warning
    if missing:
        return None, f"rank {missing[0][0]}: {missing[0][1]}" + (f" (+{len(missing) - 1} more)"
                                                                    if len(missing) > 1 else "")
    tokens = {t for t, _ in views}
    if len(tokens) != 1:
        return None, f"ranks found different staged copies ({len(tokens)})"
    token = tokens.pop()
    if not _is_current(stage_dir, path, token):
        return None, "the staged copy is older than the file on the parallel file system"
    return token, None


@dataclass(frozen=True)
class _Variable:
    """A variable as the ranks' manifests declare it, merged over the ranks (:func:`_merge`)."""

    kind: str
    dtype: str
    global_shape: tuple[int, ...] | None  # an array's
    trailing: tuple[int, ...]            # a segment's shape after its rows
    rows: int                             # a segment's rows, summed over the ranks merged
    nblocks: int
    dims: Any
    attrs: Any

    def shape(self) -> tuple[int, ...]:
        return tuple(self.global_shape) if self.kind == ARRAY else (self.rows, *self.trailing)


def _summary(blocks: list[StagedBlock]) -> dict[str, _Variable]:
    """Local: this rank's variables as its blocks declare them."""
    out: dict[str, _Variable] = {}
    for b in blocks:
        rows = b.array_shape[0] if b.kind != ARRAY else 0
        seen = out.get(b.name)
        out[b.name] = (_Variable(b.kind, b.dtype, b.global_shape, b.array_shape[1:], rows, 1, b.dims, b.attrs)
                       if seen is None else replace(seen, rows=seen.rows + rows, nblocks=seen.nblocks + 1))
    return out


def _merge(first: dict[str, _Variable], then: dict[str, _Variable]) -> dict[str, _Variable]:
    """Local (inside the reduction): the summaries of lower ranks (``first``) and higher ones (``then``) as one:
    block and row counts add up; kind, dtype, shape, dims and attrs are the lowest rank's (the write validated
    that they agree)."""
    out = dict(first)
    for name, v in then.items():
        seen = out.get(name)
        out[name] = v if seen is None else replace(seen, rows=seen.rows + v.rows, nblocks=seen.nblocks + v.nblocks)
    return out


class StagedReader:
    """A staged checkpoint opened for restart (see :func:`open_staged`). Reads are collective, as with
    :class:`ckptio.Reader`; ``source`` is ``"stage"``. It has ``attrs``, ``variables``, ``aggregators`` (every
    rank serves its own piece: ``range(P)``) and ``stats``, but no ``meta`` (there is no file index: the manifests
    are the index, and no rank holds all of them)."""

    source = "stage"

    def __init__(self, path: str, comm, directory: str, manifest: StageManifest, arrays: list[np.ndarray]):
        """Collective over ``comm``: merge the variables from every rank's manifest (a reduction tree), find where
        this rank's segments start (an exclusive scan), and publish this rank's blocks to their directory ranks
        (a sparse exchange on a duplicate of ``comm``, freed at close)."""
        me, size = comm.Get_rank(), comm.Get_size()
        # file_bytes: bytes this rank read from its own piece (every rank reads its own: each is an aggregator)
        self.stats = ReadStats(**placement_stats.rank_placement([me], me))
        self.stats.opened_file = True
        self.path, self.comm, self.directory = path, comm, directory
        self.aggregators = range(size)  # every rank reads its own piece
        self._closed = True  # until opened
        self._last_failed = False
        self._left_by: str | None = None  # other ranks closed it while this one read (see read_many)
        self._exchanges = 0
        parsed: list[list[StagedBlock]] = []

        def summary() -> dict[str, _Variable]:  # inside the agreed step: a bad manifest fails on every rank
            self.attrs: dict[str, Any] = dict(manifest.attrs)
            parsed.append(list(manifest.blocks))
            return _summary(parsed[0])

        opened = False
        try:
            with coord.collective_section():
                merged = coord.merge_in_rank_order(comm, f"open {path} (staged): variables", summary, _merge)
                blocks = parsed[0]
                self._describe(merged)
                starts = exchange.exclusive_prefix_sum(comm, np.array(
                    [sum(b.array_shape[0] for b in blocks if b.name == n) for n in self._segment_names], np.int64))
                self._p2p = comms.duplicate(comm)
                try:
                    records = coord.run(comm, f"open {path} (staged): blocks",
                                        lambda: self._own_blocks(blocks, arrays, starts))
                    published = exchange.sparse_records(self._p2p, records, 2 + 2 * self._nd, self._tag())
                    self._known = self._directory_blocks(published)
                except BaseException:
                    comms.free(self._p2p)  # collective: the failure was agreed, every rank is here
                    raise
                opened = True
        except BaseException as exc:
            if not opened:  # the open failed, agreed on every rank
                raise
            # a signal held during the open, delivered after its last collective on this rank alone: leave as
            # from the ``with`` block, meeting the others in their first read or close (ckptio.reader.Reader)
            self._closed = False
            coord.close_on_exit(self._close, exc)
            raise
        self._closed = False

    # ------------------------------------------------------------------------------------------------ open
    def _describe(self, merged: dict[str, _Variable]) -> None:
        """Local, alike on every rank (from the merged summary): the variables (sorted by name) and their
        directory."""
        self.variables: dict[str, VariableInfo] = {}
        for name, v in sorted(merged.items()):
            shape = v.shape()
            self.variables[name] = VariableInfo(name, shape, np.dtype(v.dtype).newbyteorder("="), v.kind, v.nblocks,
                                                int(np.prod(shape)) * np.dtype(v.dtype).itemsize,
                                                tuple(v.dims or default_dims(name, len(shape))), dict(v.attrs or {}))
        self._var_index = {name: i for i, name in enumerate(self.variables)}
        self._segment_names = [n for n, v in self.variables.items() if v.kind != ARRAY]
        self._dir = sd.Directory.build([v.shape for v in self.variables.values()], self.comm.Get_size())
        self._nd = self._dir.ndim

    def _own_blocks(self, blocks: list[StagedBlock], arrays: list[np.ndarray], starts: np.ndarray
                    ) -> dict[int, np.ndarray]:
        """Local: this rank's blocks as padded boxes (``self._block_lo``), its arrays in native byte order (a block
        stored in the other one is converted here, once: the exchange moves raw bytes into native outputs), its
        default segments, and its block records ``[k, var, lo, shape]`` by directory rank."""
        nd = self._nd
        start = dict(zip(self._segment_names, starts.tolist(), strict=True))
        rows = np.zeros((len(arrays), 2 + 2 * nd), np.int64)
        rows[:, 2 + nd:] = 1
        self._own_segment: dict[str, Box] = {}
        for k, b in enumerate(blocks):
            offset = b.offset if b.kind == ARRAY else (start[b.name], *(0 for _ in b.array_shape[1:]))
            if b.kind != ARRAY:
                self._own_segment[b.name] = segment_box(start[b.name], b.array_shape[0], b.array_shape[1:])
            rows[k, 0], rows[k, 1] = k, self._var_index[b.name]
            rows[k, 2:2 + len(offset)] = offset
            rows[k, 2 + nd:2 + nd + len(b.array_shape)] = b.array_shape
        for name in self._segment_names:  # a rank without a segment reads an empty one, after all the others
            shape = self.variables[name].shape
            self._own_segment.setdefault(name, segment_box(shape[0], 0, shape[1:]))
        self._arrays = [a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("=")) for a in arrays]
        self._block_lo = rows[:, 2:2 + nd]
        self._blocks = memtypes.ArrayTable(self._arrays, nd)
        return self._dir.route(rows, 1)

    def _directory_blocks(self, published: dict[int, np.ndarray]) -> np.ndarray:
        """Local: the blocks this rank keeps the directory of, ``[owner, k, var, lo, shape]``."""
        width = 2 + 2 * self._nd
        parts = [np.column_stack([np.full(len(r), src, np.int64), r]) for src, r in sorted(published.items())]
        return np.concatenate(parts) if parts else np.zeros((0, 1 + width), np.int64)

    def _tag(self) -> int:
        """Local: a fresh tag for the next exchange on the duplicate (consecutive exchanges never share one)."""
        self._exchanges += 1
        return 1 + self._exchanges % 2

    # -------------------------------------------------------------------------------------------- the API
    def __enter__(self) -> StagedReader:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        coord.close_on_exit(self._close, exc)  # collective: an exception here may be this rank's alone
        return False

    def _note_left(self, ranks: str) -> None:
        """Local: the ranks that closed this reader during a read (see :func:`ckptio.coord.noting_ranks_that_left`)."""
        self._left_by = ranks

    def close(self) -> None:
        """Collective: agree with the other ranks (as :meth:`ckptio.Reader.close`), then drop the mapped pieces."""
        self._close(None)

    def _close(self, error: BaseException | None) -> None:
        """Collective: as ``Reader._close``: the agreement has the shape of every read's first phase, so a rank
        that leaves the ``with`` block (with an exception or not) meets the others in their next read or close,
        which raises a CollectiveError naming it. Skipped when the last read failed (agreed on every rank)."""
        if self._closed:
            return
        self._closed = True
        with coord.collective_section():
            try:
                if not self._last_failed:
                    coord.agree(self.comm, f"close {self.path}", error, closing=True)
            finally:
                self._arrays, self._blocks = [], None
                comms.free(self._p2p)
                self._p2p = None

    def __getitem__(self, name: str) -> Any:
        """Local: ``ck["dens"]``, a lazy view of one variable (indexing it is a collective read)."""
        from ckptio.lazy import LazyVariable

        return LazyVariable(self, name)

    def __repr__(self) -> str:
        from ckptio.lazy import describe_reader

        return describe_reader(self)

    def read(self, name: str, offset: Sequence[int] | None = None, shape: Sequence[int] | None = None,
             out: np.ndarray | None = None) -> np.ndarray:
        """Collective: as :meth:`ckptio.Reader.read` (``out=`` included)."""
        return self.read_many([(name, offset, shape)], out=None if out is None else [out])[0]

    def _own(self, name: str) -> Box:
        return self._own_segment[name]

    def read_many(self, requests: Sequence[tuple[str, Sequence[int] | None, Sequence[int] | None]],
                  out: Sequence[np.ndarray | None] | None = None, *,
                  error: BaseException | None = None) -> list[np.ndarray]:
        """Collective: several hyperslabs in one exchange (the count may differ between ranks); ``out`` and
        ``error`` as for :meth:`ckptio.Reader.read_many`. Bad requests are a ReadRequestError on every rank."""
        if self._closed:  # local: after close() this rank's collectives with the others are over
            raise ClosedCheckpointError(f"checkpoint {self.path}: read after close()")
        coord.raise_if_left(self.path, self._left_by)
        with coord.collective_section():
            self._last_failed = True  # until every rank got through: an agreed failure leaves it set everywhere
            with coord.noting_ranks_that_left(self._note_left):
                outputs = self._read_many(requests, out, error)
            self._last_failed = False
            return outputs

    # ------------------------------------------------------------------------------------------- the read
    def _read_many(self, requests, out, error: BaseException | None = None) -> list[np.ndarray]:
        """Collective over ``comm``: requests to their directory ranks, pieces to their owners and requesters,
        then the data from owners to requesters (:func:`ckptio.coord.exchange.move_pieces`); ``error`` (the
        caller's own finding) raised in the first phase."""
        comm, nd = self.comm, self._nd
        phase = f"read {self.path} (staged)"

        def requests_by_directory():
            if error is not None:
                raise error
            found, given = checked_requests(self.path, requests, out, self.variables, self._own)
            records = np.zeros((len(found), 2 + 2 * nd), np.int64)
            records[:, 2 + nd:] = 1
            for qi, q in enumerate(found):
                records[qi, 0], records[qi, 1] = qi, self._var_index[q.var]
                records[qi, 2:2 + q.box.ndim] = q.box.offset
                records[qi, 2 + nd:2 + nd + q.box.ndim] = q.box.shape
            return found, given, records, self._dir.route(records, 1)

        found, given, records, routed = coord.run(comm, f"{phase}: requests", requests_by_directory)
        asked = exchange.sparse_records(self._p2p, routed, 2 + 2 * nd, self._tag())

        def pieces_and_outputs():
            received = [np.column_stack([np.full(len(r), src, np.int64), r]) for src, r in sorted(asked.items())]
            known = np.concatenate(received) if received else np.zeros((0, 3 + 2 * nd), np.int64)
            pieces = sd.match(self._dir, comm.Get_rank(), self._known, known)
            outputs = [g if g is not None else pagealign.restart_empty(q.box.shape, self.variables[q.var].dtype)
                       for q, g in zip(found, given, strict=True)]
            return sd.piece_descriptors(pieces), outputs

        descriptors, outputs = coord.run(comm, f"{phase}: plan", pieces_and_outputs)
        mine = exchange.sparse_records(self._p2p, descriptors, 4 + 2 * nd, self._tag())
        send: dict[int, memtypes.Stream] = {}
        recv: dict[int, memtypes.Stream] = {}
        error = None
        try:
            send, recv = self._streams(mine, records, outputs)
        except BaseException as exc:  # agreed on below, after move_pieces' status check
            error = exc
        error, messages = exchange.move_pieces(comm, self._p2p, 0, send, recv, error)
        self.stats.rounds += 1
        coord.agree(comm, f"{phase}: exchange", error)
        self.stats.messages += messages
        self.stats.bytes_sent += sum(st.nbytes for st in send.values())
        self.stats.bytes_received += sum(st.nbytes for st in recv.values())
        return outputs

    def _streams(self, descriptors: dict[int, np.ndarray], records: np.ndarray, outputs: list[np.ndarray]
                 ) -> tuple[dict[int, memtypes.Stream], dict[int, memtypes.Stream]]:
        """Local: this rank's pieces (the descriptors the directory ranks sent it) as streams by peer, in the
        order both sides compute (:func:`ckptio.model.staged_directory.canonical_order`): what it sends from its
        own blocks, what it receives into its outputs. Pieces it holds for itself are copied here."""
        nd, me = self._nd, self.comm.Get_rank()
        rows = sd.canonical_order(np.concatenate(list(descriptors.values())) if descriptors else
                                  np.zeros((0, 4 + 2 * nd), np.int64), nd)
        kind, peer, qi, k = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3]
        lo, shape = rows[:, 4:4 + nd], rows[:, 4 + nd:]
        serve = kind == sd.SEND
        self.stats.file_bytes += int((shape[serve].prod(axis=1) * self._blocks.item[k[serve]]).sum())
        for i in np.flatnonzero(serve & (peer == me)).tolist():  # my own requests: block -> output directly
            b, q = int(k[i]), int(qi[i])
            src = self._arrays[b][_index(lo[i] - self._block_lo[b], shape[i], self._arrays[b].ndim)]
            outputs[q][_index(lo[i] - records[q, 2:2 + nd], shape[i], outputs[q].ndim)] = src
        out_ = serve & (peer != me)
        in_ = ~serve & (peer != me)
        send = (self._blocks.streams(peer[out_], k[out_], lo[out_] - self._block_lo[k[out_]], shape[out_], qi[out_])
                if out_.any() else {})
        recv = (memtypes.ArrayTable(outputs, nd).streams(peer[in_], qi[in_], lo[in_] - records[qi[in_], 2:2 + nd],
                                                         shape[in_], qi[in_]) if in_.any() else {})
        return send, recv


def _index(rel: np.ndarray, shape: np.ndarray, ndim: int) -> tuple[Any, ...]:
    """Local: the slices of the padded box ``rel``/``shape`` in an array of ``ndim`` axes (then ``...``: a 0-d
    array gives a view)."""
    return (*(slice(int(a), int(a + n)) for a, n in zip(rel[:ndim], shape[:ndim], strict=True)), Ellipsis)
