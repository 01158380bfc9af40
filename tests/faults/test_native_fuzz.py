"""Hypothesis fuzzing of the native format's trailer and index parser (``NativeBackend.read_document``) and of
everything that trusts what it returns (``inspect --verify``, ``ckptio.open`` + ``read``).

Four strategies, each on a copy of a real 4-rank checkpoint:

* random trailer bytes (all 64);
* structured trailers: valid magic, random versions, offsets, lengths and hash (the interesting integers);
* random index bytes behind a CONSISTENT trailer (right offset, length and hash), so the JSON and schema
  checks are reached;
* the real metadata document with a few random edits (values replaced by other JSON, keys deleted) behind a
  consistent trailer: the parser may accept it, but then nothing downstream may fail other than with a
  CheckpointError.

Runs in the pytest process (serial API; MPI on COMM_SELF for the reader). Derandomized, so CI is repeatable;
``slow`` repeats with many more examples.
"""

from __future__ import annotations

import copy
import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
import xxhash
from ckptio.backends import mpiio
from conftest import require_backend
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptio
from ckptio.model import meta as metamod
from ckptio.tools.cli import inspect_report

FAST = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SLOW = settings(max_examples=3000, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

INTERESTING = st.sampled_from([0, 1, 7, 8, 63, 64, 4095, 4096, 4097, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
                               2**63 - 1, 2**63, 2**64 - 1])
U64 = st.one_of(INTERESTING, st.integers(0, 2**64 - 1), st.integers(0, 1 << 20))
U32 = st.one_of(st.sampled_from([0, 1, 2, 99, 2**31, 2**32 - 1]), st.integers(0, 2**32 - 1))
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**65, 2**65) | st.floats() |
                    st.text(max_size=12) | st.sampled_from([-1, 0, 1, 2**63, 1.5, "", "<f8", "zstd:3", "array"]),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=8)


class Native:
    """A pristine native checkpoint in memory and a scratch file to write variants to."""

    def __init__(self, path: Path, scratch: Path):
        self.raw = path.read_bytes()
        self.scratch = str(scratch)
        t = len(self.raw) - mpiio.TRAILER_SIZE
        fields = mpiio._TRAILER.unpack(self.raw[t:])
        self.ioff, self.ilen = fields[3], fields[4]
        self.body = self.raw[:self.ioff]  # header + data
        self.document = json.loads(self.raw[self.ioff:self.ioff + self.ilen])  # as stored: what the fuzzer edits
        self.meta = metamod.loads(self.raw[self.ioff:self.ioff + self.ilen])  # as read_document returns it

    def with_index(self, index: bytes, data_end: int | None = None) -> str:
        """The file with another index behind a consistent trailer."""
        trailer = mpiio._TRAILER.pack(mpiio.TRAILER_MAGIC, mpiio.FORMAT_VERSION, 0, self.ioff, len(index),
                                      xxhash.xxh3_64_intdigest(index), self.ioff if data_end is None else data_end,
                                      b"")
        return self.write(self.body + index + trailer)

    def with_trailer(self, trailer: bytes) -> str:
        return self.write(self.raw[:-mpiio.TRAILER_SIZE] + trailer)

    def write(self, data: bytes) -> str:
        with open(self.scratch, "wb") as f:
            f.write(data)
        return self.scratch


@pytest.fixture(scope="module")
def native(corpus, tmp_path_factory) -> Native:
    require_backend("mpiio")
    return Native(corpus / "mpiio" / "chk_000010", tmp_path_factory.mktemp("fuzz") / "variant")


def parse(path: str) -> dict[str, Any] | None:
    """read_document: a document or a CheckpointError (None); anything else propagates and fails the test."""
    try:
        return mpiio.NativeBackend().read_document(path)
    except ckptio.CheckpointError:
        return None


def consume(path: str) -> None:
    """What a user does with an accepted document: inspect --verify, open, read everything. Only
    CheckpointError may come out (of the reader); inspect must return an exit code."""
    from mpi4py import MPI

    code, _ = inspect_report(path, verify=True)
    assert code in (0, 1, 2)
    try:
        with ckptio.open(path, MPI.COMM_SELF) as ck:
            for name, var in ck.variables.items():
                ck.read(name, offset=(0,) * len(var.shape), shape=var.shape)
    except ckptio.CheckpointError:
        pass


@st.composite
def edited_document(draw, meta: dict[str, Any]) -> dict[str, Any]:
    """The document with 1-3 random edits anywhere in its tree."""
    doc = copy.deepcopy(meta)
    for _ in range(draw(st.integers(1, 3))):
        slots = _slots(doc)
        if not slots:
            break
        container, key = draw(st.sampled_from(slots))
        if isinstance(container, dict) and draw(st.booleans()) and draw(st.booleans()):
            del container[key]
        else:
            container[key] = draw(JSON)
    return doc


def _slots(node: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) of a JSON tree."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    out = []
    for key, child in list(items):
        out.append((node, key))
        out += _slots(child)
    return out


# --------------------------------------------------------------------------------------------- tests
def test_pristine_parses(native):
    assert parse(native.write(native.raw)) == native.meta


def _random_trailer(native: Native, trailer: bytes) -> None:
    assert parse(native.with_trailer(trailer)) is None or trailer == native.raw[-mpiio.TRAILER_SIZE:]


