"""The storage contract: what a file format must do for ckptio, and nothing more (issue 24).

A backend knows one file format. It moves bytes and describes them; it never agrees, broadcasts, barriers or
branches on rank 0. The engine (``ckptio.engine``) owns the protocol: it validates and plans the checkpoint,
decides which rank does what, reserves space, runs every step below inside one agreed phase (an exception on any
rank is the same error on every rank, see ``ckptio.coord``) and commits. A backend enters only its own
library's collectives (``MPI_File_open``/``Write_all``, h5py's ``mpio`` driver and collective ``H5Dwrite``,
PnetCDF's ``put_var_all``/``wait_all``), and only inside one of those steps, as torch.distributed.checkpoint's
``StorageWriter`` does inside the planner's steps.

Which ranks call what, in the engine's order (the write side; every "collective" call is made by every rank of
the writing communicator, in the same order)::

   step  call                                               ranks
   ----  -------------------------------------------------  --------------------------------------------------
   1     Backend.check_dtype / check_attr                   each rank, local, while declaring
   2     Backend.place(variables, stripe_unit, nprocs)      the planning rank, pure: file placement + shares
   3     Backend.create(path, comm, info, plan, options)    collective: the library creates the file
   4     WriteHandle.define()                               collective: the format's own structures
   5     WriteHandle.reserved_ranges()                      the planning rank, local: bytes to reserve
   6     WriteHandle.write(blocks, tables)                  collective, as a sequence of steps (below)
   7     WriteHandle.sync()                                 collective
   8     WriteHandle.storage_info(), effective_hints()      the planning rank, local: into the document
   9     WriteHandle.document_slot(slot)                    collective: room for the metadata document;
                                                            then reserved_ranges() again on the planning rank
   10    WriteHandle.write_document(document)               collective steps; one rank holds the bytes
   11    WriteHandle.sync()                                 collective
   12    WriteHandle.mark_complete(mark)                    collective steps; ``mark`` True on one rank
   13    WriteHandle.sync(); WriteHandle.close()            collective
   14    Backend.stored_document(tmp), else read_document   the planning rank, serial: the file as the file
                                                            system has it, before the rename
         WriteHandle.abort()                                after an agreed failure, every rank that holds a
                                                            handle (collective where the library's close is)

*Bytes placed by ckptio* (``Capabilities.placed_bytes``, the native format; issue 29). Where the format puts
every byte is known before anything is written (``place``), so the engine does the collective buffering itself
(``ckptio.engine.write_aggregate``) unless ``CKPTIO_WRITE_IO=write_all`` keeps the table above. Then::

   step  call                                               ranks
   ----  -------------------------------------------------  --------------------------------------------------
   2     Backend.place(...)                                 as above, and ``Placement.rank_spans``
   3     Backend.create(path, comm, info, plan, options)    the write AGGREGATORS only, ``options.range_io``
                                                            "posix" (``comm`` None: each opens on its own) or
                                                            "mpiio" (``comm``: the aggregators' communicator)
   4, 5  define(), reserved_ranges()                        the aggregators; the planning rank is one of them
   6     Backend.placed_pieces(blocks, share)               every rank, local: its bytes and where they go;
                                                            the engine moves them to the aggregators, which
                                                            write them through WriteHandle.ranges()
   7-13  sync ... close, abort                              the aggregators only (collective over their
                                                            communicator for "mpiio"); the other ranks hold no
                                                            handle and still join every agreement

The read side::

         Backend.sniff(head)                                any rank, pure
         Backend.read_document(path)                        one process, serial (no MPI)
         Backend.extents(doc) / extent_table(doc)           pure
         Backend.open_extents(path, comm, info, doc)        the restart aggregators: ``comm`` None (the default,
                                                            ``CKPTIO_READ_IO=posix``): each opens on its own, no
                                                            MPI; a communicator (``mpiio``): collective over it
         Backend.serial_extents(path, doc)                  one process (``ckptio inspect --verify``)

*Steps.* ``write``, ``write_document`` and ``mark_complete`` return an iterable of ``Step`` s, each a label
and a function that makes at most one of the library's collective calls. The engine runs them one at a time, each
inside an agreed phase, so an I/O error that reaches only some ranks (with collective buffering, ENOSPC reaches
the aggregators alone) stops every rank before the next collective call. Every rank must produce the same number
of steps (the engine checks it, and fails instead of hanging when a backend gets it wrong). Prepare everything
that can fail locally (buffers, dataspaces, datatypes, nonblocking posts) in the iterator, before returning or
yielding a step: the engine agrees on that preparation before any rank makes the step's collective call. A step
that fails on one rank BEFORE its collective call leaves the others inside the library's collective.

To add a format: one module with a ``Backend`` subclass, and one entry point in the group
``ckptio.backends`` naming it (``[project.entry-points."ckptio.backends"]`` in its package's pyproject.toml), see
:mod:`ckptio.backends.registry`. ``ckptio.testing`` has the contract suite every backend must pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, ClassVar, Protocol

import numpy as np

# The contract's vocabulary, re-exported: the model types in the signatures below, the errors a backend raises
# (their meaning is part of each method's contract), the user block table's shape and notes (``write``'s
# ``tables``) and ``variables_of`` (the typed variables of the ``meta`` the read side is handed). A backend takes
# them from this module, so what it needs to know of the core is this module and the few helpers it chooses (the
# MPI-IO hints and datatypes, memory selections, the document's JSON codec).
from ckptio.errors import (
    CapabilityError,
    CheckpointError,
    CheckpointIOError,
    CorruptCheckpointError,
    FormatVersionError,
    IncompleteCheckpointError,
    RewrittenCheckpointError,
    UnknownFormatError,
)
from ckptio.model.block_table import USER_CHECKSUMS_NOTE, USER_TABLE_NOTE, BlockTable, user_table_shape
from ckptio.model.document import CheckpointDocument, VariableRecord, variables_of
from ckptio.model.extent_table import ExtentTable
from ckptio.model.layout import Box
from ckptio.model.plan import Extent
from ckptio.model.variable_plan import VariablePlan, joined_columns

__all__ = [
    "USER_CHECKSUMS_NOTE", "USER_TABLE_NOTE", "Backend", "BlockTable", "BlockToWrite", "Box", "Capabilities",
    "CapabilityError", "CheckpointDocument", "CheckpointError", "CheckpointIOError", "CorruptCheckpointError",
    "CreateOptions", "DocumentSlot", "Extent", "ExtentReader", "ExtentTable", "FormatVersionError",
    "IncompleteCheckpointError", "Placement", "RangeWriter", "RewrittenCheckpointError", "Run", "Step",
    "UnknownFormatError", "VariablePlan", "VariableRecord", "WriteHandle", "WrittenBlock", "joined_columns",
    "user_table_shape", "variables_of",
]

#: One collective step of a backend: a label for messages and the function that makes the call.
Step = tuple[str, Callable[[], object]]


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; the API refuses requests beyond them with ``CapabilityError``."""

    compression: bool = False
    segments: bool = True
    complex_dtypes: bool = True
    bool_dtype: bool = True
    unsigned_dtypes: bool = True
    float16: bool = True
    extended_float: bool = True  # numpy's longdouble (float96/float128: 80-bit x87 in 12 or 16 bytes)
    nonblocking: bool = False
    readable_by: tuple[str, ...] = ()
    # Where every byte of the data goes is the format's fixed placement (Backend.placed_pieces), and a handle can
    # write byte ranges (WriteHandle.ranges): the engine aggregates the data write itself (issue 29)
    placed_bytes: bool = False


