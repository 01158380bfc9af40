"""Damage a committed checkpoint in many small ways and classify what ``ckptio inspect --verify`` makes of it.

Run as ONE serial process per checkpoint (``python corruption.py PATH SEED OUT.jsonl SKIP SECONDS``, started by
:func:`run_isolated`), so hundreds of trials take seconds, and a format library that crashes or loops forever on
a damaged file (neither can be caught in Python) is reported with the trial that caused it: each trial's
description is written to OUT before it runs, its result after; a worker that dies is replaced by a new one
that continues after the fatal trial.

Every trial damages a private copy of the pristine file, then:

1. ``backend.read_document(copy)`` must return or raise a :class:`ckptio.CheckpointError`;
2. ``ckptio.tools.cli.inspect_report(copy, verify=True)`` must return (never raise) an exit code, and the outcome is
   ``detected`` (exit 1), ``unidentified`` (exit 2: not recognised as a checkpoint at all), ``benign`` (exit 0
   and the metadata document is exactly the pristine one, so every byte ckptio reads is unchanged or
   checksum-verified) or ``silent`` (exit 0 but the document differs: undetected damage).

Regions of the file (``regions``) name what each byte is, per backend; ``must_detect`` regions (stored data of
variables, the native index) may only end ``detected``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

PAGE = 4096


@dataclass(frozen=True)
class Region:
    name: str
    start: int
    end: int
    must_detect: bool = False  # stored data and checksummed structures

    @property
    def size(self) -> int:
        return self.end - self.start


# --------------------------------------------------------------------------------------------- regions
def regions(path: str) -> list[Region]:
    """Every byte of the pristine checkpoint ``path`` in exactly one named region, sorted by offset."""
    from ckptio.backends import detect_backend

    backend = detect_backend(path)
    meta = backend.read_document(path)
    size = os.path.getsize(path)
    named = {"mpiio": _native_regions, "hdf5": _hdf5_regions, "pnetcdf": _cdf_regions}[backend.name](path, meta, size)
    return _fill_gaps(named, size, "padding (unused bytes)")


def _fill_gaps(named: list[Region], size: int, gap_name: str) -> list[Region]:
    out, pos = [], 0
    for r in sorted((r for r in named if r.size > 0), key=lambda r: r.start):
        assert r.start >= pos, f"overlapping regions at {r.start}: {r.name}"
        if r.start > pos:
            out.append(Region(gap_name, pos, r.start))
        out.append(r)
        pos = r.end
    if pos < size:
        out.append(Region(gap_name, pos, size))
    return out


def _data_regions(meta: dict[str, Any]) -> list[Region]:
    """Native format: every stored block (possibly compressed) of every variable."""
    out = []
    for name, var in meta["variables"].items():
        for i, b in enumerate(var["blocks"]):
            codec = f" ({b['codec']})" if b.get("codec") else ""
            # compressed: the checksum covers the decoded values, and a few flips decode to the same values
            out.append(Region(f"data block{codec}: {name}[{i}]", int(b["file_offset"]),
                              int(b["file_offset"]) + int(b["stored_nbytes"]), not codec))
    return out


def _native_regions(path: str, meta: dict[str, Any], size: int) -> list[Region]:
    from ckptio.backends import mpiio

    with open(path, "rb") as f:
        f.seek(size - mpiio.TRAILER_SIZE)
        fields = mpiio._TRAILER.unpack(f.read(mpiio.TRAILER_SIZE))
    ioff, ilen = fields[3], fields[4]
    t = size - mpiio.TRAILER_SIZE
    trailer = [("magic", 8), ("format version", 4), ("flags", 4), ("index offset", 8), ("index length", 8),
               ("index hash", 8), ("data end", 8), ("reserved", 16)]
    out = [Region("header: magic", 0, 8, True), Region("header: format version", 8, 12, True),
           Region("header: header size", 12, 16, True), Region("header: checksum", 16, 24, True),
           Region("header: padding (checksummed)", 24, mpiio.HEADER_SIZE, True),
           Region("index (metadata document)", ioff, ioff + ilen, True)]
    pos = t
    for name, n in trailer:
        out.append(Region(f"trailer: {name}", pos, pos + n, name not in ("flags", "reserved", "data end")))
        pos += n
    return out + _data_regions(meta)


def _stored_variables(meta: dict[str, Any]) -> list[Region]:
    """HDF5 and CDF: every variable's array, contiguous at storage.file_offset."""
    import math

    import numpy as np

    out = []
    for name, var in meta["variables"].items():
        nbytes = math.prod(var["shape"]) * np.dtype(var["dtype"]).itemsize
        offset = var.get("storage", {}).get("file_offset")
        if nbytes and offset is not None:
            out.append(Region(f"data: {name}", int(offset), int(offset) + nbytes, True))
    return out