def _structured_trailer(native: Native, tver, flags, ioff, ilen, ihash, data_end, reserved) -> None:
    trailer = mpiio._TRAILER.pack(mpiio.TRAILER_MAGIC, tver, flags, ioff, ilen, ihash, data_end, reserved)
    meta = parse(native.with_trailer(trailer))
    if meta is not None:  # only possible when it still locates and hashes the real index
        assert (ioff, ilen, ihash) == (native.ioff, native.ilen, xxhash.xxh3_64_intdigest(
            native.raw[native.ioff:native.ioff + native.ilen])), "a wrong trailer was accepted"
        assert meta == native.meta


def _random_index(native: Native, index: bytes) -> None:
    meta = parse(native.with_index(index))
    if meta is not None:
        consume(native.scratch)


def _edited_index(native: Native, doc: dict[str, Any]) -> None:
    path = native.with_index(json.dumps(doc).encode())
    if parse(path) is not None:
        consume(path)


@given(trailer=st.binary(min_size=64, max_size=64))
@FAST
def test_random_trailer_bytes(native, trailer):
    _random_trailer(native, trailer)


@given(U32, U32, U64, U64, U64, U64, st.binary(min_size=16, max_size=16))
@FAST
def test_structured_trailer(native, tver, flags, ioff, ilen, ihash, data_end, reserved):
    _structured_trailer(native, tver, flags, ioff, ilen, ihash, data_end, reserved)


@given(index=st.one_of(st.binary(max_size=300), st.text(max_size=200).map(str.encode), JSON.map(
    lambda v: json.dumps(v).encode())))
@FAST
def test_random_index_bytes(native, index):
    _random_index(native, index)


@given(data=st.data())
@FAST
def test_edited_metadata_document(native, data):
    _edited_index(native, data.draw(edited_document(native.document)))


@pytest.mark.slow
@given(data=st.data())
@SLOW
def test_edited_metadata_document_long(native, data):
    _edited_index(native, data.draw(edited_document(native.document)))


@pytest.mark.slow
@given(U32, U32, U64, U64, U64, U64, st.binary(min_size=16, max_size=16))
@SLOW
def test_structured_trailer_long(native, tver, flags, ioff, ilen, ihash, data_end, reserved):
    _structured_trailer(native, tver, flags, ioff, ilen, ihash, data_end, reserved)


def test_header_version_field_is_checked_before_anything_else(native):
    raw = bytearray(native.raw)
    struct.pack_into("<I", raw, 8, 0)
    assert parse(native.write(bytes(raw))) is None
    os.unlink(native.scratch)


# ------------------------------------------------------------------------------------ the header checksum
def _status(path: str) -> tuple[int, str]:
    code, report = inspect_report(path, verify=False)
    return code, report["status"]


def test_every_header_bit_flip_is_damage_not_a_newer_version(native):
    """The magic, version, size and checksum fields, and a sample of the padding: each flipped bit is reported
    as a damaged (or unrecognisable) checkpoint, never as "format version 65537 is newer"."""
    offsets = [*range(24), *range(24, mpiio.HEADER_SIZE, 97)]
    for offset in offsets:
        for bit in range(8):
            raw = bytearray(native.raw)
            raw[offset] ^= 1 << bit
            code, status = _status(native.write(bytes(raw)))
            assert status != "unsupported version", (offset, bit)
            assert (code, status) == (1, "corrupt"), (offset, bit, code, status)


def _without_header_checksum(raw: bytes) -> bytearray:
    """The file as ckptio wrote it before the header had a checksum (zeros in its place)."""
    old = bytearray(raw)
    old[16:24] = bytes(8)
    return old


def _with_versions(raw: bytearray, header: int, trailer: int) -> bytes:
    struct.pack_into("<I", raw, 8, header)
    struct.pack_into("<I", raw, len(raw) - mpiio.TRAILER_SIZE + 8, trailer)
    return bytes(raw)


def test_files_without_header_checksum_are_still_read(native):
    old = _without_header_checksum(native.raw)
    assert parse(native.write(bytes(old))) == native.meta
    assert _status(native.write(bytes(old))) == (0, "complete")
    # a flipped version: header and trailer disagree, so it is damage
    for flipped in (mpiio.FORMAT_VERSION ^ (1 << 16), mpiio.FORMAT_VERSION ^ 2):
        path = native.write(_with_versions(_without_header_checksum(native.raw), flipped, mpiio.FORMAT_VERSION))
        assert _status(path) == (1, "corrupt"), flipped
    # both copies say newer: a newer file
    newer = mpiio.FORMAT_VERSION + 1
    path = native.write(_with_versions(_without_header_checksum(native.raw), newer, newer))
    assert _status(path) == (1, "unsupported version")


def test_a_newer_header_with_its_checksum_is_a_newer_version(native):
    raw = bytearray(native.raw)
    raw[:mpiio.HEADER_SIZE] = mpiio.header_bytes(mpiio.FORMAT_VERSION + 1)
    code, report = inspect_report(native.write(bytes(raw)), verify=False)
    assert (code, report["status"]) == (1, "unsupported version")
    assert f"version {mpiio.FORMAT_VERSION + 1}" in report["error"]
