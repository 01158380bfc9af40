"""A staged checkpoint's files on its stage (see :mod:`ckptio.tiers.staging`): where they are named
(:func:`key_dir`, :func:`checkpoint_dir`), each rank's piece (a data file and its JSON manifest, written and read
back with every block's checksum) and the marker of a drained copy. Local: every function touches only the files
of the calling rank (or of its node), no MPI call is made."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ckptio.errors import CheckpointIOError, CorruptCheckpointError
from ckptio.model import meta as metamod
from ckptio.model.stage_manifest import StagedBlock, StageManifest

_TOKEN_RE = re.compile(r"^\d{20}-[0-9a-f]{8}$")
_DRAINED = "drained"  # marker in a staged checkpoint's directory: its final copy committed
_CHUNK = 8 << 20  # bytes checksummed and written at a time


# ------------------------------------------------------------------------------------------------- naming
def key_dir(stage_dir: str, final_path: str) -> str:
    """The stage directory of every checkpoint whose final directory is ``dirname(final_path)``: named by that
    directory and a hash of its absolute path, so runs writing elsewhere never share it."""
    final_dir = os.path.dirname(os.path.abspath(final_path))
    digest = hashlib.sha256(final_dir.encode()).hexdigest()[:16]
    tail = re.sub(r"[^A-Za-z0-9_.+-]", "_", os.path.basename(final_dir))[:40] or "root"
    return os.path.join(stage_dir, f"{tail}-{digest}")


def checkpoint_dir(stage_dir: str, final_path: str, token: str) -> str:
    """Where the pieces of one staged checkpoint (one ``close()``, identified by ``token``) are."""
    return os.path.join(key_dir(stage_dir, final_path), os.path.basename(final_path), token)


def new_token() -> str:
    """A checkpoint's token: time of staging then random digits, so tokens sort by staging time."""
    return f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"


def piece_names(rank: int, nprocs: int) -> tuple[str, str]:
    """A rank's piece files in a staged checkpoint's directory: (data file, manifest)."""
    base = f"rank-{rank:06d}-of-{nprocs:06d}"
    return base + ".data", base + ".json"


# --------------------------------------------------------------------------------------------- pieces
def write_piece(directory: str, header: StageManifest, blocks: Sequence[tuple[StagedBlock, np.ndarray]],
                spare: str | None = None) -> int:
    """Local: write this rank's blocks (C-contiguous arrays with their declarations; each block's checksum is
    computed on the way, chunk by chunk while the chunk is in cache) and then its manifest, ``header`` with the
    blocks as written (atomically, by rename: a piece without a manifest does not exist). ``spare``: a data file
    of an older, drained piece of this rank (:func:`spare_data_file`), overwritten in place instead of allocating
    new pages. Returns the bytes written."""
    os.makedirs(directory, exist_ok=True)
    data_name, manifest_name = piece_names(header.rank, header.nprocs)
    data_path = os.path.join(directory, data_name)
    flags = os.O_WRONLY | os.O_CREAT
    if spare is not None:
        try:
            os.rename(spare, data_path)
        except OSError:
            flags |= os.O_TRUNC
    else:
        flags |= os.O_TRUNC
    try:
        return _write_piece_files(directory, data_path, manifest_name, flags, header, blocks)
    except BaseException:  # a full stage or an interrupt: leave nothing of this piece (it would fill the stage
        for path in (data_path, os.path.join(directory, f".{manifest_name}.tmp")):  # for every later checkpoint)
            remove_if_there(path)
        raise


def remove_piece(directory: str, rank: int, nprocs: int) -> None:
    """Local: remove this rank's piece (data file and manifest) of a staged checkpoint that failed collectively,
    and the checkpoint's directories once empty, so a full stage does not stay full for the next checkpoint."""
    for name in piece_names(rank, nprocs):
        remove_if_there(os.path.join(directory, name))
    for path in (directory, os.path.dirname(directory)):
        try:
            os.rmdir(path)
        except OSError:  # not empty (another rank's piece on a shared stage, or another token) or gone
            break


