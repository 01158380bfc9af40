"""``ckptio convert SRC DST --backend B``: rewrite a checkpoint in another format (or the same one).

One process, ``MPI.COMM_SELF``. Streamed: SRC is read once, variable by variable, in pieces of at most
:data:`~ckptio.tools.commands.common.CHUNK_BYTES` (:mod:`ckptio.tools.commands.stream`, every block checksum
verified), each
piece copied into the file-backed spool of the writer blocks it meets (``numpy.memmap`` in a temporary directory
next to DST, removed afterwards), so resident memory stays bounded whatever the checkpoint size; the spool needs
as much free disk space as the data. The result keeps the attributes and the block decomposition of every array
variable (same offsets and shapes, all now written by rank 0); a per-rank segment variable becomes one segment
(COMM_SELF has one rank), holding the same values. DST is written atomically through ``ckptio.create`` (a
temporary, renamed on commit), then every block checksum of DST is checked (``inspect --verify``) and, for array
variables, compared with SRC's. An existing DST is refused unless ``--force``.

``ckptio convert SRC DST --to flash`` writes DST instead as an HDF5 file in FLASH's checkpoint layout, which yt's
FLASH frontend loads (``yt.load(DST)``; name it ``..._hdf5_chk_NNNN`` as FLASH does): the grid variables
(block, z, y, x), the bounding boxes of variable ``bbox`` and the domain from the attributes ``time``,
``geometry``, ``xmin`` .. ``zmax``, ``nblockx`` .. ``nblockz`` (see :mod:`ckptio.tools.flash_layout`). Variables that
are not grid variables are listed as not converted. ``--force`` replaces only a file ckptio wrote.
Exit: 0 converted and checked, 1 SRC damaged, 2 usage error / missing SRC / DST exists / check failed / SRC lacks
what a FLASH file needs.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptio.errors import CheckpointError, CorruptCheckpointError, IncompleteCheckpointError
from ckptio.model.block_table import BlockTable
from ckptio.model.document import VariableRecord
from ckptio.model.layout import Box
from ckptio.tools.commands.common import EXIT_DIFFERENT, EXIT_OK, UsageError, error_exit, guarded, progress
from ckptio.tools.commands.stream import Source
from ckptio.tools.flash_layout import FlashSummary

NAME = "convert"


@dataclass(frozen=True)
class ConvertSummary:
    """What :func:`convert` wrote: ``variables`` and writer ``blocks`` of DST, and why DST does not check out
    (``problems``, empty when every checksum of DST was read back and matches SRC's)."""

    src: str
    dst: str
    backend: str
    variables: int
    blocks: int
    problems: list[str]


def _spool(dtype: np.dtype, shape: tuple[int, ...], directory: str, count: int) -> np.ndarray:
    """A new file-backed array (or an in-memory one when empty)."""
    if math.prod(shape) == 0:
        return np.empty(shape, dtype)
    return np.lib.format.open_memmap(os.path.join(directory, f"{count}.npy"), mode="w+", dtype=dtype, shape=shape)


def _fill(source: Source, name: str, targets: list[tuple[Box, np.ndarray]]) -> None:
    """Stream variable ``name`` once and copy every piece into the target blocks it meets."""
    for box, arr in source.pieces(name):
        for block, spool in targets:
            common = block.intersect(box)
            if common is not None:
                spool[common.relative_to(block)] = arr[common.relative_to(box)]
    for _block, spool in targets:
        if isinstance(spool, np.memmap):
            spool.flush()


def _variable_metadata(writer, var: VariableRecord) -> dict[str, Any]:
    """Per-variable ``dims``/``attrs`` of SRC as keyword arguments of ``writer.write``, when both the checkpoint
    and this ckptio's Writer have them (a checkpoint without them gets none)."""
    import inspect

    accepted = inspect.signature(writer.write).parameters
    declared = {"dims": list(var.dims or ()), "attrs": dict(var.attrs or {})}
    return {k: v for k, v in declared.items() if v and k in accepted}


def _block_boxes(blocks: BlockTable) -> list[Box]:
    return [Box(tuple(o), tuple(s)) for o, s in zip(blocks.offset.tolist(), blocks.shape.tolist(), strict=True)]


def _block_sums(blocks: BlockTable) -> list[tuple[tuple[int, ...], int]]:
    """Every block's (offset, checksum), sorted: the decomposition and the data, whichever rank wrote what."""
    return sorted(zip(map(tuple, blocks.offset.tolist()), blocks.checksum.tolist(), strict=True))


def convert(src: str, dst: str, backend: str, force: bool = False) -> ConvertSummary:
    """Local (one process): convert ``src`` to ``dst`` in ``backend``'s format and check it. Returns a summary.
    Raises UsageError / CheckpointError."""
    from ckptio.api import create
    from ckptio.backends import detect_backend, get_backend, known_backends
    from ckptio.coord.mpi import MPI

    if backend not in known_backends():
        raise UsageError(f"unknown backend {backend!r} (known: {', '.join(known_backends())})")
    if os.path.isdir(dst):
        raise UsageError(f"{dst} is a directory")
    if os.path.lexists(dst):
        if not force:
            raise UsageError(f"{dst} exists (use --force to replace it)")
        try:  # a ckptio checkpoint whose metadata reads back: a file in a checkpoint FORMAT (any HDF5 or CDF
            detect_backend(dst, thorough=True).read_document(dst)  # file) that ckptio did not write is user data
        except (CheckpointError, OSError):
            raise UsageError(f"{dst} exists and is not a complete ckptio checkpoint: not replaced, even with "
                             "--force (ckptio never deletes a file it did not create)") from None
    if os.path.exists(src) and os.path.exists(dst) and os.path.samefile(src, dst):
        raise UsageError(f"{src} and {dst} are the same file")
    get_backend(backend).require_writable()
    blocks_written = 0
    with Source(src) as source:
        meta = source.meta
        spool_dir = tempfile.mkdtemp(prefix=".ckptio-convert-", dir=os.path.dirname(os.path.abspath(dst)))
        try:
            writer = create(dst, MPI.COMM_SELF, backend=backend, attrs=dict(meta.attrs))
            with writer:
                for name, var in progress(list(meta.variables.items()), desc="convert", unit="var"):
                    shape, dtype = source.shape(name), source.dtype(name)
                    extra = _variable_metadata(writer, var)
                    if var.is_segment:  # one rank here: the writers' segments become one
                        targets = [(Box((0,) * len(shape), shape), _spool(dtype, shape, spool_dir, blocks_written))]
                        _fill(source, name, targets)
                        writer.write(name, targets[0][1], **extra)
                        blocks_written += 1
                        continue
                    targets = []
                    for box in _block_boxes(var.block_table()) or [Box((0,) * len(shape), shape)]:
                        targets.append((box, _spool(dtype, box.shape, spool_dir, blocks_written)))
                        blocks_written += 1
                    _fill(source, name, targets)
                    for box, spool in targets:
                        writer.write(name, spool, offset=box.offset, global_shape=shape, **extra)
        finally:
            shutil.rmtree(spool_dir, ignore_errors=True)
    problems = []
    with Source(dst) as result:  # every block checksum of DST, streamed like SRC was
        out_meta = result.meta
        for name in result.variables:
            try:
                for _piece in result.pieces(name):
                    pass
            except CheckpointError as exc:
                problems.append(str(exc))
    for name, var in meta.variables.items():
        if var.is_segment:
            continue
        new = out_meta.variables.get(name)
        if new is None:
            problems.append(f"variable {name!r} missing from {dst}")
            continue
        if _block_sums(var.block_table()) != _block_sums(new.block_table()):
            problems.append(f"variable {name!r}: block checksums of {dst} differ from {src}'s")
    return ConvertSummary(src, dst, backend, len(meta.variables), blocks_written, problems)


def convert_to_flash(src: str, dst: str, force: bool = False) -> FlashSummary:
    """Local (one process): write ``src`` to ``dst`` in FLASH's layout (:func:`ckptio.tools.flash_layout.write_flash`,
    every block checksum of SRC verified on the way). Raises UsageError / CheckpointError; DST is untouched then."""
    from ckptio.tools.flash_layout import is_flash_file, write_flash

    try:
        import h5py  # noqa: F401 - the FLASH file is written with it (serial h5py is enough)
    except ImportError:
        raise UsageError("convert --to flash needs h5py (the serial wheel is enough): pip install h5py, or "
                         "pip install 'ckptio[yt]'") from None
    if os.path.isdir(dst):
        raise UsageError(f"{dst} is a directory")
    if os.path.lexists(dst):
        if not force:
            raise UsageError(f"{dst} exists (use --force to replace it)")
        if not is_flash_file(dst):
            raise UsageError(f"{dst} exists and is not a FLASH file ckptio wrote: not replaced, even with --force "
                             "(ckptio never deletes a file it did not create)")
    if os.path.exists(src) and os.path.exists(dst) and os.path.samefile(src, dst):
        raise UsageError(f"{src} and {dst} are the same file")
    with Source(src) as source:
        return write_flash(source, dst, progress=progress)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(NAME, help="rewrite a checkpoint in another format (streamed, checked)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src")
    p.add_argument("dst")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--backend", help="format of DST: mpiio, hdf5 or pnetcdf (a ckptio checkpoint)")
    to.add_argument("--to", choices=["flash"], help="flash: an HDF5 file in FLASH's checkpoint layout (yt.load)")
    p.add_argument("--force", action="store_true", help="replace DST if it exists")
    p.set_defaults(func=run)


@guarded(NAME)
def run(args: argparse.Namespace) -> int:
    if args.to == "flash":
        return _run_flash(args)
    try:
        summary = convert(args.src, args.dst, args.backend, args.force)
    except (CorruptCheckpointError, IncompleteCheckpointError) as exc:
        print(f"ckptio {NAME}: {args.src} is damaged, nothing written: {exc}", file=sys.stderr)
        return EXIT_DIFFERENT
    except (CheckpointError, OSError) as exc:
        return error_exit(NAME, exc)
    if summary.problems:
        os.unlink(args.dst)  # this command created it: a result that does not check out is not left behind
        return error_exit(NAME, CheckpointError(f"{args.dst} was written but did not check out, so it was "
                                                "removed: " + "; ".join(summary.problems[:5])))
    print(f"converted {args.src} -> {args.dst} ({args.backend}): {summary.variables} variables, "
          f"{summary.blocks} blocks, every checksum checked")
    return EXIT_OK


def _run_flash(args: argparse.Namespace) -> int:
    try:
        summary = convert_to_flash(args.src, args.dst, args.force)
    except (CorruptCheckpointError, IncompleteCheckpointError) as exc:
        print(f"ckptio {NAME}: {args.src} is damaged, nothing written: {exc}", file=sys.stderr)
        return EXIT_DIFFERENT
    except (CheckpointError, OSError) as exc:
        return error_exit(NAME, exc)
    skipped = f"; not converted (not grid variables): {', '.join(summary.skipped)}" if summary.skipped else ""
    print(f"converted {args.src} -> {args.dst} (FLASH layout): {len(summary.variables)} grid variables "
          f"({', '.join(summary.variables)}), {summary.blocks} blocks, every source checksum checked{skipped}")
    return EXIT_OK
