"""The size of the CPU's last-level cache, for buffers that should still be in it when they are used again.

Why it matters (issue 29, ``ckptio inspect --verify``): a scan reads a window of the file into a buffer (the
kernel's copy from the page cache writes it), then hashes it and takes its minimum and maximum (three more passes
over it). With two 32 MiB windows in flight on a machine with a 32 MiB L3 cache, every pass after the copy came
from memory: verifying a 2 GiB file whose pages were cached took 0.29-0.65 s; with 8 MiB windows, 0.15-0.19 s (the
hashes alone 0.20 against 0.13-0.18), measured on the 2-vCPU AMD EPYC VM of benchmarks/README.md.

Local; reads sysfs (Linux) once per call, no MPI.
"""

from __future__ import annotations

import os

SYSFS = "/sys/devices/system/cpu/cpu{cpu}/cache"
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def last_level_bytes(sysfs: str | None = None) -> int | None:
    """Bytes of the largest data (or unified) cache level of a CPU this process may run on, as Linux describes
    it under ``sysfs`` (default: the first CPU of this process's affinity); None where it does not say (not
    Linux, a container without sysfs)."""
    found = _last_level(sysfs)
    return None if found is None else found[1]


def last_level_id(sysfs: str | None = None) -> int:
    """Which last-level cache that CPU uses (its ``id``; else the first CPU sharing it): processes bound to
    different sockets or core complexes of one host get different ids, processes that may run anywhere the id
    of the first CPU's; 0 where sysfs does not say."""
    found = _last_level(sysfs)
    if found is None:
        return 0
    directory = found[0]
    for name, parse in (("id", int), ("shared_cpu_list", lambda text: int(text.split(",")[0].split("-")[0]))):
        try:
            return parse(_read(directory, "", name))
        except (OSError, ValueError):
            continue
    return 0


def _last_level(sysfs: str | None) -> tuple[str, int] | None:
    """(directory, bytes) of the last-level data or unified cache under ``sysfs``, None where unknown."""
    if sysfs is None:
        try:
            cpu = min(os.sched_getaffinity(0))
        except (AttributeError, OSError, ValueError):
            cpu = 0
        sysfs = SYSFS.format(cpu=cpu)
    best: tuple[int, str, int] | None = None
    try:
        entries = os.listdir(sysfs)
    except OSError:
        return None
    for entry in entries:
        if not entry.startswith("index"):
            continue
        try:
            kind = _read(sysfs, entry, "type")
            level = int(_read(sysfs, entry, "level"))
            size = _size(_read(sysfs, entry, "size"))
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and size > 0 and (best is None or level > best[0]):
            best = (level, os.path.join(sysfs, entry), size)
    return None if best is None else (best[1], best[2])


def window_bytes(buffers: int, default: int, lowest: int, highest: int, sysfs: str | None = None) -> int:
    """A buffer size for ``buffers`` buffers in flight that together take half the last-level cache (the other
    half for what the kernel copies from and for the rest of the process), between ``lowest`` and ``highest``
    and a multiple of 1 MiB; ``default`` where the cache size is unknown."""
    cache = last_level_bytes(sysfs)
    if cache is None:
        return default
    size = cache // (2 * buffers)
    return max(lowest, min(highest, size - size % (1 << 20)))


def _read(sysfs: str, entry: str, name: str) -> str:
    with open(os.path.join(sysfs, entry, name), encoding="ascii") as f:
        return f.read().strip()


def _size(text: str) -> int:
    """sysfs' cache size text (``32768K``, ``2M``, ``512``) in bytes."""
    if text and text[-1] in _UNITS:
        return int(text[:-1]) * _UNITS[text[-1]]
    return int(text)