def _hdf5_regions(path: str, meta: dict[str, Any], size: int) -> list[Region]:
    import h5py

    from ckptio.model import meta as metamod

    out = _stored_variables(meta)
    with h5py.File(path, "r", locking=False) as f:
        for name in ("block_table", "block_checksums"):
            dset = f["ckptio"][name]
            offset = dset.id.get_offset()
            if offset is not None:
                out.append(Region(f"block table /ckptio/{name} (copy for HDF5 and netCDF users)", offset,
                                  offset + dset.id.get_storage_size()))
    with open(path, "rb") as f:
        raw = f.read()
    doc = metamod.dumps(meta)
    at = raw.find(doc)
    assert at >= 0 and raw.find(doc, at + 1) < 0, "the metadata document is not stored once, contiguously"
    out.append(Region("metadata document (/ckptio attribute 'metadata')", at, at + len(doc)))
    # everything else: superblock, object headers, local/global heaps, B-trees, attributes
    return _fill_gaps(out, size, "HDF5 structures (superblock, object headers, heaps, attributes)")


def _cdf_regions(path: str, meta: dict[str, Any], size: int) -> list[Region]:
    from ckptio.backends.pnetcdf import read_header

    header = read_header(path)
    first = min(v.begin for v in header.vars.values())
    out = [Region("CDF magic", 0, 4, True), Region("CDF header", 4, first)]
    stored = {r.name[len("data: "):]: r for r in _stored_variables(meta)}
    for name, v in header.vars.items():
        if name in stored:
            out.append(stored[name])
        elif name == "ckptio_metadata":
            out.append(Region("metadata document (record variable ckptio_metadata)", v.begin, v.begin + header.numrecs))
        elif name == "ckptio_complete":
            out.append(Region("completion mark (ckptio_complete)", v.begin, v.begin + 4))
        else:
            out.append(Region(f"block table {name} (copy for netCDF users)", v.begin, v.begin + v.vsize))
    return out


# ---------------------------------------------------------------------------------------------- trials
@dataclass
class Trial:
    kind: str  # flip, truncate, zero-page
    offset: int  # byte flipped / new length / page start
    bit: int = 0
    region: str = ""
    must_detect: bool = False


def region_at(regs: list[Region], offset: int) -> Region:
    for r in regs:
        if r.start <= offset < r.end:
            return r
    raise ValueError(f"offset {offset} outside the file")