@dataclass(frozen=True)
class Placement:
    """Where the planning rank put every block (``Backend.place``): ``whole`` is what its own handle gets,
    ``shares[r]`` what rank ``r``'s handle gets (each rank receives only its own: nothing a rank receives may
    grow with the number of ranks unless its own blocks do). The contents are the backend's own."""

    whole: Mapping[str, Any]
    shares: Sequence[Mapping[str, Any]]
    # placed_bytes backends: every rank's [start, end) of the bytes it writes (int64, nprocs x 2; start == end
    # for none), the format's own bytes included (the header on its rank): what the engine's write aggregators
    # are planned over
    rank_spans: np.ndarray | None = None
    # True: every rank's share is the same (``shares[0]``, e.g. HDF5's per-variable call counts): the engine
    # broadcasts it once instead of pickling it once per rank on the planning rank
    same_for_all: bool = False


def stored_document_of(backend: Any, path: str) -> bytes | None:
    """Serial: ``backend.stored_document(path)``, or None where the backend has none (the method is optional, not
    in ``backends.registry.REQUIRED``; a backend may also opt out with ``stored_document = None``)."""
    method = getattr(backend, "stored_document", None)
    return None if method is None else method(path)


@dataclass(frozen=True)
class CreateOptions:
    """What ``Backend.create`` needs besides the plan, the same on every rank."""

    hints: Mapping[str, str] = field(default_factory=dict)  # the MPI-IO hints ckptio resolved (striping...)
    stripe_unit: int = 1 << 20  # the alignment ckptio chose (whole storage objects where the file system says)
    attrs: Mapping[str, Any] = field(default_factory=dict)  # the checkpoint's attributes (JSON values)
    described: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per variable: its dims, attrs
    # placed_bytes backends: None, the handle writes the data itself (WriteHandle.write); "posix" or "mpiio":
    # the handle is created on the write aggregators only and writes byte ranges (WriteHandle.ranges) of that kind
    range_io: str | None = None
    # why the format library must move the data with independent transfers (the engine's agreed answer,
    # ckptio.coord.hints.collective_write_hazard), None: collective transfers
    independent_because: str | None = None
    # range_io "posix" or "mpiio": the write aggregator starts the write-back of every this many bytes it wrote
    # (0: none before the sync; ckptio.backends.rangeio)
    writeback_bytes: int = 0
    # (aggregators, bytes per aggregator and round) of OMPIO's collective buffering, which the library's collective
    # data writes are cut to, one round per call, so that a write error on one rank cannot leave the others
    # waiting inside one; (0, 0): no cut (ckptio.backends.collective_calls, ckptio.coord.hints.library_rounds)
    collective_rounds: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class BlockToWrite:
    """One of this rank's blocks, as the engine hands it to ``WriteHandle.write``."""

    var: str
    local_index: int  # its position among this rank's declarations (what a placement share is indexed by)
    box: Box
    data: np.ndarray  # the elements in C order (a strided view of them, see ckptio.model.memsel), or compressed bytes
    codec: str | None = None  # how ``data`` is compressed (native format only), None: raw elements


