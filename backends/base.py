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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ckptio.errors import CapabilityError, UnknownFormatError
from ckptio.plan import BlockPlan, Extent, VariablePlan


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

    @abc.abstractmethod
    def effective_hints(self) -> dict[str, str]:
        """Local: the hints the MPI library reports for the open file."""

    def storage_info(self) -> dict[str, dict[str, Any]]:
        """Local, on rank 0 after :meth:`write_blocks`: per variable, how the format stores it (e.g. the file
        offset of an HDF5 dataset), stored as ``meta["variables"][name]["storage"]``. Default: nothing."""
        return {}

    @abc.abstractmethod
    def commit(self, meta: Mapping[str, Any]) -> None:
        """Collective: store the metadata document, sync, write the completion mark last, sync, close."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Local and best-effort: release the file after a failure (no collectives)."""


class ExtentReader(abc.ABC):
    """The checkpoint opened by the aggregators only."""

    @abc.abstractmethod
    def read(self, extents: Sequence[Extent]) -> tuple[list[np.ndarray], int]:
        """Collective over the aggregators: read these extents (in file order); return one array per extent,
        shaped like its box, in native byte order, and the number of file read calls issued."""

    @abc.abstractmethod
    def close(self) -> None:
        """Collective over the aggregators."""


class Backend(abc.ABC):
    name: ClassVar[str]
    format_version: ClassVar[int]
    capabilities: ClassVar[Capabilities]
    extra_hints: ClassVar[dict[str, str]] = {}  # hints this format adds unless the user set them

    @classmethod
    @abc.abstractmethod
    def sniff(cls, head: bytes) -> bool:
        """True if a file starting with ``head`` (first 512 bytes) is in this backend's format."""

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

    def layout(self, variables: Mapping[str, VariablePlan], stripe_unit: int, nprocs: int) -> dict[str, Any]:
        """Pure, on the coordinator: backend-specific placement (e.g. file offsets of blocks). Default: none."""
        return {}

    @abc.abstractmethod
    def create(self, path: str, comm, info, variables: Mapping[str, VariablePlan], layout: Mapping[str, Any],
               options: Mapping[str, Any]) -> WriteSession:
        """Collective: create the file at ``path`` (a temporary name) with the MPI hints in ``info``."""

    @abc.abstractmethod
    def read_metadata(self, path: str) -> dict[str, Any]:
        """Serial: the metadata document. Raises IncompleteCheckpointError (no completion mark, truncated)
        or CorruptCheckpointError (damaged index or header)."""

    @abc.abstractmethod
    def extents(self, meta: Mapping[str, Any]) -> list[Extent]:
        """Pure: where every variable's bytes lie, as extents sorted by file offset."""

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
        raise CapabilityError(f"unknown backend {name!r}; available: {', '.join(sorted(_REGISTRY))}") from None


def available_backends() -> list[str]:
    return sorted(_REGISTRY)


def detect_backend(path: str) -> Backend:
    """Find the backend of an existing file from its leading bytes."""
    with open(path, "rb") as f:
        head = f.read(512)
    for cls in _REGISTRY.values():
        if cls.sniff(head):
            return cls()
    raise UnknownFormatError(
        f"{path}: not a ckptio checkpoint in any known format (leading bytes {head[:8]!r}; "
        f"known backends: {', '.join(sorted(_REGISTRY))})"
    )
