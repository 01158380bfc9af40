"""Page cache control for the benchmarks: sync, evict (``POSIX_FADV_DONTNEED``) and measure residency (``mincore``).

Why this works: after ``fsync`` every page of a file is clean, and the kernel drops clean pages on
``posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)``. ``mincore(2)`` on a shared read-only mapping of the file then
tells which pages are still resident, so each "cold" read is checked, not assumed. Only the guest's page cache is
controlled: a hypervisor or a storage server may still cache the blocks (see benchmarks/README.md, "Page cache").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from collections.abc import Iterable

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
_MAP_FAILED = ctypes.c_void_p(-1).value
PAGE = os.sysconf("SC_PAGE_SIZE")


def files_under(paths: Iterable[str]) -> list[str]:
    """Every regular file in ``paths`` (files, or directories walked recursively), sorted."""
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            for root, _dirs, names in os.walk(p):
                out.extend(os.path.join(root, n) for n in names)
        elif os.path.isfile(p):
            out.append(p)
    return sorted(out)


def fsync_paths(paths: Iterable[str]) -> None:
    """``fsync`` every file under ``paths`` (and each directory, so new names are durable too)."""
    for p in files_under(paths):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for p in paths:
        if os.path.isdir(p):
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def evict(paths: Iterable[str]) -> None:
    """Drop the cached pages of every file under ``paths`` (``fdatasync`` first: only clean pages can go)."""
    for p in files_under(paths):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_bytes(path: str) -> tuple[int, int]:
    """(bytes of ``path`` resident in the page cache, file size), via ``mmap`` + ``mincore``."""
    size = os.path.getsize(path)
    if size == 0:
        return 0, 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            npages = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * npages)()
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            resident = sum(b & 1 for b in bytes(vec))
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)
    return min(resident * PAGE, size), size


def resident_fraction(paths: Iterable[str]) -> float:
    """Fraction of the bytes of every file under ``paths`` that is in the page cache (0.0 = fully cold)."""
    resident = total = 0
    for p in files_under(paths):
        r, n = resident_bytes(p)
        resident += r
        total += n
    return resident / total if total else 0.0


def remove(paths: Iterable[str]) -> None:
    """Delete files and directory trees (missing ones are fine)."""
    import shutil

    for p in paths:
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
