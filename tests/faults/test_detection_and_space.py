"""The two library rules the fault tests rely on, checked directly (serial, fast).

* Space reservation (``ckptio/engine/space.py``): byte ranges are merged and capped before ``fallocate``; on a full
  file system the error names the file and says the space ran out; nothing is left allocated by a failed
  reservation (tmpfs undoes it).
* Damaged-checkpoint detection (``backends/detect.py`` ``detect_backend``): a signature at most 1 bit in 4 bytes
  away, the native trailer or a ckptio metadata document make a file a damaged checkpoint
  (CorruptCheckpointError naming the format); without such evidence it stays UnknownFormatError.
"""

from __future__ import annotations

import itertools
import os
import random
import re

import pytest
from ckptio.backends import available_backends, detect_backend, get_backend
from conftest import needs_root, tmpfs

import ckptio
from ckptio.engine.space import coalesce, reserve_space


def test_coalesce_merges_close_ranges_and_caps_their_number():
    assert coalesce([(4096, 9000), (0, 4096), (10, 20), (5, 5)]) == [(0, 9000)]
    assert coalesce([(0, 10), (10 + (64 << 10), 2 << 20)]) == [(0, 10), (10 + (64 << 10), 2 << 20)]
    many = [(i * 10**6, i * 10**6 + 100 + (i % 7) * 1000) for i in range(3000)]
    capped = coalesce(many, max_ranges=1024)
    assert len(capped) == 1024
    assert capped[0][0] == min(a for a, _ in many) and capped[-1][1] == max(b for _, b in many)
    assert all(a < b for a, b in capped) and all(x[1] < y[0] for x, y in itertools.pairwise(capped))


@needs_root
def test_reservation_fails_cleanly_on_a_full_file_system(tmp_path):
    with tmpfs(tmp_path / "fs", "1m") as fs:
        path = fs / ".chk.ckptio-tmp-x"
        path.write_bytes(b"")
        assert reserve_space(str(path), [(0, 256 << 10)], "its data") is True
        assert os.stat(path).st_blocks * 512 >= 256 << 10
        with pytest.raises(ckptio.CheckpointIOError, match=r"no space left on device.*its data.*needs") as info:
            reserve_space(str(path), [(0, 4 << 20)], "its data")
        assert str(path) in str(info.value)
        st = os.statvfs(fs)
        assert st.f_bavail * st.f_frsize > 512 << 10, "a failed reservation kept space"
        # the first range fits, the second does not: the message gives what was free before this reservation,
        # not what its own first range left
        free_before = st.f_bavail * st.f_frsize
        with pytest.raises(ckptio.CheckpointIOError) as info:
            reserve_space(str(path), [(256 << 10, 768 << 10), (2 << 20, 6 << 20)], "its data")
        said = int(re.search(r"([\d,]+) bytes were free there", str(info.value)).group(1).replace(",", ""))
        assert abs(said - free_before) <= 64 << 10, (said, free_before, str(info.value))
        path.unlink()


@pytest.fixture(scope="module")
def pristine(corpus):
    return {b: (corpus / b / "chk_000010").read_bytes() for b in ("mpiio", "hdf5", "pnetcdf")
            if b in available_backends()}


def _write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_signature_within_the_flip_limit_is_a_damaged_checkpoint(tmp_path):
    body = random.Random(1).randbytes(8192)  # no trailer, no document: only the signature speaks
    for name in available_backends():
        sig = get_backend(name).signature
        limit = max(1, len(sig) // 4)
        damaged = bytearray(sig)
        for bit in range(limit):
            damaged[bit] ^= 1 << bit
        with pytest.raises(ckptio.CorruptCheckpointError, match=f"probably {name} format") as info:
            detect_backend(_write(tmp_path, name, bytes(damaged) + body))
        assert info.value.backend == name
        damaged[limit] ^= 0x10  # one bit more: no longer within the limit
        with pytest.raises(ckptio.UnknownFormatError):
            detect_backend(_write(tmp_path, name, bytes(damaged) + body))


def test_other_evidence_identifies_a_checkpoint_without_its_header(tmp_path, pristine):
    for name, raw in pristine.items():
        zeroed = bytes(4096) + raw[4096:]
        with pytest.raises(ckptio.CorruptCheckpointError, match=f"probably {name} format") as info:
            detect_backend(_write(tmp_path, name, zeroed))
        want = "completion mark" if name == "mpiio" else "metadata document"
        assert want in str(info.value)
    for what, data in {"empty": b"", "zeros": bytes(1 << 16), "random": os.urandom(1 << 16),
                       "text": b"CDF header? no\n" * 100}.items():
        with pytest.raises(ckptio.UnknownFormatError):
            detect_backend(_write(tmp_path, what, data))


def test_inspect_reports_a_damaged_signature_as_corrupt(tmp_path, pristine):
    from ckptio.tools.cli import inspect_report

    for name, raw in pristine.items():
        path = _write(tmp_path, name, bytes([raw[0] ^ 4]) + raw[1:])
        code, report = inspect_report(path, verify=True)
        assert (code, report["status"], report["format"]) == (1, "corrupt", name), report
