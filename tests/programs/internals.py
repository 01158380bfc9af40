"""Every ckptio internal that the programs of ``tests/programs/`` use, in one place.

The programs otherwise use the public API only: ``ckptio.create``/``open``/``latest``/``empty``, ``Series``, the
``Writer`` and ``Reader`` and their documented attributes (``meta``, ``stats``, ``aggregators``), the errors,
``ckptio.tiers.batch`` and ``ckptio.coord.placement``. What they need beyond that
(a backend's view of a file to damage one
byte of it, a module constant lowered to reach a limit, the name of a staged piece) is asked here, so that when
issue 24 moves these internals (the storage contract of ``backends/base.py``, the typed document of
``ckptio/model/``, the tiers), this module follows them and the programs stay as they are.

Local: nothing here enters a collective; the functions that read a file are meant for one rank (the programs call
them on rank 0 and then wait at a barrier). Importing this module imports no part of ckptio.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


# ----------------------------------------------------------------------- a backend's view of a file
def extent_span(path: str, index: int) -> tuple[int, int]:
    """(file offset, bytes) of data extent ``index`` of the checkpoint ``path`` (negative: from the end), as its
    backend (``ckptio.backends.detect_backend``) lists them (``Backend.extents`` of ``Backend.read_document``)."""
    from ckptio.backends import detect_backend

    backend = detect_backend(path)
    extent = backend.extents(backend.read_document(path))[index]
    return int(extent.file_offset), int(extent.nbytes)


def extent_table(path: str, backend: str) -> Any:
    """The extent table (columns ``lo``, ``shape``, ``file_offset``) of ``path`` as backend ``backend`` lists it
    (``ckptio.backends.get_backend(...).extent_table``)."""
    from ckptio.backends import get_backend

    b = get_backend(backend)
    return b.extent_table(b.read_document(path))


def stored_blocks(path: str, variable: str) -> list[Any]:
    """The blocks of ``variable`` as stored in ``path``'s metadata document (each subscriptable: ``file_offset``,
    ``codec``, ``stored_nbytes``...), read by the file's backend."""
    from ckptio.backends import detect_backend

    return list(detect_backend(path).read_document(path)["variables"][variable]["blocks"])


def verify_blocks(path: str) -> list[Any]:
    """The problems ``ckptio.verify.verify_blocks`` finds in every block of ``path`` (checksums read back)."""
    from ckptio.backends import detect_backend

    from ckptio import verify

    backend = detect_backend(path)
    return verify.verify_blocks(backend, path, backend.read_document(path))


def inspect_exit_code(path: str) -> int:
    """The exit code of ``ckptio inspect --verify PATH`` (``ckptio.tools.cli.inspect_report``), in this process."""
    from ckptio.tools.cli import inspect_report

    return inspect_report(path, verify=True)[0]


def missing_backends() -> dict[str, str]:
    """``ckptio.backends.MISSING``: backend name -> why it cannot write here."""
    from ckptio.backends import MISSING

    return dict(MISSING)


def block_table_type() -> type:
    """The class of a document's block table (``ckptio.model.block_table.BlockTable``), what rank 0's ``meta`` holds."""
    from ckptio.model.block_table import BlockTable

    return BlockTable


# --------------------------------------------------------------------------------------- the native I/O layer
def classic_hindexed(lengths: list[int], displacements: list[int]) -> Any:
    """``ckptio.coord.datatypes.hindexed``: the MPI datatype ckptio builds for file pieces."""
    from ckptio.coord import datatypes

    return datatypes.hindexed(lengths, displacements)


def transfer(fh: Any, pieces: list[tuple[int, int]], buffers: list[Any], write: bool) -> None:
    """``ckptio.backends.rawio.transfer``: pieces (offset, bytes) of an open MPI file to or from ``buffers``."""
    from ckptio.backends import rawio

    rawio.transfer(fh, pieces, buffers, write=write)