def remove_if_there(path: str) -> None:
    """Local: remove the file ``path`` if it exists. A path under something that is not a directory (a stray file
    where the stage keeps a directory) does not exist either: the cleanup after a failed step must never replace
    that step's agreed error with its own (an outside trial got a bare NotADirectoryError on two ranks only)."""
    try:
        os.unlink(path)
    except (FileNotFoundError, NotADirectoryError):
        pass


@contextlib.contextmanager
def naming(path: str) -> Iterator[None]:
    """Local: an ``OSError`` raised inside without a file name (``os.write``/``os.pwrite`` on a descriptor) gets
    ``path``: a bare "No space left on device" from one node's full stage did not say which file (issue 28)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = path
        raise


def _write_piece_files(directory: str, data_path: str, manifest_name: str, flags: int, header: StageManifest,
                       blocks: Sequence[tuple[StagedBlock, np.ndarray]]) -> int:
    """Local: :func:`write_piece`'s data file, then its manifest (atomically); returns the bytes written."""
    entries, pos = [], 0
    fd = os.open(data_path, flags, 0o644)
    try:
        with naming(data_path):
            for block, array in blocks:
                view = memoryview(array.reshape(-1).view(np.uint8)) if array.size else memoryview(b"")
                digest = metamod.StreamingChecksum()
                done = 0
                while done < len(view):
                    chunk = view[done:done + _CHUNK]
                    digest.update(chunk)
                    written = 0
                    while written < len(chunk):
                        written += os.write(fd, chunk[written:])
                    done += len(chunk)
                entries.append(block.stored(pos, len(view), digest.hexdigest()))
                pos += len(view)
            os.ftruncate(fd, pos)
    finally:
        os.close(fd)
    tmp = os.path.join(directory, f".{manifest_name}.tmp")
    with open(tmp, "w") as f, naming(tmp):
        json.dump(dataclasses.replace(header, blocks=tuple(entries)).to_json(), f)
    os.replace(tmp, os.path.join(directory, manifest_name))
    return pos


def family_of(final_path: str, family: Callable[[str], bool] | None) -> Callable[[str], bool]:
    """Local: which staged checkpoint names are of ``final_path``'s family: those ``family`` accepts (a Series:
    its name pattern), else ``final_path``'s own name only."""
    if family is not None:
        return family
    own = os.path.basename(final_path)
    return lambda name: name == own


def spare_data_file(stage_dir: str, final_path: str, rank: int, nprocs: int,
                    family: Callable[[str], bool] | None = None) -> str | None:
    """Local: this rank's data file of a staged checkpoint of the same family (the names ``family`` accepts, else
    ``final_path``'s own name, as :func:`ckptio.tiers.staging.retain` takes them) whose drain committed (marked
    by retain), to be reused by the next :func:`write_piece` (writing into existing tmpfs pages is about twice as
    fast as allocating new ones). Its manifest is removed first, so that piece is never taken for valid again.
    None when there is none."""
    same = family_of(final_path, family)
    data_name, manifest_name = piece_names(rank, nprocs)
    for name, _tok, path in staged_copies(key_dir(stage_dir, final_path)):
        if same(name) and os.path.exists(os.path.join(path, _DRAINED)) and os.path.exists(
                os.path.join(path, data_name)):
            try:
                os.unlink(os.path.join(path, manifest_name))
            except FileNotFoundError:
                pass
            return os.path.join(path, data_name)
    return None


