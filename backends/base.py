"""The storage-backend interface, in one place (the zarr v3 pattern: small abstract classes, a registry).

A backend knows one file format. It does not decide decomposition, aggregation or validation: the API layer
hands it a validated plan (:class:`ckptio.plan.VariablePlan` per variable), the rank's blocks already in C
order, and the metadata document to store; for restart it describes where the data lies as
:class:`ckptio.plan.Extent` objects and reads lists of extents on the aggregator ranks.

Which ranks call what:

=================================  =========================================================
``sniff``, ``extents``             any rank, pure
``read_metadata``, ``verify_file`` one rank, serial file access (rank 0, or ``ckptio inspect``)
``create`` / ``WriteSession.*``    collective over the writing communicator (``abort``: local)
``open_extent_reader`` / ``read``  collective over the aggregators' sub-communicator
=================================  =========================================================

To add a backend: subclass :class:`Backend` in one module under ``backends/``, decorate it with
:func:`register`, and import the module in ``backends/__init__.py``.
"""

from __future__ import annotations

import abc
import errno
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, ClassVar

import numpy as np

from ckptio.errors import CapabilityError, CheckpointError, CorruptCheckpointError, UnknownFormatError
from ckptio.pathcheck import unfollowable
from ckptio.plan import BlockPlan, Extent, VariablePlan

if TYPE_CHECKING:
    from ckptio.extent_table import ExtentTable


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; the API refuses requests beyond them with :class:`CapabilityError`."""

    compression: bool = False
    segments: bool = True
    complex_dtypes: bool = True
    bool_dtype: bool = True
    unsigned_dtypes: bool = True
    float16: bool = True
    nonblocking: bool = False
    readable_by: tuple[str, ...] = ()


@dataclass
class WrittenBlock:
    """What the backend reports back for one written block (goes into the block table)."""

    file_offset: int | None
    stored_nbytes: int
    codec: str | None = None


class WriteSession(abc.ABC):
    """An open checkpoint file being written. Collective methods are entered by every rank in order."""

    @abc.abstractmethod
    def write_blocks(self, blocks: Sequence[tuple[BlockPlan, np.ndarray]]) -> list[WrittenBlock]:
        """Collective: write this rank's blocks (C-contiguous arrays, any count including zero)."""

    def data_ranges(self) -> list[tuple[int, int]]:
        """Local, on rank 0 right after :meth:`Backend.create`: the byte ranges ``[start, end)`` of the file
        that :meth:`write_blocks` and the format's own structures so far will occupy (everything before the
        index or metadata document). The writer reserves them (``fallocate``) before :meth:`write_blocks`, so
        a full file system is one clean error instead of a failed collective write; :meth:`commit` reserves
        the rest itself once its size is known. Default: nothing is reserved."""
        return []

    @abc.abstractmethod
    def effective_hints(self) -> dict[str, str]:
        """Local: the hints the MPI library reports for the open file."""

    def storage_info(self) -> dict[str, dict[str, Any]]:
        """Local, on rank 0 after :meth:`write_blocks`: per variable, how the format stores it (e.g. the file
        offset of an HDF5 dataset), stored as ``meta["variables"][name]["storage"]``. Default: nothing."""
        return {}

    @abc.abstractmethod
    def commit(self, meta: Mapping[str, Any] | None) -> None:
        """Collective: check that the data landed (``rawio.check_data_landed``: no holes where data was written),
        reserve the space the rest of the file needs (``rawio.reserve_collectively``), store the metadata
        document, sync, write the completion mark last, sync, close. ``meta`` is the document on rank 0 and None
        on every other rank (the document grows with the job; a format that needs some of it on every rank, such
        as its length, broadcasts that itself)."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Best-effort: release the file after a failure (the file is discarded). Called by every rank after a
        failure they agreed on; local unless closing the format's file is collective (HDF5, PnetCDF)."""