@dataclass(frozen=True)
class WrittenBlock:
    """What the backend reports back for one written block (goes into the block table)."""

    file_offset: int | None
    stored_nbytes: int
    codec: str | None = None


@dataclass(frozen=True)
class DocumentSlot:
    """The metadata document's size and checksum (xxh3-64, 16 hex digits), known on every rank before any rank
    writes it (a format may need both in its own structures: the native trailer, HDF5's attribute)."""

    nbytes: int
    checksum: str


#: A run of bytes to write: a file offset and the contiguous uint8 arrays that go there one after the other.
Run = tuple[int, Sequence[np.ndarray]]


class RangeWriter(Protocol):
    """A write aggregator's byte-range writer (``WriteHandle.ranges``), opened by ``Backend.create`` with
    ``options.range_io`` (``ckptio.backends.rangeio``)."""

    #: Whether ``write`` is local, without MPI (then safe in a helper thread while the calling thread uses MPI)
    independent: ClassVar[bool] = True
    #: How many times the writer started the write-back of what it wrote before its ``sync`` (0: never)
    writebacks: int

    def write(self, runs: Sequence[Run]) -> int:
        """Local: write every run at its file offset; the number of file system (or MPI-IO) calls made.
        CheckpointIOError naming the file and the cause (no space left, quota) when a write fails."""

    def sync(self) -> None:
        """Local, or collective over the aggregators for an MPI-IO file: this writer's bytes are durable."""

    def hints(self) -> dict[str, str]:
        """Local: the hints the MPI library reports for the open file ({} when none was opened)."""

    def close(self) -> None:
        """Local, or collective over the aggregators for an MPI-IO file."""

    def abort(self) -> None:
        """Best effort, never raises (as ``close``)."""


