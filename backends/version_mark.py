"""A backend's layout version mark (the HDF5 ``/ckptio`` attribute ``format_version``, the CDF global attribute
``ckptio_format_version``): what decides between "written by a newer ckptio" and "damaged" when the mark says a
version newer than this ckptio reads. The mark is outside the metadata document's checksum, so one flipped byte
there (a stranger's byte-flip sweep: 9223372036854775807 and 65282) read as a newer format, and the user was told
to upgrade ckptio for a damaged file. Now a newer mark is a newer format only when the rest of the file is not
what this ckptio reads, or when the checksummed document records the newer version too; a file whose framing,
checksum and document this ckptio reads, recording a version it supports, has a damaged mark. Serial, no MPI."""

from __future__ import annotations

import json

from ckptio.errors import CheckpointError, CorruptCheckpointError, FormatVersionError


def newer(found: object, supported: int) -> int | None:
    """Local: the mark's version when it is newer than ``supported`` (an int), else None."""
    return found if isinstance(found, int) and found > supported else None


def newer_layout(path: str, label: str, found: int, supported: int) -> FormatVersionError:
    """The error for a file of a layout newer than this ckptio reads."""
    return FormatVersionError(f"{path}: ckptio {label} layout version {found} is newer than this ckptio supports "
                              f"(version {supported})")


def verdict(path: str, label: str, found: int, supported: int, text: bytes) -> CheckpointError:
    """Local: the error for a file whose mark says ``found`` (> ``supported``) and whose framing and metadata
    document (``text``, its checksum matched) this ckptio read: FormatVersionError when the document records a
    newer ``backend_format_version`` too, else CorruptCheckpointError (the mark is damaged)."""
    try:
        recorded = json.loads(text).get("backend_format_version")
    except (ValueError, AttributeError, UnicodeDecodeError):
        recorded = None
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded > supported:
        return newer_layout(path, label, found, supported)
    says = f"version {recorded}" if isinstance(recorded, int) else "a version this ckptio reads"
    return CorruptCheckpointError(f"{path}: the {label} layout version mark says {found}, but the checkpoint's "
                                  f"checksummed metadata says {says}: the mark is damaged")
