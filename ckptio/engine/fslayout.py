"""Stripe layouts that take effect: ckptio sets the layout of a checkpoint file itself where the file system lets
a program do so, and records what the file system really gave (issue 26). No MPI here.

Why: ``striping_factor``/``striping_unit`` are MPI-IO *hints*. They change the file only where the MPI-IO layer
has a driver for the file system that applies them (ROMIO's ``ad_lustre``/``ad_gpfs``, OMPIO's ``fs/lustre``),
and ``MPI_File_get_info`` echoes them back whether or not anything applied them (OMPIO does), so "hints got"
proves nothing about the file. Here the layout is fixed on the *empty* file before the collective open, and
read back from the file system afterwards.

Per file system (:func:`detect`: ``statfs`` f_type, and for FUSE the ``ceph.*`` virtual xattrs):

``cephfs`` (kernel client 0x00c36400, or ``ceph-fuse``, which shows as FUSE 0x65735546)
    ``ceph.file.layout`` set on the empty file: ``stripe_count`` and ``stripe_unit`` as ckptio chose,
    ``object_size`` the smallest multiple of the unit that is at least 4 MiB (Ceph's default object size). A
    file that already has data refuses a new layout; a directory's ``ceph.dir.layout`` is what new files
    inherit. Read back with ``getxattr(path, "ceph.file.layout")``.
``lustre`` (0x0bd00bd0)
    ``lfs setstripe -c N -S unit`` on the (not yet existing) file when ``lfs`` is installed, read back with
    ``lfs getstripe``; without ``lfs`` the MPI hints are all there is (recorded as such).
``gpfs`` (0x47504653)
    Nothing per file: GPFS stripes every file over all its disks in blocks of the file system's block size;
    the hints only tune ROMIO's ``ad_gpfs``. The block size is recorded.
anything else (ext4, xfs, tmpfs, NFS, plain FUSE ...)
    No striping; the record says so.

``CKPTIO_LAYOUT`` chooses: ``set`` (default: apply ckptio's choice), ``inherit`` (leave the directory's
layout, e.g. a site default, and record it: the restart aggregators then follow it) or ``off`` (neither set
nor record). Setting a layout never fails a checkpoint: when it cannot be done the record says why.

The record, ``layout.fs`` of the document (:class:`ckptio.model.fs_layout_record.FsLayoutRecord`; older files
have none)::

    {"type": "cephfs", "mode": "set", "method": "ceph.file.layout xattr",
     "asked": {"stripe_count": 4, "stripe_unit": 1048576, "object_size": 4194304},
     "got": {"stripe_count": 4, "stripe_unit": 1048576, "object_size": 4194304, "pool": "cephfs_data"},
     "reason": null}

``got`` is null where the file system has no readable layout; ``reason`` says why nothing (or not what was
asked) was set.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from ckptio.coord import hints as hintsmod
from ckptio.errors import CheckpointIOError
from ckptio.model.document import CheckpointDocument, LayoutRecord
from ckptio.model.fs_layout_record import FsLayoutRecord, StripeLayout

ENV_LAYOUT = "CKPTIO_LAYOUT"
MODES = ("set", "inherit", "off")
CEPH_OBJECT_SIZE = 4 << 20   # Ceph's default object size; ckptio's objects are at least this big
CEPH_MIN_UNIT = 64 << 10     # CephFS refuses stripe units that are not a multiple of 64 KiB

MAGIC: dict[int, str] = {
    0x00C36400: "cephfs", 0x0BD00BD0: "lustre", 0x47504653: "gpfs", 0x65735546: "fuse", 0xEF53: "ext4",
    0x58465342: "xfs", 0x01021994: "tmpfs", 0x6969: "nfs", 0x794C7630: "overlayfs", 0x9123683E: "btrfs",
    0xFF534D42: "cifs", 0x2FC12FC1: "zfs", 0x5346414F: "afs", 0x858458F6: "ramfs",
}


class _Statfs(ctypes.Structure):
    # struct statfs (Linux, 64-bit): f_type first; the rest is room for the kernel to fill
    _fields_ = [("f_type", ctypes.c_long), ("f_bsize", ctypes.c_long), ("rest", ctypes.c_byte * 240)]


def statfs_magic(path: str) -> tuple[int, int]:
    """Local: (f_type, f_bsize) of the file system holding ``path``; OSError when statfs fails."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = _Statfs()
    if libc.statfs(os.fsencode(path), ctypes.byref(buf)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return buf.f_type & 0xFFFFFFFF, int(buf.f_bsize)


def _is_ceph(directory: str) -> bool:
    """Local: the directory answers CephFS's virtual xattrs (``ceph.dir.entries`` exists on every directory)."""
    try:
        os.getxattr(directory, "ceph.dir.entries")
        return True
    except OSError:
        return False


def detect(directory: str) -> str:
    """Local: the file system type of ``directory``: a name from :data:`MAGIC` (``cephfs`` also through
    ``ceph-fuse``), else the magic in hex."""
    magic, _bsize = statfs_magic(directory)
    name = MAGIC.get(magic, f"0x{magic:08x}")
    if name == "fuse" and _is_ceph(directory):
        return "cephfs"
    return name


def mode(environ: Mapping[str, str] | None = None) -> str:
    """``CKPTIO_LAYOUT`` (``set`` when unset); an unknown value is recorded as a reason and treated as ``set``."""
    from ckptio import settings

    return settings.raw(ENV_LAYOUT, environ).strip().lower()


def ceph_object_size(unit: int) -> int:
    """The object size ckptio asks for with stripe unit ``unit``: the smallest multiple of it >= 4 MiB."""
    return max(1, -(-CEPH_OBJECT_SIZE // unit)) * unit


def parse_ceph_layout(text: str) -> dict[str, Any]:
    """``"stripe_unit=1048576 stripe_count=4 object_size=4194304 pool=cephfs_data"`` -> a dict (ints as ints)."""
    out: dict[str, Any] = {}
    for item in text.split():
        key, _, value = item.partition("=")
        out[key] = int(value) if value.isdigit() else value
    return out


def read_ceph(path: str, name: str = "ceph.file.layout") -> dict[str, Any] | None:
    """Local: the CephFS layout of ``path`` (``ceph.dir.layout`` for a directory's own), None if it has none."""
    try:
        return parse_ceph_layout(os.getxattr(path, name).decode())
    except OSError:
        return None


def directory_layout(directory: str) -> dict[str, Any] | None:
    """Local: the layout a new file in ``directory`` gets (CephFS: the nearest directory up the tree with a
    ``ceph.dir.layout``; Lustre: ``lfs getstripe -d``), or None where there is none to read."""
    fs = detect(directory)
    if fs == "cephfs":
        d = os.path.abspath(directory)
        while True:
            got = read_ceph(d, "ceph.dir.layout")
            if got is not None or not _is_ceph(os.path.dirname(d)) or d == os.path.dirname(d):
                return got
            d = os.path.dirname(d)
    if fs == "lustre":
        return _lfs_getstripe(directory, default=True)
    return None


# ------------------------------------------------------------------------------------------------- Lustre
def _lfs_getstripe(path: str, default: bool = False) -> dict[str, Any] | None:
    lfs = shutil.which("lfs")
    if lfs is None:
        return None
    try:
        out = {}
        for flag, key in (("-c", "stripe_count"), ("-S", "stripe_unit")):
            text = subprocess.run([lfs, "getstripe", *(["-d"] if default else []), flag, path], check=True,
                                  capture_output=True, text=True, timeout=30).stdout.split()
            out[key] = int(text[-1])
        return out
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def _lfs_setstripe(path: str, count: int, unit: int) -> str | None:
    """Create ``path`` (must not exist) with the layout; None on success, else why not."""
    lfs = shutil.which("lfs")
    if lfs is None:
        return "lfs is not installed: only the MPI hints (striping_factor, striping_unit) can set the layout"
    try:
        subprocess.run([lfs, "setstripe", "-c", str(count), "-S", str(unit), path], check=True,
                       capture_output=True, text=True, timeout=60)
        return None
    except subprocess.CalledProcessError as exc:
        return f"lfs setstripe failed: {(exc.stderr or '').strip() or exc.returncode}"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"lfs setstripe failed: {exc}"


# -------------------------------------------------------------------------------------------- set and read
def asked_layout(fs: str, count: int, unit: int) -> dict[str, int]:
    """What ckptio asks of file system ``fs`` for stripe count ``count`` and unit ``unit``."""
    asked = {"stripe_count": count, "stripe_unit": unit}
    if fs == "cephfs":
        asked["object_size"] = ceph_object_size(unit)
    return asked


def set_ceph(path: str, asked: Mapping[str, int]) -> str | None:
    """Local: set the CephFS layout of the existing (empty) file ``path``; None on success, else why not. The
    object size first when it grows (a unit may not exceed it), then unit and count."""
    layout = StripeLayout(dict(asked))
    unit = layout.stripe_unit or 0
    if unit % CEPH_MIN_UNIT:
        return (f"stripe unit {unit} is not a multiple of {CEPH_MIN_UNIT} (64 KiB), which CephFS "
                "requires: the layout was not set")
    current = read_ceph(path) or {}
    order = ["object_size", "stripe_unit", "stripe_count"]
    if (layout.object_size or 0) < int(current.get("object_size", 0)):
        order = ["stripe_unit", "stripe_count", "object_size"]
    for key in order:
        if current.get(key) == asked[key]:
            continue
        try:
            os.setxattr(path, f"ceph.file.layout.{key}", str(asked[key]).encode())
        except OSError as exc:
            why = os.strerror(exc.errno) if exc.errno else str(exc)
            if exc.errno in (errno.ENOTEMPTY, errno.EBUSY) or os.path.getsize(path) > 0:
                why += " (a CephFS file that already has data keeps its layout)"
            return f"setxattr ceph.file.layout.{key}={asked[key]} refused: {why}"
    return None


def read_back(path: str, fs: str) -> dict[str, Any] | None:
    """Local: the layout the file system reports for the file ``path`` (None where it has none to report)."""
    if fs == "cephfs":
        return read_ceph(path)
    if fs == "lustre":
        return _lfs_getstripe(path)
    if fs == "gpfs":
        try:
            return {"block_size": statfs_magic(path)[1]}
        except OSError:
            return None
    return None


def apply(path: str, count: int, unit: int, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Local (rank 0 of a checkpoint): create ``path`` if it does not exist, with stripe count ``count`` and
    unit ``unit`` where its file system lets a program set them (see the module docstring), and return the
    record (without ``got``: :func:`finish` adds it once the data is written). Never raises because a layout
    could not be set: the record's ``reason`` says why; raises CheckpointIOError only when the file cannot be
    created at all (the backend's create would fail the same way)."""
    chosen = mode(environ)
    directory = os.path.dirname(os.path.abspath(path))
    record: dict[str, Any] = {"type": None, "mode": chosen, "method": None, "asked": None, "got": None,
                              "reason": None}
    if chosen == "off":
        record["reason"] = f"{ENV_LAYOUT}=off: layout neither set nor read"
        return record
    try:
        fs = detect(directory)
    except OSError as exc:
        fs = None
        record["reason"] = f"statfs failed: {exc}"
    record["type"] = fs
    notes = []  # a note that comes before the outcome (an unknown mode) stays in front of it
    if chosen not in MODES:
        notes.append(f"{ENV_LAYOUT}={chosen!r} is not one of {', '.join(MODES)}: treated as 'set'")
        chosen = "set"
    record = _apply(path, fs, chosen, count, unit, record)
    record["reason"] = "; ".join(notes + ([record["reason"]] if record["reason"] else [])) or None
    return record


def _apply(path: str, fs: str | None, chosen: str, count: int, unit: int, record: dict[str, Any]) -> dict[str, Any]:
    """:func:`apply` once the file system and the mode are known."""
    if fs == "lustre" and chosen == "set" and not os.path.exists(path):
        record["asked"] = asked_layout(fs, count, unit)
        why = _lfs_setstripe(path, count, unit)
        record["method"] = "lfs setstripe" if why is None else "MPI hints (striping_factor, striping_unit)"
        record["reason"] = why or record["reason"]
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
    except OSError as exc:  # (/proc, /sys, a read-only mount the access check let through): say what, not the name
        directory = os.path.dirname(os.path.abspath(path))
        raise CheckpointIOError(f"cannot create files in {directory}: {exc.strerror or exc} (creating the "
                                f"checkpoint's temporary file {os.path.basename(path)}); write checkpoints to a "
                                "directory of a regular file system") from None
    os.close(fd)
    if fs == "lustre" and chosen == "inherit":
        record.update(method="inherited from the directory", reason=f"{ENV_LAYOUT}=inherit")
    if fs is None or fs == "lustre":
        return record
    if fs == "cephfs":
        if chosen == "inherit":
            record.update(method="inherited from the directory", reason=f"{ENV_LAYOUT}=inherit")
            return record
        record["asked"] = asked_layout(fs, count, unit)
        why = set_ceph(path, record["asked"])
        record.update(method="ceph.file.layout xattr", reason=why)
    elif fs == "gpfs":
        record.update(method="MPI hints (ROMIO ad_gpfs)", reason="GPFS has no per-file stripe count: every file "
                      "is striped over all disks in blocks of the file system's block size")
    else:
        record["reason"] = f"{fs} has no per-file striping: the layout was not set (the MPI hints are ignored there)"
    return record


def finish(record: Mapping[str, Any] | None, path: str) -> dict[str, Any] | None:
    """Local (rank 0, after the data is written): ``record`` with ``got``, the layout read back from the file."""
    if record is None:
        return None
    out = dict(record)
    if out.get("mode") != "off" and out.get("type"):
        out["got"] = read_back(path, out["type"])
    return out


def prepare(path: str, hints: Mapping[str, str]) -> dict[str, Any]:
    """Rank 0 only, inside an agreed phase (:func:`ckptio.coord.bcast_from_root`), before the backend's
    collective create: the empty file ``path`` with ckptio's chosen layout (``striping_factor`` and
    ``striping_unit`` of ``hints``, the same values the MPI hints carry)."""
    count, unit = hintsmod.stripe_layout(hints)
    return apply(path, count, unit)


# --------------------------------------------------------------------------------------- using the record
def granule(layout: Mapping[str, Any]) -> int:
    """The smallest file range made of whole storage objects of a stripe layout (``stripe_count``,
    ``stripe_unit``, CephFS's ``object_size``): :meth:`ckptio.model.fs_layout_record.StripeLayout.granule`.
    ValueError when the layout has no positive count and unit."""
    size = StripeLayout(dict(layout)).granule()
    if size is None:
        raise ValueError(f"layout {dict(layout)} has no stripe count and unit")
    return size


def restart_layout(source: CheckpointDocument | LayoutRecord | None) -> tuple[int, int]:
    """(stripe count, alignment in bytes) the restart uses to choose aggregators and cut their file domains, from
    a checkpoint's document (or its layout record): the real layout where the file system reported one (domains
    then cover whole objects, see :meth:`StripeLayout.granule`; a damaged report is ignored), else what ckptio
    chose at write (the hints)."""
    layout = source.layout if isinstance(source, CheckpointDocument) else source
    got = None if layout is None or layout.fs is None else layout.fs.got_layout()
    if got is not None:
        return got.stripe_count, got.granule()  # type: ignore[return-value]
    if layout is None:
        return 1, hintsmod.DEFAULT_STRIPING_UNIT
    return layout.stripe_count or 1, layout.stripe_unit or hintsmod.DEFAULT_STRIPING_UNIT


def write_alignment(path: str, hints: Mapping[str, str]) -> int:
    """Rank 0, planning a checkpoint at ``path``: the alignment of each rank's region in the file. CephFS (when
    ckptio sets the layout): one :func:`granule` of the layout it will set, so that no two ranks' regions share
    an object when each is at least that long; ``inherit``: the granule of the directory's layout; elsewhere
    the stripe unit (as before)."""
    count, unit = hintsmod.stripe_layout(hints)
    chosen = mode()
    if chosen == "off":
        return unit
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fs = detect(directory)
        if fs != "cephfs":
            return unit
        if chosen == "inherit":
            got = directory_layout(directory)
            return granule(got) if got and "stripe_count" in got else unit
        return granule(asked_layout(fs, count, unit))
    except (OSError, ValueError, KeyError):
        return unit


def check_record(fs: Any) -> None:
    """ValueError when ``meta["layout"]["fs"]`` is not the typed record (:class:`FsLayoutRecord`)."""
    FsLayoutRecord.from_json(fs)


def show(fs: Mapping[str, Any] | None) -> str:
    """One line for ``ckptio inspect``'s "layout got" (``fs``: the record in its JSON form, as the report has it)."""
    if not fs:
        return "(not recorded)"
    record = FsLayoutRecord.from_json(fs)
    got = record.got
    text = " ".join(f"{k}={v}" for k, v in got.values.items()) if got is not None else "(none)"
    text += f"  [{record.type}, {record.method or 'not set'}]"
    if record.reason:
        text += f"  why: {record.reason}"
    return text


def recorded(prepared: tuple[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """Rank 0, building the metadata: ``{"fs": record with got}`` for ``(path, record of prepare)``, ``{}``
    when nothing was prepared."""
    if prepared is None:
        return {}
    path, record = prepared
    return {"fs": finish(record, path)}


def planned_layout(directory: str, count: int, unit: int) -> tuple[int, int, str]:
    """Local (``ckptio plan --directory``): (stripe count, stripe unit, where from) of a checkpoint ckptio would
    write in ``directory`` choosing ``count`` and ``unit``: its own where it sets the layout itself (CephFS;
    Lustre with ``lfs``), else the directory's layout where there is one to read (``CKPTIO_LAYOUT=inherit``,
    or a file system where only the MPI hints could change it), else its own."""
    chosen = mode()
    try:
        fs = detect(directory)
    except OSError as exc:
        return count, unit, f"ckptio's choice (statfs of {directory} failed: {exc})"
    sets_itself = chosen == "set" and (fs == "cephfs" or (fs == "lustre" and shutil.which("lfs") is not None))
    if sets_itself:
        return count, unit, f"ckptio's choice, which it sets on {fs}"
    got = StripeLayout(directory_layout(directory) or {}) if chosen != "off" else StripeLayout({})
    if got.stripe_count is not None and got.stripe_unit is not None:
        why = f"{ENV_LAYOUT}={chosen}" if chosen != "set" else "ckptio cannot set it there"
        return got.stripe_count, got.stripe_unit, f"the directory layout of {directory} on {fs} ({why})"
    return count, unit, f"ckptio's choice (no directory layout to read on {fs})"
