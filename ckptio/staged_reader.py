"""Restart from staged pieces (SCR-style): read a staged checkpoint straight from the node-local stages.

:func:`open_staged` (collective) returns a :class:`StagedReader` when the newest staged copy of ``path`` is
usable by this job: the same number of ranks, and every rank finds its own piece on its own node with every
checksum verified, and the copy is not older than the file at ``path``. Otherwise it returns None on every
rank (with a warning saying which rank lacks what) and the caller opens ``path`` on the parallel file system.

A StagedReader answers the same reads as :class:`ckptio.Reader` (any hyperslab on any rank, per-rank
segments): every rank holds its own blocks (memory-mapped from its stage) and one ``Alltoallv`` per
``read_many`` moves each requested piece from the rank that wrote it to the rank that asks for it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _warn, coord, pagealign, staging
from .errors import CheckpointError, ClosedCheckpointError, ReadRequestError
from .layout import Box
from .meta import default_dims
from .plan import segment_box


def _candidate(stage_dir: str, path: str, rank: int, nprocs: int) -> tuple[str | None, str | None]:
    """Local: (token, problem) of the newest staged copy of ``path`` holding this rank's manifest."""
    data_name = f"rank-{rank:06d}-of-{nprocs:06d}.json"
    name = os.path.basename(path)
    tokens = sorted((tok for n, tok, d in staging._staged(staging.key_dir(stage_dir, path))
                     if n == name and os.path.exists(os.path.join(d, data_name))), reverse=True)
    if not tokens:
        from mpi4py import MPI

        return None, f"no staged piece of {path} for rank {rank} of {nprocs} on {MPI.Get_processor_name()}"
    return tokens[0], None


def _is_current(stage_dir: str, path: str, token: str) -> bool:
    """Rank 0: is the staged copy ``token`` at least as new as the file at ``path`` (or is there none)?"""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return True
    marker = staging.drained_identity(staging.checkpoint_dir(stage_dir, path, token))
    if marker is not None:
        return marker == staging.file_identity(st)
    return st.st_mtime_ns < int(token.split("-")[0])


def open_staged(path: str, comm, stage_dir: str, verify: bool = True) -> StagedReader | None:
    """Collective: a StagedReader of the newest usable staged copy of ``path``, or None on every rank."""
    rank, nprocs = comm.Get_rank(), comm.Get_size()
    path = os.path.abspath(path)
    found = coord.gather_and_plan(comm, f"open {path}: staged copies",
                                  lambda: _candidate(stage_dir, path, rank, nprocs),
                                  lambda views: _agree_token(views, stage_dir, path))
    token, problem = found
    if token is not None:
        directory = staging.checkpoint_dir(stage_dir, path, token)

        def load() -> tuple[Any, str | None]:
            try:
                return staging.read_piece(directory, rank, nprocs, path, verify), None
            except CheckpointError as exc:
                return None, str(exc)

        piece, mine = load()
        problems = coord.gather_and_plan(comm, f"open {path}: verify staged pieces", lambda: mine,
                                         lambda all_: {r: p for r, p in enumerate(all_) if p})
        if not problems:
            return StagedReader(path, comm, directory, *piece)
        first = min(problems)
        problem = f"rank {first}: {problems[first]}" + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
    if rank == 0 and problem:
        _warn.warn(f"ckptio: not restarting {path} from the stage: {problem}; reading the parallel file "
                   f"system copy", RuntimeWarning)
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


