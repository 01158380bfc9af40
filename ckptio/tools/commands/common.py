"""Helpers shared by the serial subcommands: opening a checkpoint in this process alone, reading a variable in
bounded pieces, and progress bars shown only when stdout is a terminal. Local: one process, ``COMM_SELF``."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import numpy as np

from ckptio.errors import CheckpointError

EXIT_OK, EXIT_DIFFERENT, EXIT_ERROR = 0, 1, 2
CHUNK_BYTES = 16 << 20  # the largest piece of one variable read at once (per checkpoint; a compressed block whole)

T = TypeVar("T")


class UsageError(CheckpointError):
    """A command-line input that cannot be used (missing file, not a checkpoint, unknown variable, bad slice):
    exit status 2."""


def checkpoint_backend(path: str):
    """The backend of the checkpoint at ``path``. A missing path, a directory or a file that is not a checkpoint
    raises :class:`UsageError` (exit 2); a damaged checkpoint its CheckpointError."""
    from ckptio.backends import detect_backend
    from ckptio.errors import UnknownFormatError

    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file")
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory (use 'ckptio ls {path}')")
    try:
        return detect_backend(path)
    except UnknownFormatError as exc:
        raise UsageError(str(exc)) from None


def open_serial(path: str, verify: bool = True):
    """Open ``path`` as a Reader in this process alone (``MPI.COMM_SELF``; no mpirun needed); errors as
    :func:`checkpoint_backend`."""
    from ckptio.api import open as ck_open

    checkpoint_backend(path)
    from ckptio.coord.mpi import MPI

    return ck_open(path, MPI.COMM_SELF, verify=verify)


def variable_or_error(reader, name: str):
    """The VariableInfo of ``name``, or a UsageError listing what the checkpoint holds."""
    if name not in reader.variables:
        have = ", ".join(sorted(reader.variables)) or "no variables"
        raise UsageError(f"variable {name!r} is not in {reader.path} (it has: {have})")
    return reader.variables[name]


def read_box(reader, name: str, offset: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    """Read one hyperslab (every kind, segments included: their global 1-D array) with the reader's
    aggregated, bounded-buffer read on COMM_SELF."""
    return reader.read(name, offset=list(offset), shape=list(shape))


def progress(items: Iterable[T], total: int | None = None, desc: str = "", unit: str = "it") -> Iterable[T]:
    """``items`` wrapped in a tqdm progress bar (on stderr) when stdout is a terminal and tqdm is installed;
    otherwise ``items`` unchanged, so pipes, files and tests see no progress output."""
    if not sys.stdout.isatty():
        return items
    try:
        from tqdm import tqdm
    except ImportError:  # an optional nicety: never a reason to fail
        return items
    return tqdm(items, total=total, desc=desc, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True)


def guarded(command: str) -> Callable[[Callable[[Any], int]], Callable[[Any], int]]:
    """Decorator for a command's ``run``: an unexpected exception (a bug, not a bad input) is reported as
    ``internal error`` with exit status 2, never Python's traceback status 1, which would read as "different"."""
    def wrap(run: Callable[[Any], int]) -> Callable[[Any], int]:
        @functools.wraps(run)
        def guarded_run(args: Any) -> int:
            try:
                return run(args)
            except BrokenPipeError:
                raise  # the reader of stdout left: ckptio.tools.cli.main ends quietly
            except Exception as exc:
                import traceback

                traceback.print_exc()
                return error_exit(command, RuntimeError(f"internal error ({type(exc).__name__}: {exc}); "
                                                        "please report it"))
        return guarded_run
    return wrap


def error_exit(command: str, exc: BaseException) -> int:
    """Print ``ckptio COMMAND: error: ...`` on stderr and return exit status 2."""
    print(f"ckptio {command}: error: {exc}", file=sys.stderr)
    return EXIT_ERROR


def jsonable(value: Any) -> Any:
    """numpy values as plain JSON types (complex as [re, im])."""
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()] if value.ndim else jsonable(value.item())
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, complex):
        return [value.real, value.imag]
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value