def plan_trials(regs: list[Region], size: int, seed: int) -> Iterator[Trial]:
    """The seeded trial list: exhaustive bit flips over small structures (headers, trailers, completion marks),
    random flips over the rest (at least 100 in stored data), random truncations, every 4 KiB page zeroed."""
    rng = random.Random(seed)

    def flip(offset: int, bit: int) -> Trial:
        r = region_at(regs, offset)
        return Trial("flip", offset, bit, r.name, r.must_detect)

    small = [r for r in regs if r.size <= 16 and not r.name.startswith(("data", "padding"))]
    for r in small:
        for offset in range(r.start, r.end):
            for bit in range(8):
                yield flip(offset, bit)
    data = [r for r in regs if r.name.startswith(("data", "data block"))]
    data_bytes = sum(r.size for r in data)
    for _ in range(100):
        k = rng.randrange(data_bytes)
        for r in data:
            if k < r.size:
                yield flip(r.start + k, rng.randrange(8))
                break
            k -= r.size
    for r in regs:
        if r in small or r in data:
            continue
        for _ in range(min(60, max(10, r.size // 64))):
            yield flip(rng.randrange(r.start, r.end), rng.randrange(8))
    for length in sorted({0, 1, 7, 8, 16, 512, 4096, size // 2, size - 65, size - 64, size - 1,
                          *(rng.randrange(size) for _ in range(40))}):
        if 0 <= length < size:
            yield Trial("truncate", length, region=region_at(regs, length).name, must_detect=True)
    for start in range(0, size, PAGE):
        yield Trial("zero-page", start, region=region_at(regs, start).name)


def damage(pristine: bytes, trial: Trial) -> bytes:
    if trial.kind == "flip":
        out = bytearray(pristine)
        out[trial.offset] ^= 1 << trial.bit
        return bytes(out)
    if trial.kind == "truncate":
        return pristine[:trial.offset]
    page = pristine[trial.offset:trial.offset + PAGE]
    return pristine[:trial.offset] + bytes(len(page)) + pristine[trial.offset + len(page):]


def judge(path: str, pristine_meta: dict[str, Any]) -> dict[str, Any]:
    """Run the serial API on a damaged file; classify. Never raises."""
    from ckptio.backends import detect_backend

    import ckptio
    from ckptio.tools.cli import inspect_report

    result: dict[str, Any] = {}
    try:  # the backend's own parser: a document or a CheckpointError, nothing else
        try:
            backend = detect_backend(path)
        except ckptio.UnknownFormatError:
            backend = None
        if backend is not None:
            meta = backend.read_document(path)
            result["meta_changed"] = sorted(k for k in set(meta) | set(pristine_meta)
                                            if meta.get(k) != pristine_meta.get(k))
    except ckptio.CheckpointError as exc:
        result["read_document"] = type(exc).__name__
    except Exception as exc:
        return {"outcome": "exception", "where": "read_document", "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=-4)}
    try:
        code, report = inspect_report(path, verify=True)
    except Exception as exc:
        return {"outcome": "exception", "where": "inspect_report", "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=-4)}
    result.update(code=code, status=report["status"], error=(report.get("error") or "")[:300])
    if code == 1:
        result["outcome"] = "detected"
    elif code == 2:
        result["outcome"] = "unidentified"
    elif code == 0 and not result.get("meta_changed"):
        result["outcome"] = "benign"
    else:
        result["outcome"] = "silent" if code == 0 else f"exit {code}"
    return result


def run(path: str, seed: int, out_path: str, skip: int = 0, trial_seconds: int = 0) -> None:
    """Trials number ``skip`` onwards on ``path`` (pristine, left unchanged), appended as JSON lines to
    ``out_path``. With ``trial_seconds``, a trial that takes longer kills this process (SIGALRM, default
    action: a hang inside a C library cannot be interrupted any other way)."""
    from ckptio.backends import detect_backend

    with open(path, "rb") as f:
        pristine = f.read()
    pristine_meta = detect_backend(path).read_document(path)
    regs = regions(path)
    work = os.path.join(os.path.dirname(out_path), "trial_" + os.path.basename(path))
    shutil.copyfile(path, work)
    with open(out_path, "a") as out:
        if skip == 0:
            out.write(json.dumps({"regions": [asdict(r) for r in regs], "size": len(pristine)}) + "\n")
        for index, trial in enumerate(plan_trials(regs, len(pristine), seed)):
            if index < skip:
                continue
            data = damage(pristine, trial)
            if trial.kind == "zero-page":  # must be detected only if it changed a byte of a must-detect region
                trial.must_detect = any(r.must_detect and data[max(r.start, trial.offset):r.end] !=
                                        pristine[max(r.start, trial.offset):r.end] for r in regs
                                        if r.start < trial.offset + PAGE and trial.offset < r.end)
                if data == pristine:
                    continue
            out.write(json.dumps({"start": asdict(trial), "index": index}) + "\n")
            out.flush()  # if the next call kills the process, this line names the trial that did it
            signal.alarm(trial_seconds)
            if trial.kind == "flip":  # in place: one byte written instead of the whole file
                _poke(work, trial.offset, data[trial.offset:trial.offset + 1])
                res = judge(work, pristine_meta)
                _poke(work, trial.offset, pristine[trial.offset:trial.offset + 1])
            else:
                with open(work, "wb") as f:
                    f.write(data)
                res = judge(work, pristine_meta)
                with open(work, "wb") as f:
                    f.write(pristine)
            signal.alarm(0)
            out.write(json.dumps({"trial": asdict(trial), **res}) + "\n")
        out.write(json.dumps({"done": True}) + "\n")
    os.unlink(work)


def run_isolated(path: str, seed: int, out_path: str, trial_seconds: int = 10, total_seconds: float = 900) -> None:
    """:func:`run` in worker processes: when a trial hangs (SIGALRM) or crashes the worker, record it as a
    ``hang``/``crash`` outcome and start a new worker after it, until every trial ran."""
    if os.path.exists(out_path):
        os.unlink(out_path)
    skip = 0
    deadline = time.monotonic() + total_seconds
    while True:
        proc = subprocess.run([sys.executable, __file__, path, str(seed), out_path, str(skip), str(trial_seconds)],
                              capture_output=True, text=True, timeout=max(1.0, deadline - time.monotonic()))
        _, _, running, done = load(out_path)
        if done:
            return
        if running is None:
            raise RuntimeError(f"corruption worker failed outside a trial (exit {proc.returncode}):\n"
                               f"{proc.stderr[-3000:]}")
        how = "hang" if proc.returncode == -signal.SIGALRM else "crash"
        with open(out_path, "a") as out:
            out.write(json.dumps({"trial": running["start"], "outcome": how, "code": None,
                                  "error": f"worker killed (exit {proc.returncode}) {proc.stderr[-500:]}"}) + "\n")
        skip = running["index"] + 1


def _poke(path: str, offset: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def load(out_path: str) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any] | None, bool]:
    """(header, finished trials, the start record of a trial that never finished or None, all done?)."""
    header: dict[str, Any] = {}
    trials: list[dict[str, Any]] = []
    running = None
    done = False
    with open(out_path) as f:
        for line in f:
            rec = json.loads(line)
            if "regions" in rec:
                header = rec
            elif "start" in rec:
                running = rec
            elif "trial" in rec:
                trials.append(rec)
                running = None
            elif rec.get("done"):
                done = True
    return header, trials, running, done


def flip_native_fields(path: str, header_version: int | None = None, schema: int | None = None) -> None:
    """Rewrite a native checkpoint with another header format version and/or index schema version (the
    trailer is rewritten to match, so only the version check can object)."""
    from ckptio.backends import mpiio

    from ckptio.model import meta as metamod

    with open(path, "rb") as f:
        raw = bytearray(f.read())
    t = len(raw) - mpiio.TRAILER_SIZE
    magic, tver, flags, ioff, ilen, ihash, data_end, reserved = mpiio._TRAILER.unpack(raw[t:])
    if schema is not None:
        doc = json.loads(bytes(raw[ioff:ioff + ilen]))
        doc["schema"] = schema
        index = metamod.dumps(doc)
        del raw[ioff:]
        raw += index
        ilen, ihash = len(index), __import__("xxhash").xxh3_64_intdigest(index)
    else:
        del raw[t:]
    if header_version is not None:
        struct.pack_into("<I", raw, 8, header_version)
        tver = header_version
    raw += mpiio._TRAILER.pack(magic, tver, flags, ioff, ilen, ihash, data_end, reserved)
    with open(path, "wb") as f:
        f.write(raw)


if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