class WriteHandle(Protocol):
    """An open checkpoint file being written (``Backend.create``). See the module docstring for the order of
    the calls and which ranks make them."""

    def define(self) -> None:
        """Collective: the format's own structures before any data (datasets, dimensions, variables)."""

    def notes(self) -> list[str]:
        """Local: what the user should be told about this file (e.g. a slower transfer mode chosen for safety);
        the engine warns once, on the planning rank."""

    def in_small_calls(self, below: int) -> set[str] | None:
        """Local, on the planning rank, after the data write: the variables that went out in a collective MPI-IO
        call of less than ``below`` bytes of the file, where an aggregator's lost share could be smaller than a
        block and leave no hole (:func:`ckptio.engine.space.unseen_losses` reads them back); None where the handle
        cannot tell (then every extent smaller than ``below`` is read back), as for a handle without the method.
        Variables written with independent transfers report their errors and are never in it."""

    def reserved_ranges(self) -> list[tuple[int, int]]:
        """Local, on the planning rank: the byte ranges ``[start, end)`` that what this handle writes next will
        occupy (after ``define``: the data and the format's structures so far; after
        ``document_slot``: the document and the completion mark), so the engine reserves them first."""

    def write(self, blocks: Sequence[BlockToWrite], tables: tuple[np.ndarray, np.ndarray] | None
              ) -> Iterable[Step]:
        """The collective steps that write this rank's ``blocks`` (any count, zero included). ``tables``: the
        block table copy for tools that do not know ckptio (rows and checksums of
        ``ckptio.model.block_table.user_table``) on the rank that holds it, None elsewhere. After the steps,
        ``written`` says what each block became."""

    def written(self) -> list[WrittenBlock]:
        """Local, after ``write``'s steps: per block given to it, in order, what was written."""

    def ranges(self) -> RangeWriter:
        """Local, on a write aggregator of a handle created with ``options.range_io``: its byte-range writer
        (the data's rounds, and the document and completion mark on the rank that holds them, go through it)."""

    def sync(self) -> None:
        """Collective: everything written so far is durable (``MPI_File_sync`` or the library's flush)."""

    def storage_info(self) -> dict[str, dict[str, Any]]:
        """Local, on the planning rank after ``sync``: per variable, how the format stores it (e.g. the file
        offset of an HDF5 dataset): the document's ``variables[name].storage``."""

    def effective_hints(self) -> dict[str, str]:
        """Local: the hints the MPI library reports for the open file."""

    def document_slot(self, slot: DocumentSlot) -> None:
        """Collective: make room for the metadata document of ``slot.nbytes`` bytes (and its completion mark)."""

    def write_document(self, document: bytes | None) -> Iterable[Step]:
        """The collective steps that store the metadata document: ``document`` on the rank that holds it, None
        on every other rank."""

    def mark_complete(self, mark: bool) -> Iterable[Step]:
        """The collective steps that write the completion mark (``mark`` True on the rank the engine chose), the
        last thing written: a file without it is incomplete."""

    def close(self) -> None:
        """Collective: close the file (everything is synced before)."""

    def abort(self) -> None:
        """Best effort, after a failure every rank agreed on: release the file (it is discarded). Collective
        where closing the format's file is (HDF5, PnetCDF, MPI-IO); never raises."""


