"""Exception hierarchy.

Every error ckptio raises derives from :class:`CheckpointError`; the subclasses also derive from the matching
built-in so that ``except ValueError`` in user code keeps working (the zarr / h5py convention).

Errors raised inside a collective phase are turned into the same exception on every rank by
:mod:`ckptio.coord`; the message names the variable, the rank(s) and the cause.
"""

from __future__ import annotations


class CheckpointError(Exception):
    """Base class of every ckptio error."""


class DeclarationError(CheckpointError, ValueError):
    """A rank declared something inconsistent: shape, dtype, overlap, coverage, name, attrs."""


class CorruptCheckpointError(CheckpointError, ValueError):
    """The checkpoint's bytes do not match what its index says (checksum, header, index, trailer)."""


class IncompleteCheckpointError(CheckpointError, OSError):
    """The checkpoint was never committed (no completion mark) or is truncated."""


class RewrittenCheckpointError(CheckpointError, ValueError):
    """The file was a complete ckptio checkpoint, but another tool rewrote it since (``h5repack``, ``nccopy``,
    a netCDF attribute added with ``ncatted`` that grew the header): its metadata document is intact, but the
    variables are no longer where the document says, so ckptio cannot read or verify them. Not damage: the
    values are probably intact (``h5dump``/``ncdump`` show them); the original file, or ``ckptio convert`` of
    it, is the checkpoint."""


class FormatVersionError(CheckpointError, ValueError):
    """The file was written in a format version this ckptio does not understand."""


class UnknownFormatError(CheckpointError, ValueError):
    """The file is not a checkpoint of any registered backend."""


class CapabilityError(CheckpointError, NotImplementedError):
    """The chosen backend does not offer the requested feature (e.g. compression)."""


class ReadRequestError(CheckpointError, KeyError):
    """A read asked for a variable that does not exist or a hyperslab outside its shape."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class ClosedCheckpointError(CheckpointError, ValueError):
    """A Writer or Reader was used after its ``close()`` (like ``ValueError: I/O operation on closed file``)."""


class CheckpointIOError(CheckpointError, OSError):
    """The file system refused an operation (full disk, permissions, missing directory)."""


class CheckpointNotFoundError(CheckpointIOError, FileNotFoundError):
    """The checkpoint (or a file it needs) does not exist: also a :class:`FileNotFoundError`, so
    ``except FileNotFoundError`` works for ``ckptio.open("missing")`` on one rank as on many. Raised on every
    rank (as ``CollectiveCheckpointNotFoundError``) when the ranks that failed all failed because a file was
    missing."""


class CollectiveError(CheckpointError):
    """One or more ranks failed inside a collective phase; raised identically on every rank.

    ``failures`` maps rank -> (exception class name, message[, host]): the host (the node the rank ran on) is
    named at the end of the rank's line, because a node-local resource (a full stage, a missing mount) fails on
    one node only and the rank number alone does not say which. The class raised is also a subclass of the
    most specific ckptio error seen on any rank (see :func:`collective_error_class`), so
    ``except CorruptCheckpointError`` works on every rank, whichever rank saw the corruption.

    ``planner``: the rank that checks and plans what every rank declared (``coord.gather_and_plan``'s root), when
    the failure is its finding about them (a :class:`DeclarationError`: an overlap between the blocks of ranks 1
    and 2 is found on rank 0, but is neither rank 0's fault nor its node's): the message says so instead of
    "failed on 1 rank(s): rank 0", without a host.
    """

    def __init__(self, phase: str, failures: dict[int, tuple[str, ...]], planner: int | None = None):
        self.phase = phase
        self.failures = dict(failures)
        self.planner = planner if list(failures) == [planner] else None
        if self.planner is not None:
            cls, msg, *_host = failures[planner]
            lines = [f"{phase} failed: rank {planner}, which checks and plans for every rank, found:",
                     f"  {cls}: {msg}"]
        else:
            lines = [f"{phase} failed on {len(failures)} rank(s):"]
            for rank in sorted(failures)[:16]:
                cls, msg, *host = failures[rank]
                msg = msg.removesuffix(f" (on rank {rank})")  # a local error naming its rank: the line does
                lines.append(f"  rank {rank}: {cls}: {msg}" + (f" (on {host[0]})" if host and host[0] else ""))
            if len(failures) > 16:
                lines.append(f"  ... and {len(failures) - 16} more rank(s)")
        self.message = "\n".join(lines)
        Exception.__init__(self, self.message)
        self.args = (self.message,)

    def __str__(self) -> str:
        return self.message


_SPECIFIC: tuple[type[CheckpointError], ...] = (
    CorruptCheckpointError,
    IncompleteCheckpointError,
    RewrittenCheckpointError,
    FormatVersionError,
    UnknownFormatError,
    ReadRequestError,
    DeclarationError,
    CapabilityError,
    ClosedCheckpointError,
    CheckpointNotFoundError,
    CheckpointIOError,
)
_OS_ERROR_NAMES = {"OSError", "PermissionError", "FileNotFoundError", "IsADirectoryError",
                   "NotADirectoryError", "FileExistsError", "Exception"}
_SUBCLASS_CACHE: dict[type, type[CollectiveError]] = {}


def collective_error_class(class_names: list[str]) -> type[CollectiveError]:
    """The CollectiveError subclass to raise for failures whose exception classes are ``class_names``.

    Picks the most specific ckptio error among them (corruption first, then incompleteness, ...); a missing file
    (only ``FileNotFoundError`` among the OS errors) maps to :class:`CheckpointNotFoundError` (also a
    ``FileNotFoundError``), other OS errors (full disk, permissions) to :class:`CheckpointIOError`, and MPI
    errors (``mpi4py.MPI.Exception``, whose class is named ``Exception``) too, because MPI-IO reports
    file-system failures that way.
    """
    names = set(class_names)
    for cls in _SPECIFIC:
        if cls.__name__ in names or f"Collective{cls.__name__}" in names:
            return _subclass(cls)
    if names & _OS_ERROR_NAMES == {"FileNotFoundError"}:  # only missing files: still a FileNotFoundError
        return _subclass(CheckpointNotFoundError)
    if names & _OS_ERROR_NAMES:
        return _subclass(CheckpointIOError)
    return CollectiveError


def _subclass(base: type[CheckpointError]) -> type[CollectiveError]:
    if base not in _SUBCLASS_CACHE:
        _SUBCLASS_CACHE[base] = type(f"Collective{base.__name__}", (CollectiveError, base), {})
    return _SUBCLASS_CACHE[base]