# ------------------------------------------------------------------------------------------------- limits
def lower_hdf5_dimension_scale_users(limit: int) -> None:
    """Lower ``ckptio.backends.hdf5_write.MAX_SCALE_USERS`` (how many datasets one HDF5 dimension scale may
    serve)."""
    import ckptio.backends.hdf5_write as h5backend

    h5backend.MAX_SCALE_USERS = limit


# -------------------------------------------------------------------------------------------------- tiers
def staged_key_dir(stage_dir: str, final_path: str) -> str:
    """``ckptio.tiers.stage_files.key_dir``: the directory of ``stage_dir`` that holds the staged copies of the
    checkpoints whose final path is ``final_path``'s directory."""
    from ckptio.tiers import stage_files

    return stage_files.key_dir(stage_dir, final_path)


def staged_data_pieces(stage_dir: str, rank: int) -> list[str]:
    """The data files of rank ``rank`` under ``stage_dir`` (``ckptio.tiers.staging`` names them
    ``rank-<rank, 6 digits>-of-<size>...data``)."""
    return [os.path.join(d, f) for d, _, files in os.walk(stage_dir) for f in files
            if f.startswith(f"rank-{rank:06d}") and f.endswith(".data")]


def is_batch_signal_handler(handler: Any) -> bool:
    """Whether ``handler`` is ckptio's own signal handler (``ckptio.tiers.batch._handler``)."""
    from ckptio.tiers import batch

    return handler is batch._handler


# ---------------------------------------------------------------------------------------- plain file damage
def flip_byte(path: str, offset: int, mask: int = 0xFF) -> None:
    """XOR the byte at ``offset`` of ``path`` with ``mask`` (in place)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ mask]))


# ------------------------------------------------------------------------------------ what an import loads
def import_tool_modules() -> None:
    """Import the modules behind the tools and the tiers: backends, the command line, series, catalog."""



def backend_by_name(name: str) -> Any:
    """``ckptio.backends.get_backend(name)`` (after ``known_backends()``, as the writer asks)."""
    from ckptio.backends import get_backend, known_backends

    known_backends()
    return get_backend(name)


def hdf5_backend_has_h5py() -> bool:
    """Whether the hdf5 backend has loaded h5py (``ckptio.backends.hdf5_lib``: its ``h5py`` is not None)."""
    import ckptio.backends.hdf5_lib as h

    return h.h5py is not None


# ------------------------------------------------------------------------------------------ fault injection
def run_before_commit(backend: str, action: Callable[[], None]) -> None:
    """From now on, ``action()`` runs once the data of every checkpoint backend ``backend`` writes is written and
    synced, before the engine's commit: the backend's write handle (``create``) gets a ``written`` (which the engine
    asks for right after the data's sync, before the index and the commit) that calls ``action`` first."""
    from ckptio.backends import get_backend

    cls = type(get_backend(backend))
    create = cls.create

    def create_then_act_before_commit(self, *args, **kw):
        handle = create(self, *args, **kw)
        written = handle.written

        def written_after_action():
            action()
            return written()

        handle.written = written_after_action
        return handle

    cls.create = create_then_act_before_commit


def fail_after_posting(backend: str, rank: int) -> None:
    """From now on, the data write of every checkpoint backend ``backend`` writes fails on world rank ``rank`` once
    its write handle has prepared (posted) the write: the handle's ``write`` raises RuntimeError after it returned
    its steps, before any of them ran (the engine agrees on the failure and aborts on every rank)."""
    from ckptio.backends import get_backend
    from mpi4py import MPI

    cls = type(get_backend(backend))
    create = cls.create

    def create_failing_after_posting(self, *args, **kw):
        handle = create(self, *args, **kw)
        write = handle.write

        def write_then_fail(*a, **k):
            steps = write(*a, **k)
            if MPI.COMM_WORLD.rank == rank:
                raise RuntimeError(f"injected: rank {rank} fails after posting its writes")
            return steps

        handle.write = write_then_fail
        return handle

    cls.create = create_failing_after_posting
