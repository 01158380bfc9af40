"""Which format a file is in, and whether a file that no format recognises is a damaged checkpoint.

Local, serial (one process reads a few KiB of the file; no MPI): :func:`detect_backend` for opening a checkpoint,
:func:`looks_like_checkpoint` for scanning a directory cheaply, :func:`not_ckptio` for a file in a backend's
container format (HDF5, netCDF) that lacks ckptio's structures.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from typing import BinaryIO

from ckptio.backends import registry
from ckptio.backends.base import Backend, CheckpointError, CorruptCheckpointError, UnknownFormatError

from ckptio.pathcheck import unfollowable

SNIFF_BYTES = 512  # what detect_backend reads first
DOCUMENT_SCAN_BYTES = 64 << 20  # how much of a file's tail a damaged-checkpoint diagnosis searches
# The start of every ckptio metadata document's backend fields (ckptio.model.meta.dumps: sorted keys, compact);
# no other file has these bytes, in particular not a random one.
_DOCUMENT_MARKER = re.compile(rb'"backend":"([A-Za-z0-9_]{1,32})","backend_format_version":[0-9]{1,9},"byteorder":"')


def detect_backend(path: str, thorough: bool | None = None) -> Backend:
    """Find the backend of an existing file from its leading bytes.

    When no backend recognises them, the file is still reported as a DAMAGED checkpoint
    (:class:`CorruptCheckpointError`, naming the likely format) rather than "not a checkpoint"
    (:class:`UnknownFormatError`) when the evidence says it is one (:func:`damaged_checkpoint`): the leading
    bytes are a signature ckptio writes with at most 1 bit in 4 bytes flipped, or a format's own evidence
    survives (the native completion mark at the end of the file), or the file holds a ckptio metadata
    document (searched in its last :data:`DOCUMENT_SCAN_BYTES`). An empty file, a random one or any other
    format has none of these and stays UnknownFormatError.

    Cost: the first 512 and the last 64 bytes, except for the document search, which reads up to 64 MiB: it
    runs when ``thorough`` is True (``ckptio inspect``: one file, a diagnosis), and by default (None) only when
    the leading bytes are all zeros (a zeroed or overwritten header, the common damage), so that scanning a
    directory of other files (``latest()``) reads a few KiB of each. Only regular files are read: a FIFO, socket
    or device is UnknownFormatError without being opened for reading (opening a FIFO would block). Raises
    OSError when the file cannot be read (IsADirectoryError for a directory).
    """
    with _open_regular(path) as f:
        head = f.read(SNIFF_BYTES)
        for cls in registry.classes():
            if cls.sniff(head):
                return cls()
        scan = thorough if thorough is not None else not head.strip(b"\0")
        damage = damaged_checkpoint(f, head, scan_document=scan)
    if damage is not None:
        name, why = damage
        exc = CorruptCheckpointError(f"{path}: damaged checkpoint, probably {name} format: {why}")
        exc.backend = name  # type: ignore[attr-defined]  # for ckptio inspect's "format" field
        raise exc
    raise UnknownFormatError(
        f"{path}: not a ckptio checkpoint in any known format (leading bytes {head[:8]!r}; "
        f"known backends: {', '.join(registry.known_backends())})"
    )


def looks_like_checkpoint(path: str) -> bool:
    """Cheap (one ``open``, a 512-byte read, at most one 64-byte read; no exception): could ``path`` be a ckptio
    checkpoint, complete or damaged? False for files that are plainly something else (a log, another
    format, random bytes, a FIFO, a directory), which a directory scan can skip without a warning; True for
    everything :func:`detect_backend` might accept or diagnose as damaged by default."""
    try:
        with _open_regular(path) as f:
            head = f.read(SNIFF_BYTES)
            if any(cls.sniff(head) for cls in registry.classes()) or not head.strip(b"\0"):
                return bool(head) or os.fstat(f.fileno()).st_size > 0
            return damaged_checkpoint(f, head, scan_document=False) is not None
    except (OSError, CheckpointError):
        return False


def file_kind(mode: int) -> str:
    """What a non-regular file is, for messages."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def _open_regular(path: str) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file: O_NONBLOCK, so that a FIFO cannot block the open, and
    the type checked on the open descriptor (no race with a rename). UnknownFormatError for a FIFO, socket or
    device; IsADirectoryError for a directory; OSError when it cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:  # a dangling symlink or a symlink loop: say so (pathcheck)
        raise unfollowable(path, exc) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(mode):
            raise UnknownFormatError(f"{path}: not a ckptio checkpoint: it is {file_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _bit_flips(a: bytes, b: bytes) -> int:
    return sum(bin(x ^ y).count("1") for x, y in zip(a, b, strict=True))


def damaged_checkpoint(f: BinaryIO, head: bytes, scan_document: bool = True) -> tuple[str, str] | None:
    """``(backend name, evidence)`` if the open file ``f``, whose leading bytes ``head`` no backend
    recognised, is a damaged ckptio checkpoint; None when nothing says it is one (see :func:`detect_backend`).
    ``scan_document``: also search the file's tail for a metadata document (up to 64 MiB read)."""
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        return None
    for cls in registry.classes():
        sig = cls.signature
        if sig and len(head) >= len(sig):
            flips = _bit_flips(head[:len(sig)], sig)
            if flips <= max(1, len(sig) // 4):
                return cls.name, (f"its signature is damaged (leading bytes {head[:len(sig)]!r}, {flips} bit(s) "
                                  f"from the {cls.name} signature {sig!r})")
    for cls in registry.classes():
        why = cls.damaged_evidence(f, size)
        if why:
            return cls.name, f"its signature is missing (leading bytes {head[:8]!r}), but {why}"
    found = _find_document(f, size) if scan_document else None
    if found is not None:
        name, offset = found
        return name, (f"its signature is missing (leading bytes {head[:8]!r}), but it holds a ckptio metadata "
                      f"document (at byte {offset})")
    return None


def not_ckptio(path: str, backend: str, why: str) -> CheckpointError:
    """The error for a file in a backend's container format (an HDF5 or netCDF file) that lacks ckptio's own
    structures (``why``): UnknownFormatError ("not a ckptio checkpoint", ``inspect`` exit 2) for a file some
    other program wrote, but CorruptCheckpointError when a ckptio metadata document in the file shows it is a
    damaged checkpoint (a damaged group link or variable name). Reads up to :data:`DOCUMENT_SCAN_BYTES`."""
    try:
        with open(path, "rb") as f:
            found = _find_document(f, os.fstat(f.fileno()).st_size)
    except OSError:
        found = None
    if found is not None:
        exc = CorruptCheckpointError(f"{path}: damaged checkpoint: {why}, but it holds a ckptio metadata document "
                                     f"(at byte {found[1]})")
        exc.backend = backend  # type: ignore[attr-defined]
        return exc
    return UnknownFormatError(f"{path}: {why}: not a ckptio checkpoint")


def _find_document(f: BinaryIO, size: int) -> tuple[str, int] | None:
    """The backend named by a ckptio metadata document in the last DOCUMENT_SCAN_BYTES of the file, and where."""
    chunk, overlap = 1 << 20, 256
    end = size
    while end > 0 and size - end < DOCUMENT_SCAN_BYTES:
        start = max(0, end - chunk)
        f.seek(start)
        data = f.read(min(end + overlap, size) - start)
        matches = list(_DOCUMENT_MARKER.finditer(data))
        if matches:  # the last one: a document lies near the end of its file
            return matches[-1].group(1).decode(), start + matches[-1].start()
        end = start
    return None
