"""Damaged checkpoints: single bit flips, truncation and zeroed 4 KiB pages, for every backend.

A checkpoint of every backend (and a zstd-compressed native one) is written once by a 4-rank job. Then, in one
serial worker process per checkpoint (:mod:`corruption`), several hundred seeded trials each damage a copy and
run ``read_document`` and ``inspect_report(verify=True)``; the tests below judge the recorded outcomes, so each
property fails on its own with the trials that break it. Finally a 4-rank job opens and reads a few damaged
files: every rank must get CorruptCheckpointError or IncompleteCheckpointError.
"""

from __future__ import annotations

import collections
from pathlib import Path

import corruption
import pytest
from conftest import NPROCS, assert_every_rank_failed, require_backend, run_job

CORPORA = ("mpiio", "mpiio+zstd", "hdf5", "pnetcdf")
SEED = 20240817
SIGNATURE = {"mpiio": 8, "hdf5": 8, "pnetcdf": 4}  # bytes that identify the format (detect_backend)
MIN_FLIPS = 200

_TRIALS: dict[str, list[dict]] = {}


@pytest.fixture(params=CORPORA)
def corpus_name(request) -> str:
    require_backend(request.param.split("+")[0])
    return request.param


@pytest.fixture
def trials(corpus, corpus_name) -> list[dict]:
    """All trials on one checkpoint, run once per session (a few seconds per backend)."""
    if corpus_name not in _TRIALS:
        out = corpus / f"trials_{corpus_name}.jsonl"
        corruption.run_isolated(str(corpus / corpus_name / "chk_000010"), SEED, str(out))
        _, _TRIALS[corpus_name], _, _ = corruption.load(str(out))
    return _TRIALS[corpus_name]


def _signature(corpus_name: str) -> int:
    return SIGNATURE[corpus_name.split("+")[0]]


def hits_signature(t: dict, corpus_name: str) -> bool:
    """Did the trial damage the format signature (the bytes detect_backend recognises a format by)?"""
    trial, n = t["trial"], _signature(corpus_name)
    if trial["kind"] == "flip":
        return trial["offset"] < n
    return trial["offset"] < n if trial["kind"] == "truncate" else trial["offset"] == 0


def show(bad: list[dict], limit: int = 12) -> str:
    lines = [f"{len(bad)} trial(s):"]
    for t in bad[:limit]:
        tr = t["trial"]
        lines.append(f"  {tr['kind']} at {tr['offset']} bit {tr['bit']} in {tr['region']!r}: {t['outcome']} "
                     f"(exit {t.get('code')}) {t.get('error', '')[:200]} {t.get('meta_changed', '')}")
    return "\n".join(lines)


def summary(trials: list[dict]) -> str:
    counts = collections.Counter((t["trial"]["kind"], t["trial"]["region"].split(":")[0], t["outcome"])
                                 for t in trials)
    return "\n".join(f"  {k[0]:9} {k[1]:60} {k[2]:12} {v}" for k, v in sorted(counts.items()))


# ------------------------------------------------------------------------------------ serial properties
def test_enough_seeded_bit_flips(trials, corpus_name):
    flips = [t for t in trials if t["trial"]["kind"] == "flip"]
    in_data = [t for t in flips if t["trial"]["region"].startswith("data")]
    assert len(flips) >= MIN_FLIPS and len(in_data) >= 100, summary(trials)


def test_damage_never_raises_anything_else_hangs_or_crashes(trials, corpus_name):
    """read_document raises only CheckpointError subclasses; inspect_report never raises; nothing hangs."""
    bad = [t for t in trials if t["outcome"] in ("exception", "hang", "crash")]
    assert not bad, show(bad) + "\n" + "\n".join(t.get("traceback", "") for t in bad[:3])


def test_flips_in_stored_data_always_detected(trials, corpus_name):
    """Uncompressed blocks: always detected. Compressed blocks: detected, or the flip hit bits the decoder
    ignores and the block decodes to the original values (the checksum, over the decoded values, proves it)."""
    data = [t for t in trials if t["trial"]["kind"] == "flip" and t["trial"]["region"].startswith("data")]
    bad = [t for t in data if not (t["outcome"] == "detected" or
                                   (t["outcome"] == "benign" and "(zstd" in t["trial"]["region"]))]
    assert not bad, show(bad)