class StagedReader:
    """A staged checkpoint opened for restart (see :func:`open_staged`). Reads are collective, as with
    :class:`ckptio.Reader`; ``source`` is ``"stage"``. It has ``attrs``, ``variables``, ``aggregators`` (every
    rank serves its own piece) and ``stats``, but no ``meta`` (there is no file index: the manifests are the
    index)."""

    source = "stage"

    def __init__(self, path: str, comm, directory: str, manifest: dict[str, Any], arrays: list[np.ndarray]):
        from . import placement_stats
        from .reader import ReadStats, VariableInfo

        # file_bytes: bytes this rank read from its own piece (every rank reads its own: each is an aggregator)
        self.stats = ReadStats(**placement_stats.rank_placement([comm.Get_rank()], comm.Get_rank()))
        self.stats.opened_file = True
        self.path, self.comm, self.directory = path, comm, directory
        self.attrs: dict[str, Any] = dict(manifest["attrs"])
        self.aggregators = list(range(comm.Get_size()))  # every rank reads its own piece
        self._arrays = arrays
        tables = comm.allgather([(b["name"], b["kind"], b["dtype"], b.get("offset"), b["array_shape"],
                                  b.get("global_shape"), b.get("dims"), b.get("attrs")) for b in manifest["blocks"]])
        described: dict[str, tuple[Any, Any]] = {}  # dims and attrs declared with the blocks, if any
        self._blocks: list[list[tuple[str, Box]]] = []  # per rank: (variable, box) of each block, in order
        shapes: dict[str, tuple[int, ...]] = {}
        kinds: dict[str, tuple[str, str]] = {}
        seg_end: dict[str, int] = {}
        nblocks: dict[str, int] = {}
        self._own_segment: dict[str, Box] = {}
        for r, table in enumerate(tables):
            boxes = []
            for name, kind, dtype, offset, shape, gshape, dims, attrs in table:
                kinds.setdefault(name, (kind, dtype))
                described.setdefault(name, (dims, attrs))
                nblocks[name] = nblocks.get(name, 0) + 1
                if kind == "array":
                    box = Box(tuple(offset), tuple(shape))
                    shapes[name] = tuple(gshape)
                else:
                    start = seg_end.get(name, 0)
                    box = segment_box(start, shape[0], shape[1:])
                    seg_end[name] = start + shape[0]
                    shapes[name] = (seg_end[name], *shape[1:])
                    if r == comm.Get_rank():
                        self._own_segment[name] = box
                boxes.append((name, box))
            self._blocks.append(boxes)
        self.variables = {name: VariableInfo(name, shapes[name], np.dtype(dtype).newbyteorder("="), kind,
                                             nblocks[name], int(np.prod(shapes[name])) * np.dtype(dtype).itemsize,
                                             tuple(described[name][0] or default_dims(name, len(shapes[name]))),
                                             dict(described[name][1] or {}))
                          for name, (kind, dtype) in sorted(kinds.items())}
        for name in seg_end:
            self._own_segment.setdefault(name, segment_box(seg_end[name], 0, shapes[name][1:]))
        self._closed = False
        self._last_failed = False

    def __enter__(self) -> StagedReader:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        # as Reader.__exit__: an exception here may be this rank's alone; close() tells the others
        try:
            self._close(exc)
        except BaseException as close_exc:
            if exc is None or (close_exc is not exc and not isinstance(close_exc, CheckpointError)):
                raise
        return False

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
                self._arrays = []

    def __getitem__(self, name: str) -> Any:
        """Local: ``ck["dens"]``, a lazy view of one variable (indexing it is a collective read)."""
        from .lazy import LazyVariable

        return LazyVariable(self, name)

    def __repr__(self) -> str:
        from .lazy import describe_reader

        return describe_reader(self)

    def read(self, name: str, offset: Sequence[int] | None = None, shape: Sequence[int] | None = None,
             out: np.ndarray | None = None) -> np.ndarray:
        """Collective: as :meth:`ckptio.Reader.read` (``out=`` included)."""
        return self.read_many([(name, offset, shape)], out=None if out is None else [out])[0]

    def _own(self, name: str) -> Box:
        return self._own_segment[name]

    def read_many(self, requests: Sequence[tuple[str, Sequence[int] | None, Sequence[int] | None]],
                  out: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        """Collective: several hyperslabs in one exchange (the count may differ between ranks); ``out`` as for
        :meth:`ckptio.Reader.read_many`. Bad requests are a ReadRequestError on every rank."""
        if self._closed:  # local: after close() this rank's collectives with the others are over
            raise ClosedCheckpointError(f"checkpoint {self.path}: read after close()")
        with coord.collective_section():
            self._last_failed = True  # until every rank got through: an agreed failure leaves it set everywhere
            outputs = self._read_many(requests, out)
            self._last_failed = False
            return outputs

    def _read_many(self, requests, out) -> list[np.ndarray]:
        from mpi4py import MPI

        from .reader import checked_requests

        comm, me, size = self.comm, self.comm.Get_rank(), self.comm.Get_size()
        found, given = coord.run(comm, f"read {self.path} (staged): requests",
                                 lambda: checked_requests(self.path, requests, out, self.variables, self._own))
        mine = [(q.var, q.box) for q in found]
        wanted = comm.allgather([(n, b.offset, b.shape) for n, b in mine])
        outputs = [g if g is not None else pagealign.restart_empty(b.shape, self.variables[n].dtype)
                   for (n, b), g in zip(mine, given, strict=True)]

        def pieces(src: int, dest: int):
            """(request index of dest, block index of src, intersection), in one canonical order."""
            for j, (n, off, shp) in enumerate(wanted[dest]):
                req = Box(tuple(off), tuple(shp))
                for k, (bn, box) in enumerate(self._blocks[src]):
                    if bn == n:
                        inter = box.intersect(req)
                        if inter is not None:
                            yield j, k, inter

        def nbytes(name: str, box: Box) -> int:
            return box.size * self.variables[name].dtype.itemsize

        send_counts = [sum(nbytes(wanted[d][j][0], i) for j, _, i in pieces(me, d)) if d != me else 0
                       for d in range(size)]
        recv_counts = [sum(nbytes(mine[j][0], i) for j, _, i in pieces(s, me)) if s != me else 0
                       for s in range(size)]
        if comm.allreduce(max(sum(send_counts), sum(recv_counts)), op=MPI.MAX) >= 2**31:  # decided alike everywhere
            raise ReadRequestError("a staged read would move more than 2 GiB to or from one rank in one call; "
                                   "read in several calls")
        send = np.empty(sum(send_counts), np.uint8)
        pos = 0
        for d in range(size):
            for j, k, inter in pieces(me, d):
                block = self._arrays[k]
                src = block[inter.relative_to(self._blocks[me][k][1])]
                self.stats.file_bytes += src.nbytes
                if d == me:
                    outputs[j][inter.relative_to(mine[j][1])] = src
                    continue
                n = nbytes(wanted[d][j][0], inter)
                send[pos:pos + n].view(block.dtype).reshape(inter.shape)[...] = src
                pos += n
        recv = np.empty(sum(recv_counts), np.uint8)
        sd = np.concatenate(([0], np.cumsum(send_counts)[:-1])).astype(np.int64).tolist()
        rd = np.concatenate(([0], np.cumsum(recv_counts)[:-1])).astype(np.int64).tolist()
        comm.Alltoallv([send, (send_counts, sd), MPI.BYTE], [recv, (recv_counts, rd), MPI.BYTE])
        self.stats.bytes_sent += sum(send_counts)
        self.stats.bytes_received += sum(recv_counts)
        self.stats.rounds += 1
        for s in range(size):
            if s == me:
                continue
            pos = rd[s]
            for j, _k, inter in pieces(s, me):
                out = outputs[j]
                n = nbytes(mine[j][0], inter)
                out[inter.relative_to(mine[j][1])] = recv[pos:pos + n].view(out.dtype).reshape(inter.shape)
                pos += n
        return outputs
