"""The writer facade: :func:`ckptio.create` returns a :class:`Writer`; ranks declare blocks locally, then one
collective ``close()`` writes and commits them.

The protocol itself (declare, plan, create, reserve, write, index, commit, rename) lives once in the engine
(:mod:`ckptio.engine.write`, :mod:`ckptio.engine.commit`); this module is what users call: declarations
(``write``, ``set_attr``, checked locally and kept until ``close``), the arguments every rank must pass alike
(checked in ``close()``'s first agreed phase), and the choice between writing now, in the background
(``mode="async"``, :mod:`ckptio.tiers.async_io`) and through a stage (``stage_dir``, :mod:`ckptio.tiers.staging`).

A failure at any phase removes the temporary file and leaves an existing checkpoint of the same name and
every other checkpoint untouched; nothing at the final name ever claims to be complete unless it is.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio import coord, settings
from ckptio.backends import Backend, get_backend, known_backends
from ckptio.coord import hints as hintsmod
from ckptio.engine.index import WriteStats
from ckptio.engine.write import TMP_MARK, PendingBlock, WriteRequest, write_checkpoint
from ckptio.errors import (
    CapabilityError,
    CheckpointError,
    CheckpointIOError,
    ClosedCheckpointError,
    CollectiveError,
    DeclarationError,
)
from ckptio.model import codec as codecs
from ckptio.model import meta as metamod
from ckptio.model import varmeta
from ckptio.model.agreement import groups_text, ranks_by_value, ranks_text
from ckptio.model.declared import declaration
from ckptio.model.series_record import SeriesRecord
from ckptio.model.stage_manifest import StageManifest
from ckptio.tiers import async_io


@dataclass(frozen=True)
class WriteOptions:
    """The checked options of one checkpoint (:func:`check_write_options`)."""

    backend: Backend
    hints: dict[str, str]
    compression: tuple[str, int] | None

    @property
    def compression_text(self) -> str | None:
        return compression_text(self.compression)


def compression_text(compression: tuple[str, int] | None) -> str | None:
    """``("zstd", 3)`` -> ``"zstd:3"`` (what ranks compare, and what the stored codec names say); None -> None."""
    return None if compression is None else ":".join(map(str, compression))


def check_write_options(nprocs: int, backend: str, hints: Mapping[str, Any] | None, compression: object,
                        mode: str) -> WriteOptions:
    """Local: the options of :func:`ckptio.create` (and of every checkpoint of a :class:`ckptio.Series`), each
    checked by itself; raises a CheckpointError subclass naming the bad one."""
    if mode not in ("sync", "async"):
        raise DeclarationError(f"mode={mode!r}: expected 'sync' or 'async'")
    if not isinstance(backend, str):
        raise DeclarationError(f"backend={backend!r}: expected a backend name ({', '.join(known_backends())})")
    chosen = get_backend(backend)
    if hints is not None and not isinstance(hints, Mapping):
        raise DeclarationError(f"hints={hints!r}: expected a mapping of MPI-IO hint names to values")
    try:
        resolved = hintsmod.resolve_hints(nprocs, hints)
        codec = codecs.parse_compression(compression)
    except (TypeError, ValueError) as exc:
        raise DeclarationError(str(exc)) from None
    for key, value in chosen.extra_hints.items():
        resolved.setdefault(key, value)
    if codec is not None and not chosen.capabilities.compression:
        raise CapabilityError(f"backend {chosen.name!r} does not support compression "
                              f"(compression={compression!r}); use backend='mpiio'")
    return WriteOptions(chosen, resolved, codec)


class Writer:
    """A checkpoint being declared. Create with :func:`ckptio.create` on every rank of ``comm``.

    :meth:`write` is local (no communication); :meth:`close` is collective.
    """

    def __init__(self, path: str | os.PathLike, comm, backend: str = "mpiio", attrs: Mapping[str, Any] | None = None,
                 hints: Mapping[str, Any] | None = None, compression: object = None, mode: str = "sync",
                 stage_dir: str | os.PathLike | None = None):
        self.mode = mode
        self.stage_dir = os.fspath(stage_dir) if stage_dir is not None else None
        self.handle: async_io.AsyncCheckpoint | None = None
        self._user_hints = hints
        self._compression_spec = compression
        self.path = os.fspath(path)
        self.comm = comm
        self.attrs: dict[str, Any] = {}
        self._pending: list[PendingBlock] = []
        self._described: dict[str, varmeta.Description] = {}  # dims/attrs per variable this rank declared
        self._error: BaseException | None = None
        self._closed = False
        self.stats = WriteStats()
        self.series_record: SeriesRecord | None = None  # set by ckptio.Series: stored as the document's "series"
        self.before_rename: Callable[[], None] | None = None  # rank 0, just before the rename (Series: its lease)
        # Argument errors are deferred, never raised here: an argument may be bad on one rank only, and a rank that
        # leaves here has no Writer to take part in close(), where the others would wait forever. close() raises
        # the first one on every rank, in its first phase (naming this rank), before anything is written.
        try:
            chosen = check_write_options(comm.Get_size(), backend, hints, compression, mode)
            self.backend, self.hints, self.compression = chosen.backend, chosen.hints, chosen.compression
            self.attrs = self._checked_attrs(attrs)
        except CheckpointError as exc:
            self._error = _naming_rank(exc, comm.Get_rank())
        if self._error is not None and not hasattr(self, "backend"):
            self.backend, self.hints, self.compression = None, {}, None  # type: ignore[assignment]

    # ------------------------------------------------------------------------------------------- local API
    def write(self, name: str, array: np.ndarray, offset: Sequence[int] | None = None,
              global_shape: Sequence[int] | None = None, *, dims: Sequence[str] | None = None,
              attrs: Mapping[str, Any] | None = None) -> None:
        """Declare one block of a global N-d array (``offset`` + ``global_shape``), or, with neither, this
        rank's variable-length segment of ``name``: its rows (the first axis, any length, 0 included) are laid
        end to end in rank order; the other axes must be the same on every rank (tracers of shape ``(n, 4)``
        make a variable of shape ``(sum of n, 4)``). Local: no I/O and no communication happen here.

        ``dims`` names the variable's axes (default ``<name>_d0``, ...; one name is one length in the whole
        checkpoint, so variables sharing a dimension share it in HDF5 and netCDF files), ``attrs`` are its own
        attributes (``units``, ``long_name``, ...: JSON-compatible values). Every block of a variable, on every
        rank, must declare the same ``dims`` and ``attrs`` (or none): a difference within this rank raises
        DeclarationError here, between ranks in :meth:`close`, on every rank.

        The array must stay unchanged until :meth:`close` returns (it is referenced, not copied). It may be a
        strided view, e.g. the interior ``u[g:-g, g:-g]`` of an array with ``g`` guard cells: the backends write
        its elements in C order straight from the larger array, through a memory datatype or dataspace (no
        copy; see :mod:`ckptio.model.memsel`). Views whose last axis is not contiguous (a Fortran-ordered array,
        ``a[:, ::2]``) are gathered into a C-order copy at :meth:`close`.
        """
        self._check_open("write", name)
        if self.backend is None:
            return  # the arguments of ckptio.create were wrong: close() raises that on every rank
        rank = self.comm.Get_rank()
        if isinstance(array, np.generic):  # a numpy scalar (np.float32(3.5)) is the 0-d array it stands for
            array = np.array(array)
        try:
            # np.ma.MaskedArray without importing numpy.ma (1 MB, in every first write). Another thread may be
            # importing it right now (seen: an async checkpoint's thread), and sys.modules then holds the module
            # half made: no class yet means no masked array exists yet
            masked_type = getattr(sys.modules.get("numpy.ma.core"), "MaskedArray", None)
            if masked_type is not None and isinstance(array, masked_type):  # its data, unless elements are masked
                if np.any(array.mask):
                    raise DeclarationError(f"variable {name!r} on rank {rank}: a masked array with masked elements "
                                           "(a checkpoint stores plain arrays): write array.filled(value) and, if "
                                           "the mask matters, np.ma.getmaskarray(array) as a variable of its own")
                array = array.data
            d = declaration(name, array, offset, global_shape, rank)
            self.backend.check_dtype(name, array.dtype)
            segment = offset is None  # (declaration() took both offset and global_shape, or neither: a segment)
            if segment and not self.backend.capabilities.segments:
                raise CapabilityError(f"variable {name!r}: backend {self.backend.name!r} has no per-rank segments")
            described = varmeta.declare(name, array.ndim, dims, attrs, rank)
            for key, value in described.get("attrs", {}).items():
                try:
                    self.backend.check_attr(key, value)
                except CapabilityError as exc:
                    raise CapabilityError(f"variable {name!r}: {exc}") from None
            earlier = self._described.setdefault(name, described)
            if not varmeta.same(earlier, described):
                raise DeclarationError(f"variable {name!r} on rank {rank}: this block declares "
                                       f"{varmeta.show(described)} but an earlier block declared "
                                       f"{varmeta.show(earlier)}; every block of a variable must declare the same")
            self._pending.append(PendingBlock(d, array))
        except CheckpointError as exc:
            self._fail_locally(exc)

    def set_attr(self, key: str, value: Any) -> None:
        """Set one attribute (JSON-compatible; must be the same on every rank). Local."""
        self._check_open("set_attr", key)
        if self.backend is None:
            return  # the arguments of ckptio.create were wrong: close() raises that on every rank
        try:
            self.attrs.update(self._checked_attrs({key: value}))
        except CheckpointError as exc:
            self._fail_locally(exc)

    def _checked_attrs(self, attrs: Mapping[str, Any] | None) -> dict[str, Any]:
        """Local: ``attrs`` as stored (plain JSON types), refused now when the backend cannot store one."""
        normalized = metamod.normalize_attrs(attrs)
        for key, value in normalized.items():
            self.backend.check_attr(key, value)
        return normalized

    def _check_open(self, method: str, name: object) -> None:
        """Local: a declaration after close() would be silently lost; refuse it."""
        if self._closed:
            raise ClosedCheckpointError(f"checkpoint {self.path}: {method}({name!r}) after close(); the checkpoint "
                                        "is already written (or failed), declare everything before close()")

    def _fail_locally(self, exc: CheckpointError) -> None:
        """Remember a local declaration error for close() (which raises it on every rank) and raise it here,
        naming this rank."""
        named = _naming_rank(exc, self.comm.Get_rank())
        self._error = self._error or named
        if named is exc:
            raise exc
        raise named from None

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            self.close()
            return False
        # This rank failed inside the with-block (any exception: also sys.exit() or Ctrl-C): tell the others,
        # which are, or will be, in close(), and only then let the original exception go on.
        if not self._closed:
            self._error = self._error or exc
            try:
                self.close()
            except BaseException as close_exc:  # the original exception is the one to report
                if close_exc is not exc and not isinstance(close_exc, CheckpointError):
                    raise  # something new happened meanwhile (a signal held during close): it wins
            finally:
                if self.handle is not None:  # async: the background write fails because of ``exc``, which goes on
                    self.handle.reported = True  # to the caller: on this rank it is not reported again at exit
        return False

    # ------------------------------------------------------------------------------------------ collective
    def wait(self) -> None:
        """Local: for an asynchronous or staged checkpoint, block until it is committed (raise its error)."""
        if self.handle is not None:
            self.handle.wait()

    def done(self) -> bool:
        """Local: True when nothing of this checkpoint is still being written in the background."""
        return self.handle is None or self.handle.done()

    def close(self) -> None:
        """Collective: validate, write, commit and rename. Raises the same error on every rank on failure.

        ``mode="async"``: copies the blocks into a staging buffer and returns; the I/O thread does the rest
        (see :mod:`ckptio.tiers.async_io`). ``stage_dir``: writes each rank's blocks to the stage synchronously, then
        drains it to ``path`` in the background.
        """
        if self._closed:
            return
        with coord.collective_section():
            self._closed = True  # whatever happens below, declarations after this point are refused
            coord.gather_and_plan(self.comm, f"checkpoint {self.path}: declare (arguments)", self._arguments,
                                  _same_arguments)
            self._close_chosen()

    def _arguments(self) -> dict[str, Any]:
        """Local part of close()'s first phase: an argument of ckptio.create that was wrong in itself on this rank
        is raised here (so on every rank); then the arguments that every rank must pass alike (they select the
        code path and the file: a difference would hang or write somewhere unexpected)."""
        if self._error is not None and self.backend is None:
            raise self._error
        _check_checkpoint_name(self.path, self.comm.Get_size(), check_length=self.comm.Get_rank() == 0)
        return {"settings": settings.collective_snapshot(), "backend": self.backend.name, "mode": self.mode,
                "path": os.path.abspath(self.path),
                "stage_dir": None if self.stage_dir is None else os.path.abspath(self.stage_dir),
                "compression": compression_text(self.compression),
                "hints": tuple(sorted(self.hints.items()))}  # hints= and CKPTIO_HINTS, resolved

    def _close_chosen(self) -> None:
        background = (self.mode == "async" or self.stage_dir is not None)
        if background and not async_io.thread_multiple_available():
            async_io.warn_no_threads()
            background = False
        if self.stage_dir is not None:
            from ckptio.tiers import staging

            staging.close_staged(self, background)
        elif background:
            self._close_async()
        else:
            self._close_now()

    def _adopt(self, twin: Writer, seconds: Mapping[str, float] | None = None) -> None:
        """After the background write ``twin`` committed this checkpoint: its statistics and document (rank 0's
        whole, a light copy elsewhere) become this writer's, so ``stats`` and ``meta`` mean the same after
        ``wait()`` as after a synchronous ``close()``."""
        self.stats = WriteStats({**(seconds or {}), **twin.stats.seconds}, twin.stats.bytes_total,
                                twin.stats.bytes_min, twin.stats.bytes_max)
        self.meta = twin.meta

    def _clone(self, path: str, comm) -> Writer:
        twin = Writer(path, comm, backend=self.backend.name, attrs=self.attrs, hints=self._user_hints,
                      compression=self._compression_spec)
        twin._error = self._error
        twin.series_record = self.series_record
        twin.before_rename = self.before_rename
        return twin

    def _close_async(self) -> None:
        """Stage the blocks and hand the write to the I/O thread. Older background checkpoints whose buffers
        are needed are waited for first; their unreported failures are raised here, after this checkpoint was
        submitted (so it is not lost because an older one failed). A subclass's ``_on_commit(comm)`` (Series
        retention) runs in the I/O thread right after the commit, collectively on the duplicated communicator."""
        self._closed = True
        engine = async_io.engine_for(self.comm)
        finished = engine.settle_before_new()
        self.backend.write_problem()  # loads the backend's library here, before the exit handler order is set
        slot, copies = async_io.stage_arrays(engine.pool, [p.data for p in self._pending])
        twin = self._clone(self.path, engine.comm)
        twin._pending = [PendingBlock(dict(p.decl), c) for p, c in zip(self._pending, copies, strict=True)]
        twin._described = dict(self._described)
        self._pending = []
        self.handle = async_io.AsyncCheckpoint(self.path)
        on_commit = getattr(self, "_on_commit", None)

        def job(comm) -> None:
            twin.close()
            self._adopt(twin)  # read after wait(), which orders it after this
            if on_commit is not None:
                on_commit(comm)

        engine.submit(self.handle, job, lambda: engine.pool.release(slot))
        async_io.raise_failures(finished, f"close() of {self.path} (which was submitted normally)")

    def _close_now(self) -> None:
        """Collective: write and commit through the engine (:func:`ckptio.engine.write.write_checkpoint`)."""
        self._closed = True
        request = WriteRequest(self.path, self.comm, self.backend, self.hints, self.compression, self.attrs,
                               self._pending, self._described, self.series_record, self.before_rename, self._error,
                               self._user_hints)
        self._pending = []
        result = write_checkpoint(request)
        self.stats, self.meta = result.stats, result.meta

def _same_arguments(gathered: list[dict[str, Any]]) -> None:
    """Rank 0: DeclarationError naming the ranks when the ranks passed different ckptio.create arguments, or
    see different collective CKPTIO_* settings."""
    settings.check_same([g.pop("settings") for g in gathered], "ckptio.create")
    for key in gathered[0]:
        groups = ranks_by_value([g[key] for g in gathered])
        if len(groups) > 1:
            if key == "hints":  # the hints that differ, not every hint of every rank
                first = dict(gathered[0][key])
                parts = groups_text({value: ranks for value, ranks in groups.items() if value != gathered[0][key]},
                                    lambda value, first=first: hintsmod.difference(dict(value), first))
                parts += f" (against {ranks_text(groups[gathered[0][key]])})"
            else:
                parts = groups_text(groups)
            name = "path" if key == "path" else f"{key}="
            raise DeclarationError(f"ckptio.create was called with different {name} on different ranks: {parts}; "
                                   "every rank must pass the same path, backend=, mode=, stage_dir=, "
                                   "compression= and hints=")




def _check_checkpoint_name(path: str, nprocs: int, check_length: bool) -> None:
    """Local, in close()'s first agreed phase (so an error reaches every rank before anything is written):

    * every rank: ``path`` must name a file. A trailing ``/`` (or a last component ``.``/``..``) names a
      directory; the data would be written to a temporary file beside it and only the final rename would fail;
    * ``check_length`` (rank 0, which creates the temporary file; one file-system call, not one per rank): the
      temporary name (``.NAME.ckptio-tmp-`` + 12 characters: 25 bytes more than the name) must fit in the
      directory's NAME_MAX (``os.pathconf(dir, "PC_NAME_MAX")``, 255 bytes on most Linux file systems), and, under
      Open MPI's OMPIO, the temporary file's whole path must fit in :func:`ompio_path_limit` bytes. OMPIO aborts
      every rank (SIGABRT in its ``sharedfp/lockedfile`` component) on a longer path instead of raising."""
    text = os.fspath(path)
    base = os.path.basename(text)
    if text.endswith(os.sep) or (os.altsep and text.endswith(os.altsep)) or base in ("", ".", ".."):
        raise DeclarationError(f"checkpoint path {text!r} names a directory (it ends with "
                               f"{'/' if base == '' else repr(base)}); give a file name for the checkpoint, "
                               f"e.g. {os.path.join(text.rstrip(os.sep) or '.', 'chk_000010')!r}")
    if not check_length:
        return
    directory = os.path.dirname(os.path.abspath(text))
    extra = len(os.fsencode(f".{TMP_MARK}")) + 12  # the temporary name's bytes besides the checkpoint's name
    try:
        name_max = os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):  # a missing directory is reported by the declare phase, which names it
        name_max = -1
    if 0 < name_max < len(os.fsencode(base)) + extra:
        raise CheckpointIOError(
            f"checkpoint {text}: file name too long: {len(os.fsencode(base))} bytes, and its temporary file's name "
            f"('.' + name + '{TMP_MARK}' + 12 characters) would exceed the limit of {name_max} bytes (NAME_MAX) of "
            f"the file system of {directory}; use a name of at most {name_max - extra} bytes")
    limit = ompio_path_limit(nprocs)
    tmp_path = len(os.fsencode(os.path.join(directory, base))) + extra
    if limit is not None and tmp_path > limit:
        raise CheckpointIOError(
            f"checkpoint {text}: path too long for Open MPI's OMPIO: its temporary file's path would have "
            f"{tmp_path} bytes, and OMPIO aborts every rank on paths of more than {limit} bytes at {nprocs} "
            f"rank(s) (a fixed 256-byte buffer in its sharedfp/lockedfile component); use a shorter directory or "
            f"name (at most {limit - (tmp_path - len(os.fsencode(base)))} bytes here), or ROMIO "
            "(OMPI_MCA_io=romio321)")


def ompio_path_limit(nprocs: int) -> int | None:
    """Local: the longest file path Open MPI's OMPIO opens without aborting the job, or None (another MPI-IO).
    Measured on Open MPI 4.1 (tests/faults/test_edges.py): its ``sharedfp/lockedfile`` component formats
    ``path + ".locktest." + rank`` into a 256-byte buffer (``__sprintf_chk`` aborts beyond it), so the limit is
    256 - 1 - 10 - the digits of the highest rank: 244 bytes at up to 10 ranks."""
    from ckptio.coord.mpi import MPI

    if not MPI.Get_library_version().startswith("Open MPI") or "romio" in os.environ.get("OMPI_MCA_io", ""):
        return None
    return 256 - 1 - len(".locktest.") - len(str(max(nprocs - 1, 0)))


def _naming_rank(exc: CheckpointError, rank: int) -> CheckpointError:
    """``exc`` if its message names ``rank``, else the same error class with "(on rank N)" appended, so that
    a local error read on its own still says where it happened."""
    if f"rank {rank}" in str(exc) or isinstance(exc, CollectiveError):
        return exc
    try:
        return type(exc)(f"{exc} (on rank {rank})")
    except TypeError:  # an error class with another signature: keep it as it is
        return exc


def restaging_writer(path: str, comm, manifest: StageManifest | None) -> Writer:
    """A Writer for a drain at restart (:func:`ckptio.tiers.staging.recover`): backend and attributes as the staged
    checkpoint recorded them, and its series identity. Local."""
    if manifest is None:  # this rank's piece could not be read: the drain's close() raises that on every rank
        return Writer(path, comm)
    writer = Writer(path, comm, backend=manifest.backend, attrs=dict(manifest.attrs))
    if manifest.series is not None:  # the series identity the staged checkpoint was written with
        writer.series_record = SeriesRecord.from_json(manifest.series)
    return writer