class ExtentReader(Protocol):
    """A checkpoint opened by the restart aggregators (or one process)."""

    #: True if ``read`` is local (no MPI: safe in a helper thread while the caller's thread uses MPI) and the
    #: arrays it returns for one ``slot`` stay valid until the next read into that slot: the restart then reads
    #: round k+1 into one slot while round k, in the other, is exchanged. False: collective, one slot.
    independent: ClassVar[bool] = False

    def read(self, extents: Sequence[Extent], slot: int = 0,
             into: Sequence[Sequence[tuple[int, np.ndarray]] | None] | None = None) -> tuple[list[np.ndarray], int]:
        """Collective over the aggregators unless ``independent``: read these extents (in file order) into
        buffer ``slot``; return one array per extent, shaped like its box, in native byte order (valid until
        the next read into the same slot), and the number of file read calls issued.

        ``into`` (only given to an ``independent`` reader): per extent, None or the stretches of it to read
        straight into the caller's final memory, ``(byte offset in the extent, contiguous writable uint8 array)``,
        in order and not overlapping; an extent that is one such stretch whole is returned as that memory, any
        other as its place in the slot's buffer, where the bytes read elsewhere are left unwritten (the restart
        then needs no copy for them: ``ckptio.backends.rawio.PosixExtentReader`` does it with one scattering
        ``preadv``). A reader that cannot may ignore ``into`` only if it is not independent."""

    def close(self) -> None:
        """Collective over the aggregators unless ``independent``."""