class ExtentReader(abc.ABC):
    """The checkpoint opened by the aggregators only."""

    #: True if :meth:`read` is local (no MPI: safe in a helper thread while the caller's thread uses MPI) and the
    #: arrays it returns for one ``slot`` stay valid until the next read into that slot: the restart then reads
    #: round k+1 into one slot while round k, in the other, is exchanged. False: collective, one slot.
    independent: ClassVar[bool] = False

    @abc.abstractmethod
    def read(self, extents: Sequence[Extent], slot: int = 0) -> tuple[list[np.ndarray], int]:
        """Collective over the aggregators unless :attr:`independent`: read these extents (in file order) into
        buffer ``slot``; return one array per extent, shaped like its box, in native byte order (valid until
        the next read into the same slot), and the number of file read calls issued."""

    @abc.abstractmethod
    def close(self) -> None:
        """Collective over the aggregators."""


class Backend(abc.ABC):
    name: ClassVar[str]
    format_version: ClassVar[int]
    capabilities: ClassVar[Capabilities]
    extra_hints: ClassVar[dict[str, str]] = {}  # hints this format adds unless the user set them
    signature: ClassVar[bytes] = b""  # the leading bytes of every file this backend writes

    @classmethod
    @abc.abstractmethod
    def sniff(cls, head: bytes) -> bool:
        """True if a file starting with ``head`` (first 512 bytes) is in this backend's format."""

    @classmethod
    def write_problem(cls) -> str | None:
        """Why this process cannot WRITE this format (a library is missing: its name and how to install it), or
        None. Reading never needs more than ckptio itself (the raw extent reader, the built-in parsers), so a
        missing library never makes a good checkpoint unreadable or "corrupt". Local, cheap."""
        return None

    @classmethod
    def require_writable(cls) -> None:
        """Raise CapabilityError naming the missing library and its install command (see :meth:`write_problem`);
        the backends call it first in :meth:`create`, which every rank enters."""
        problem = cls.write_problem()
        if problem is not None:
            raise CapabilityError(f"backend {cls.name!r} cannot write here: {problem}")

    @classmethod
    def damaged_evidence(cls, f: BinaryIO, size: int) -> str | None:
        """For a file of ``size`` bytes that no backend sniffed: what in it (other than the leading bytes)
        proves it is a checkpoint of this format, as a phrase for the message; None if nothing does.
        Default: no format-specific evidence (the metadata document search of :func:`detect_backend` applies
        to every backend)."""
        return None

    def check_dtype(self, name: str, dtype: np.dtype) -> None:
        """Raise CapabilityError if this format cannot store ``dtype``."""
        caps = self.capabilities
        bad = (
            (dtype.kind == "c" and not caps.complex_dtypes)
            or (dtype.kind == "b" and not caps.bool_dtype)
            or (dtype.kind == "f" and dtype.itemsize == 2 and not caps.float16)
            or (dtype.kind == "u" and not caps.unsigned_dtypes)
        )
        if bad:
            raise CapabilityError(f"variable {name!r}: backend {self.name!r} cannot store dtype {dtype}")

    def check_attr(self, name: str, value: Any) -> None:
        """Local, at declaration time (``ckptio.create(attrs=)``, ``set_attr``): raise CapabilityError naming
        the attribute if this format cannot store ``value`` (a normalized, JSON-compatible value), so the
        writer refuses it before any data is written. Default: every JSON-compatible value is storable (the
        native format keeps attributes in its JSON index)."""
        return None

    def layout(self, variables: Mapping[str, VariablePlan], stripe_unit: int, nprocs: int) -> dict[str, Any]:
        """Pure, on the coordinator: backend-specific placement (e.g. file offsets of blocks). Default: none.
        The coordinator's session gets the whole layout; every other rank only its :meth:`layout_shares` entry."""
        return {}

    def layout_shares(self, layout: Mapping[str, Any], nprocs: int) -> list[dict[str, Any]]:
        """Pure, on the coordinator: the part of ``layout`` each rank needs (what the writer sends it). Default:
        the whole layout to everyone, so a backend whose layout grows with the job must override this."""
        return [dict(layout)] * nprocs

    @abc.abstractmethod
    def create(self, path: str, comm, info, variables: Mapping[str, VariablePlan], layout: Mapping[str, Any],
               options: Mapping[str, Any]) -> WriteSession:
        """Collective: create the file at ``path`` (a temporary name) with the MPI hints in ``info``.

        ``variables`` is the whole plan on the coordinator (rank 0) and only this rank's own blocks elsewhere
        (:attr:`VariablePlan.total_blocks` counts every rank's); ``layout`` is whole on rank 0 and this rank's
        :meth:`layout_shares` entry elsewhere. Nothing a rank receives grows with the number of ranks."""

    @abc.abstractmethod
    def read_metadata(self, path: str) -> dict[str, Any]:
        """Serial: the metadata document. Raises IncompleteCheckpointError (no completion mark, truncated)
        or CorruptCheckpointError (damaged index or header)."""

    @abc.abstractmethod
    def extents(self, meta: Mapping[str, Any]) -> list[Extent]:
        """Pure: where every variable's bytes lie, as extents sorted by file offset."""

    def extent_table(self, meta: Mapping[str, Any]) -> ExtentTable:
        """Pure: :meth:`extents` as columns (:class:`ckptio.extent_table.ExtentTable`), what the restart planner
        partitions. The default converts the list; a backend overrides it with a vectorized builder."""
        from ckptio import extent_table

        return extent_table.from_extents(meta, self.extents(meta))

    @abc.abstractmethod
    def open_extent_reader(self, path: str, comm, info, meta: Mapping[str, Any]) -> ExtentReader:
        """Collective over ``comm`` (the aggregators): open the file for reading."""

    def serial_extent_reader(self, path: str, meta: Mapping[str, Any]) -> ExtentReader:
        """An extent reader for one process (``inspect --verify``); default: MPI over COMM_SELF."""
        from mpi4py import MPI

        return self.open_extent_reader(path, MPI.COMM_SELF, None, meta)


