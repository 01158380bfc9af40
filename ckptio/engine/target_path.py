"""Where a checkpoint may be created: the checks the planning rank makes on the target path in the first agreed
phase of a write (:mod:`ckptio.engine.write`, also a staged checkpoint's: :mod:`ckptio.tiers.staging`), before
any file is touched, so that a bad path is one clear error on every rank and no file ckptio did not create is
ever replaced. Local (the planning rank)."""

from __future__ import annotations

import os
import stat

from ckptio.pathcheck import symlink_problem


def directory_problem(path: str) -> str | None:
    """Why a checkpoint cannot be created at ``path`` (checked on the planning rank before any file is touched):
    the directory, or a file at ``path`` that the commit's rename would replace although ckptio did not create it
    (:func:`existing_file_problem`)."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"{path}: is a directory; give a file name for the checkpoint"
    existing = existing_file_problem(path)
    if existing:
        return existing
    if not os.path.exists(directory):
        why = symlink_problem(directory)  # a loop or a dangling link is not "does not exist"
        return f"{path}: {why}" if why else f"{path}: directory {directory} does not exist"
    if not os.path.isdir(directory):
        return f"{path}: {directory} is not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"{path}: directory {directory} is not writable"
    return None


def existing_file_problem(path: str) -> str | None:
    """Local (the planning rank): why the file already at ``path`` must not be replaced, or None (nothing there, or
    a ckptio checkpoint: complete, damaged, of a newer version or rewritten by another tool, which a new checkpoint
    of the same name replaces, as before; one a lookup marked damaged is moved aside by the commit instead,
    :func:`ckptio.engine.damage_marks.move_aside`). Refused (outside trial, 2026-12-06: a text file and a symbolic
    link at the name were silently replaced by the commit's rename): a symbolic link (the rename would replace the
    link, not its target), anything but a regular file, and a file in no ckptio format (a text file, a plain HDF5
    or netCDF file other software wrote): ckptio never deletes a file it did not create."""
    from ckptio.backends import detect_backend
    from ckptio.errors import CheckpointError, UnknownFormatError

    try:
        mode = os.lstat(path).st_mode
    except OSError:  # nothing there (or not reachable: the directory checks say why)
        return None
    keep = "ckptio never replaces a file it did not create: move it away or give the checkpoint another name"
    if stat.S_ISLNK(mode):
        return f"{path}: is a symbolic link; the checkpoint would replace the link, not its target ({keep})"
    if not stat.S_ISREG(mode):
        return f"{path}: exists and is not a regular file ({keep})"
    try:
        detect_backend(path, thorough=True).read_document(path)
    except UnknownFormatError as exc:
        return f"{path}: exists and is not a ckptio checkpoint ({exc}); {keep}"
    except (CheckpointError, OSError):  # a damaged or unreadable checkpoint of ckptio's: replaced, as before
        return None
    return None


def damaged_checkpoint(path: str) -> str | None:
    """The planning rank, right before a commit's rename onto ``path``: why the file now at ``path`` is a damaged
    ckptio checkpoint (its metadata does not read: truncated, a damaged header or index), else None (nothing
    there, a complete checkpoint, or no checkpoint at all, which :func:`existing_file_problem` refused). A damaged
    one is moved aside rather than replaced (:func:`ckptio.engine.damage_marks.move_aside`): it may be all that is
    left of a run (outside trial 15: a run that started over wrote its steps over them)."""
    from ckptio.backends import detect_backend
    from ckptio.errors import CapabilityError, CheckpointError, UnknownFormatError

    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        detect_backend(path, thorough=True).read_document(path)
    except (UnknownFormatError, CapabilityError, FileNotFoundError):  # not ckptio's, or not damage
        return None
    except (CheckpointError, OSError) as exc:
        return str(exc)
    return None


__all__ = ["damaged_checkpoint", "directory_problem", "existing_file_problem"]