def test_flips_in_checksummed_structures_detected(trials, corpus_name):
    """Native header fields, index and trailer fields that locate/verify the index; CDF completion mark."""
    bad = [t for t in trials if t["trial"]["kind"] == "flip" and t["trial"]["must_detect"]
           and not hits_signature(t, corpus_name) and t["outcome"] not in ("detected", "exception", "hang", "crash")]
    assert not bad, show(bad)


def test_undetected_flips_are_benign(trials, corpus_name):
    """A flip verification does not see (exit 0) must leave every byte ckptio uses unchanged: the metadata
    document read back equals the original, and all data passed checksum verification."""
    bad = [t for t in trials if t["outcome"] == "silent"]
    assert not bad, "undetected changes of the metadata document (no checksum over it?)\n" + show(bad)


def test_damaged_signature_reported_as_corrupt(trials, corpus_name):
    """A checkpoint whose leading magic bytes are damaged is still a damaged checkpoint (exit 1), not
    'not a checkpoint in any known format' (exit 2), when the rest of the file says what it is."""
    bad = [t for t in trials if hits_signature(t, corpus_name) and t["trial"]["kind"] != "truncate"
           and t["outcome"] != "detected"]
    assert not bad, show(bad)


def test_truncation_detected(trials, corpus_name):
    """Any shorter file is incomplete or corrupt (exit 1); exit 2 only when too short to carry a signature."""
    cut = [t for t in trials if t["trial"]["kind"] == "truncate"]
    assert len(cut) >= 30
    bad = [t for t in cut if not (t["outcome"] == "detected" or
                                  (t["outcome"] == "unidentified" and t["trial"]["offset"] < _signature(corpus_name)))]
    assert not bad, show(bad)


def test_zeroed_pages(trials, corpus_name):
    """Every 4 KiB page zeroed in turn: detected when it changed stored data or a checksummed structure,
    otherwise detected or benign."""
    pages = [t for t in trials if t["trial"]["kind"] == "zero-page"]
    assert pages
    bad = [t for t in pages if not hits_signature(t, corpus_name) and not (
        t["outcome"] == "detected" or (t["outcome"] == "benign" and not t["trial"]["must_detect"]))]
    assert not bad, show(bad)


# ------------------------------------------------------------------------------------- under mpirun
def _damaged_copies(corpus: Path, backend: str, out: Path) -> dict[str, Path]:
    """A few damaged copies whose damage is certainly detectable (data flip, index/document, completion mark,
    truncation)."""
    src = corpus / backend / "chk_000010"
    regs = corruption.regions(str(src))
    raw = src.read_bytes()
    out.mkdir(parents=True, exist_ok=True)

    def flipped(name: str, offset: int, bit: int = 2) -> Path:
        data = bytearray(raw)
        data[offset] ^= 1 << bit
        (out / name).write_bytes(bytes(data))
        return out / name

    data_region = max((r for r in regs if r.name.startswith("data")), key=lambda r: r.size)
    doc = next(r for r in regs if r.name.startswith(("index", "metadata document")))
    files = {"data flip": flipped("data_flip", (data_region.start + data_region.end) // 2),
             "document flip": flipped("doc_flip", doc.start, bit=1)}  # '{' -> 'z': not JSON at all
    mark = next((r for r in regs if r.name.startswith(("trailer: magic", "completion mark"))), None)
    if mark is not None:
        files["completion mark flip"] = flipped("mark_flip", mark.start, bit=0)
    (out / "truncated").write_bytes(raw[:len(raw) // 2])
    files["truncated"] = out / "truncated"
    return files


@pytest.mark.mpi
def test_damage_raises_on_every_rank(corpus, backend, tmp_path):
    files = _damaged_copies(corpus, backend, tmp_path / "damaged")
    result = run_job(["readall", *map(str, files.values())], tmp_path, timeout=120)
    assert result.returncode == 0, result.describe()
    for what, path in files.items():
        per_rank = assert_every_rank_failed(result, str(path), NPROCS)
        for rank, o in per_rank.items():
            assert {"CorruptCheckpointError", "IncompleteCheckpointError"} & set(o["bases"]), \
                f"{what}: rank {rank} got {o['cls']}: {o['msg']}"


def test_corpus_is_clean(corpus, corpus_name):
    from ckptio.tools.cli import inspect_report

    code, report = inspect_report(str(corpus / corpus_name / "chk_000010"), verify=True)
    assert code == 0, report