_REGISTRY: dict[str, type[Backend]] = {}


def register(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make a backend available by its ``name``."""
    _REGISTRY[cls.name] = cls
    return cls


def get_backend(name: str) -> Backend:
    try:
        return _REGISTRY[name]()
    except KeyError:
        missing = missing_libraries()  # backends whose library did not import, with the reason (no PNETCDF_DIR...)
        available = ", ".join(sorted(_REGISTRY))
        if name in missing:
            raise CapabilityError(f"backend {name!r} is not available in this installation ({missing[name]}); "
                                  f"available: {available}") from None
        raise CapabilityError(f"unknown backend {name!r}; available: {available}") from None


def available_backends() -> list[str]:
    """The backends this process can write (every registered one can be read)."""
    return sorted(name for name, cls in _REGISTRY.items() if cls.write_problem() is None)


def known_backends() -> list[str]:
    """Every registered format: detection and reading work for all of them."""
    return sorted(_REGISTRY)


def missing_libraries() -> dict[str, str]:
    """Backend name -> why it cannot write here (see :meth:`Backend.write_problem`)."""
    return {name: why for name, cls in _REGISTRY.items() if (why := cls.write_problem()) is not None}


SNIFF_BYTES = 512  # what detect_backend reads first
DOCUMENT_SCAN_BYTES = 64 << 20  # how much of a file's tail a damaged-checkpoint diagnosis searches
# The start of every ckptio metadata document's backend fields (ckptio.meta.dumps: sorted keys, compact);
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
        for cls in _REGISTRY.values():
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
        f"known backends: {', '.join(sorted(_REGISTRY))})"
    )


def looks_like_checkpoint(path: str) -> bool:
    """Cheap (one ``open``, a 512-byte read, at most one 64-byte read; no exception): could ``path`` be a ckptio
    checkpoint, complete or damaged? False for files that are plainly something else (a log, another
    format, random bytes, a FIFO, a directory), which a directory scan can skip without a warning; True for
    everything :func:`detect_backend` might accept or diagnose as damaged by default."""
    try:
        with _open_regular(path) as f:
            head = f.read(SNIFF_BYTES)
            if any(cls.sniff(head) for cls in _REGISTRY.values()) or not head.strip(b"\0"):
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
    for cls in _REGISTRY.values():
        sig = cls.signature
        if sig and len(head) >= len(sig):
            flips = _bit_flips(head[:len(sig)], sig)
            if flips <= max(1, len(sig) // 4):
                return cls.name, (f"its signature is damaged (leading bytes {head[:len(sig)]!r}, {flips} bit(s) "
                                  f"from the {cls.name} signature {sig!r})")
    for cls in _REGISTRY.values():
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