def read_piece(directory: str, rank: int, nprocs: int, final_path: str,
               verify: bool = True) -> tuple[StageManifest, list[np.ndarray]]:
    """Local: this rank's piece of a staged checkpoint, every checksum verified (arrays map the file: no copy).

    Raises CheckpointIOError when the piece is missing or belongs to another checkpoint (final path, rank
    count), CorruptCheckpointError when its manifest is damaged or a block does not match its checksum."""
    data_name, manifest_name = piece_names(rank, nprocs)
    where = os.path.join(directory, manifest_name)
    manifest = read_manifest(where)
    if manifest.final != os.path.abspath(final_path) or manifest.nprocs != nprocs or manifest.rank != rank:
        raise CheckpointIOError(f"staged piece {where} belongs to {manifest.final} written by "
                                f"{manifest.nprocs} ranks, not to {os.path.abspath(final_path)} on {nprocs}")
    size = manifest.data_bytes
    data_path = os.path.join(directory, data_name)
    try:
        actual = os.path.getsize(data_path)
    except OSError as exc:
        raise CheckpointIOError(f"staged piece {data_path}: {exc.strerror}") from None
    if actual != size or any(b.data_offset + b.nbytes > size for b in manifest.blocks):
        raise CorruptCheckpointError(f"staged piece {data_path}: {actual} bytes, its manifest says {size}")
    raw = np.memmap(data_path, np.uint8, "r") if size else np.empty(0, np.uint8)
    arrays = []
    for b in manifest.blocks:
        chunk = raw[b.data_offset:b.data_offset + b.nbytes]
        if verify and metamod.checksum(chunk if b.nbytes else b"") != b.checksum:
            raise CorruptCheckpointError(f"staged piece {data_path}: variable {b.name!r} does not match "
                                         f"its checksum (on {host_name()})")
        arrays.append(chunk.view(np.dtype(b.dtype)).reshape(b.array_shape))
    return manifest, arrays


def read_manifest(where: str) -> StageManifest:
    """Local: the piece manifest at ``where``. CheckpointIOError when it is missing, CorruptCheckpointError
    naming what is wrong when it is not a readable stage manifest of this version."""
    try:
        with open(where) as f:
            return StageManifest.from_json(json.load(f))
    except FileNotFoundError:
        raise CheckpointIOError(f"staged piece {where} is missing (on {host_name()})") from None
    except (OSError, ValueError) as exc:
        raise CorruptCheckpointError(f"staged piece {where}: unreadable manifest: {exc}") from None


def host_name() -> str:
    from ckptio.coord.mpi import MPI

    return MPI.Get_processor_name()


# -------------------------------------------------------------------------------------- drained markers
def mark_drained(directory: str, final_path: str) -> None:
    """Local: record in a staged checkpoint's directory that it was drained, and to which file (atomically:
    several ranks of a node may write the same marker)."""
    tmp = os.path.join(directory, f".{_DRAINED}.{uuid.uuid4().hex[:8]}")
    with open(tmp, "w") as f:
        json.dump(file_identity(os.stat(final_path)), f)
    os.replace(tmp, os.path.join(directory, _DRAINED))


def file_identity(st: os.stat_result) -> dict[str, int]:
    """What identifies the final file a staged copy was drained to (a later write of that name differs)."""
    return {"ino": st.st_ino, "mtime_ns": st.st_mtime_ns, "size": st.st_size}


def drained_identity(directory: str) -> dict[str, int] | None:
    """Local: the identity of the final file a staged checkpoint was drained to, or None if not drained."""
    try:
        with open(os.path.join(directory, _DRAINED)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def staged_copies(base: str) -> list[tuple[str, str, str]]:
    """(checkpoint name, token, directory) of every staged checkpoint under one key directory."""
    out = []
    try:
        names = os.listdir(base)
    except (FileNotFoundError, NotADirectoryError):  # a stray file there holds no staged checkpoint (and stays)
        return out
    for name in names:
        try:
            tokens = os.listdir(os.path.join(base, name))
        except (NotADirectoryError, FileNotFoundError):
            continue
        out += [(name, tok, os.path.join(base, name, tok)) for tok in tokens if _TOKEN_RE.match(tok)]
    return out