class Backend(Protocol):
    """One file format. Subclass it (the defaults below apply) and register it (:mod:`ckptio.backends.registry`)."""

    name: ClassVar[str]
    format_version: ClassVar[int]
    capabilities: ClassVar[Capabilities]
    extra_hints: ClassVar[dict[str, str]] = {}  # hints this format adds unless the user set them
    signature: ClassVar[bytes] = b""  # the leading bytes of every file this backend writes

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        """Pure: True if a file starting with ``head`` (its first 512 bytes) is in this format."""
        return bool(cls.signature) and head.startswith(cls.signature)

    @classmethod
    def write_problem(cls) -> str | None:
        """Local, cheap: why this process cannot WRITE this format (a library is missing: its name and how to
        install it), or None. Reading never needs more than ckptio itself, so a missing library never makes a
        good checkpoint unreadable or "corrupt"."""
        return None

    @classmethod
    def require_writable(cls) -> None:
        """Local: CapabilityError naming the missing library and its install command (``write_problem``)."""
        problem = cls.write_problem()
        if problem is not None:
            raise CapabilityError(f"backend {cls.name!r} cannot write here: {problem}")

    @classmethod
    def damaged_evidence(cls, f: BinaryIO, size: int) -> str | None:
        """Local: for a file of ``size`` bytes that no backend sniffed, what in it (other than the leading bytes)
        proves it is a checkpoint of this format, as a phrase for the message; None if nothing does."""
        return None

    def check_dtype(self, name: str, dtype: np.dtype) -> None:
        """Local: CapabilityError if this format cannot store ``dtype``."""
        caps = self.capabilities
        bad = ((dtype.kind == "c" and not caps.complex_dtypes) or (dtype.kind == "b" and not caps.bool_dtype)
               or (dtype.kind == "f" and dtype.itemsize == 2 and not caps.float16)
               or (dtype.kind == "f" and dtype.itemsize > 8 and not caps.extended_float)
               or (dtype.kind == "u" and not caps.unsigned_dtypes))
        if bad:
            raise CapabilityError(f"variable {name!r}: backend {self.name!r} cannot store dtype {dtype}")

    def check_attr(self, name: str, value: Any) -> None:
        """Local, at declaration time: CapabilityError naming the attribute if this format cannot store ``value``
        (a normalized, JSON-compatible value). Default: every JSON value is storable."""
        return None

    def place(self, variables: Mapping[str, VariablePlan], stripe_unit: int, nprocs: int) -> Placement:
        """Pure, on the planning rank: where every block goes in the file, from the whole plan. Default: nothing
        to place (the library places the data)."""
        return Placement({}, [{}] * nprocs, same_for_all=True)

    def create(self, path: str, comm, info, variables: Mapping[str, VariablePlan], placement: Mapping[str, Any],
               options: CreateOptions) -> WriteHandle:
        """Collective: create the file at ``path`` (a temporary name) with the MPI hints ``info``. ``variables``
        is the whole plan on the planning rank and only this rank's own blocks elsewhere
        (``VariablePlan.total_blocks`` counts every rank's); ``placement`` is ``Placement.whole`` on the
        planning rank and this rank's share elsewhere. With ``options.range_io`` (placed_bytes backends): called
        on the write aggregators only, ``comm`` their communicator ("mpiio") or None ("posix"); the file exists
        (the planning rank created it empty, with its stripe layout)."""
        raise NotImplementedError

    def placed_pieces(self, blocks: Sequence[BlockToWrite], share: Mapping[str, Any]
                      ) -> tuple[list[tuple[int, np.ndarray]], list[WrittenBlock]]:
        """Local, every rank (placed_bytes backends): this rank's bytes and where they go, as ``(file offset,
        array)`` pieces (its blocks' data as handed in: C order, a strided view of it, or compressed bytes; and
        the format's own bytes at fixed places on the rank whose ``share`` says so), and what each block becomes
        (as ``WriteHandle.written`` reports it). ``share``: this rank's placement share (the whole placement on
        the planning rank)."""
        raise NotImplementedError

    def read_document(self, path: str) -> Any:
        """Serial, no MPI: the metadata document of a complete checkpoint. IncompleteCheckpointError (no
        completion mark, truncated) or CorruptCheckpointError (damaged index or header) otherwise;
        UnknownFormatError for a file of this container format that ckptio did not write."""
        raise NotImplementedError

    def stored_document(self, path: str) -> bytes | None:
        """Serial, no MPI: the encoded document exactly as the complete checkpoint ``path`` stores it, after the
        same checks of the file's framing as :meth:`read_document` (completion mark, header, the document's
        checksum) and with the same errors, without decoding it. The commit's last check compares it with the
        bytes it wrote, which is cheaper than decoding them again (tens of microseconds per variable). The
        default, None, says the format has no cheaper way: the commit then calls :meth:`read_document`."""
        return None

    def extents(self, meta: Any) -> list[Extent]:
        """Pure: where every variable's bytes lie, as extents sorted by file offset."""
        raise NotImplementedError

    def extent_table(self, meta: Any) -> ExtentTable:
        """Pure: ``extents`` as columns, what the restart planner partitions. The default converts the list;
        a backend overrides it with a vectorized builder."""
        return ExtentTable.of_extents(meta, self.extents(meta))

    def open_extents(self, path: str, comm, info, meta: Any) -> ExtentReader:
        """The restart aggregators: open the file for reading its extents. ``comm`` None: each aggregator opens on
        its own, and neither this call nor the reader may make an MPI call on any communicator (only some ranks
        call it, and the reader may run in a helper thread: ``ExtentReader.independent``);
        a communicator (the aggregators', ``CKPTIO_READ_IO=mpiio``): collective over it, through MPI-IO with
        ``info``."""
        raise NotImplementedError

    def serial_extents(self, path: str, meta: Any) -> ExtentReader:
        """One process: an extent reader for ``ckptio inspect --verify`` and the serial tools."""
        raise NotImplementedError

    def plain_document(self, path: str) -> Any:
        """Serial: a document describing a file of this container format that ckptio did not write (an HDF5 or
        netCDF file of an existing code), so its variables can be restarted from; UnknownFormatError when the
        format has no such files."""
        raise UnknownFormatError(f"{path}: not a ckptio checkpoint ({self.name} has no plain files)")
