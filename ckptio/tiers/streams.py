"""A node's staged files as one byte stream, for the redundancy exchange (:mod:`ckptio.tiers.redundancy`): read
(:class:`Concat`) and written back (:class:`Spill`, under temporary names until every manifest matches its
recorded xxh3). Local: no MPI, only the files of the calling rank's node."""

from __future__ import annotations

import os
import uuid
from typing import Any

import numpy as np

from ckptio.errors import CheckpointIOError, CorruptCheckpointError
from ckptio.model import meta as metamod
from ckptio.tiers.stage_files import naming, piece_names, remove_if_there


def own_files(directory: str, rank: int, nprocs: int) -> list[tuple[str, int, str | None]]:
    """Local: this rank's piece files in stream order: ``[data name, size, None], [manifest name, size, xxh3]``."""
    data, manifest = piece_names(rank, nprocs)
    with open(os.path.join(directory, manifest), "rb") as f:
        text = f.read()
    return [(data, os.path.getsize(os.path.join(directory, data)), None), (manifest, len(text), metamod.checksum(text))]


def pwrite_all(path: str, data: np.ndarray, offset: int) -> None:
    """Local: every byte of ``data`` at ``offset`` of the existing file ``path`` (named in any error: a full stage
    fails on one node); ``pwrite`` may write fewer bytes than asked (a filling tmpfs) without raising."""
    view = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))
    fd = os.open(path, os.O_WRONLY)
    try:
        with naming(path):
            done = 0
            while done < len(view):
                n = os.pwrite(fd, view[done:], offset + done)
                if n <= 0:
                    raise CheckpointIOError(f"{path}: short write: {done} of {len(view)} bytes at offset {offset}")
                done += n
    finally:
        os.close(fd)


class Concat:
    """Local: a node's files read as one byte stream (zeros past the end)."""

    def __init__(self, directory: str, files: Any):
        self.parts = []
        start = 0
        for name, size, _ in files:
            self.parts.append((os.path.join(directory, name), start, size))
            start += size
        self.size = start

    def read(self, offset: int, count: int) -> np.ndarray:
        out = np.zeros(count, np.uint8)
        for path, start, size in self.parts:
            lo, hi = max(offset, start), min(offset + count, start + size)
            if lo < hi:
                with open(path, "rb") as f:
                    f.seek(lo - start)
                    got = f.read(hi - lo)
                if len(got) != hi - lo:
                    raise CheckpointIOError(f"{path}: shorter than recorded ({start + size - lo} bytes expected)")
                out[lo - offset:hi - offset] = np.frombuffer(got, np.uint8)
        return out


class Spill:
    """Local: a node's files written from one byte stream, under temporary names until :meth:`finish`."""

    def __init__(self, directory: str, files: Any, temporary: bool):
        os.makedirs(directory, exist_ok=True)
        self.files = list(files)
        self.directory = directory
        self.prefix = f".rebuild-{uuid.uuid4().hex[:8]}-" if temporary else ""
        self.parts = []
        start = 0
        for name, size, _ in self.files:
            path = os.path.join(directory, self.prefix + name)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
            self.parts.append((path, start, size))
            start += size
        self.size = start

    def write(self, offset: int, data: np.ndarray) -> None:
        for path, start, size in self.parts:
            lo, hi = max(offset, start), min(offset + len(data), start + size)
            if lo < hi:
                pwrite_all(path, data[lo - offset:hi - offset], lo - start)

    def finish(self) -> None:
        """Check every manifest against its recorded xxh3, then rename the files to their names (data first)."""
        for (name, _size, digest), (path, _s, _n) in zip(self.files, self.parts, strict=True):
            if digest is not None:
                with open(path, "rb") as f:
                    if metamod.checksum(f.read()) != digest:
                        raise CorruptCheckpointError(f"rebuilt {name} does not match its recorded checksum")
        for (name, _size, _d), (path, _s, _n) in zip(self.files, self.parts, strict=True):
            if self.prefix:
                os.replace(path, os.path.join(self.directory, name))

    def discard(self) -> None:
        if self.prefix:
            for path, _s, _n in self.parts:
                remove_if_there(path)
