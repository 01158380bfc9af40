"""The verification's read windows are sized to the CPU's last-level cache (ckptio.engine.cpu_cache): a window
larger than the cache is read from memory again by every pass over it (hash, min, max); scans on one host share
the cache, so each reads smaller windows (benchmarks/README.md: 2 GiB cached, one process 0.29-0.65 s with 32 MiB
windows against 0.15-0.19 with 8 MiB; two processes 0.27 s against 0.13)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from ckptio.backends import detect_backend

import ckptio
from ckptio import verify
from ckptio.engine import cpu_cache, verify_scan

MiB = 1 << 20


def fake_sysfs(root: Path, caches: list[tuple[int, str, str]]) -> str:
    """A cpu's ``cache`` directory as Linux writes it: one ``indexN`` per (level, type, size text)."""
    for n, (level, kind, size) in enumerate(caches):
        d = root / f"index{n}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return str(root)


EPYC = [(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "512K"), (3, "Unified", "32768K")]


def test_the_last_level_is_the_highest_data_or_unified_cache(tmp_path):
    assert cpu_cache.last_level_bytes(fake_sysfs(tmp_path / "epyc", EPYC)) == 32 * MiB
    assert cpu_cache.last_level_bytes(fake_sysfs(tmp_path / "l2", EPYC[:3])) == 512 << 10
    assert cpu_cache.last_level_bytes(fake_sysfs(tmp_path / "mb", [(2, "Unified", "2M"), (1, "Data", "48K")])) \
        == 2 * MiB
    # only an instruction cache, nothing readable, no directory: unknown
    assert cpu_cache.last_level_bytes(fake_sysfs(tmp_path / "i", [(1, "Instruction", "32K")])) is None
    assert cpu_cache.last_level_bytes(fake_sysfs(tmp_path / "bad", [(3, "Unified", "lots")])) is None
    assert cpu_cache.last_level_bytes(str(tmp_path / "absent")) is None


def test_processes_on_different_last_level_caches_are_told_apart(tmp_path):
    """The id of the cache (``id``; else the first CPU of ``shared_cpu_list``): verify_parallel counts the scans
    that share one, not every scan of a host with several sockets or core complexes."""
    one = fake_sysfs(tmp_path / "ccx1", EPYC)
    (Path(one) / "index3" / "id").write_text("1\n")
    assert cpu_cache.last_level_id(one) == 1
    other = fake_sysfs(tmp_path / "ccx2", EPYC)
    (Path(other) / "index3" / "shared_cpu_list").write_text("8-15,72-79\n")
    assert cpu_cache.last_level_id(other) == 8  # (no id file: the first CPU sharing it)
    assert cpu_cache.last_level_id(fake_sysfs(tmp_path / "none", EPYC)) == 0  # neither: 0
    assert cpu_cache.last_level_id(str(tmp_path / "absent")) == 0


def test_a_window_is_what_leaves_half_the_cache_free_within_bounds(tmp_path):
    epyc = fake_sysfs(tmp_path / "epyc", EPYC)
    bounds = {"default": 8 * MiB, "lowest": 2 * MiB, "highest": 32 * MiB}
    assert cpu_cache.window_bytes(2, sysfs=epyc, **bounds) == 8 * MiB  # 2 windows of 8: half of 32 MiB
    assert cpu_cache.window_bytes(8, sysfs=epyc, **bounds) == 2 * MiB
    assert cpu_cache.window_bytes(64, sysfs=epyc, **bounds) == 2 * MiB  # never below lowest
    big = fake_sysfs(tmp_path / "big", [(3, "Unified", "262144K")])
    assert cpu_cache.window_bytes(2, sysfs=big, **bounds) == 32 * MiB  # never above highest
    odd = fake_sysfs(tmp_path / "odd", [(3, "Unified", "33M")])
    assert cpu_cache.window_bytes(2, sysfs=odd, **bounds) == 8 * MiB  # whole MiB
    assert cpu_cache.window_bytes(2, sysfs=str(tmp_path / "absent"), **bounds) == 8 * MiB  # the default


@pytest.mark.skipif(not os.path.isdir("/sys/devices/system/cpu/cpu0/cache"), reason="no CPU cache sysfs here")
def test_this_machine_s_cache_sizes_the_verification_window():
    cache = cpu_cache.last_level_bytes()
    assert cache is not None and cache >= 256 << 10
    assert verify_scan.WINDOW == max(2 * MiB, min(32 * MiB, cache // 4 - cache // 4 % MiB))


@pytest.mark.parametrize("sharing,largest", [(1, 4 * MiB), (2, 2 * MiB), (4, 1 * MiB), (64, 1 * MiB)])
def test_scans_that_share_the_host_read_smaller_windows(tmp_path, monkeypatch, sharing, largest):
    from mpi4py import MPI

    path = tmp_path / "chk"
    data = np.arange(12 * MiB // 8, dtype=np.float64)
    with ckptio.create(path, MPI.COMM_SELF) as ck:
        for k in range(3):  # three 4 MiB extents, one window each on their own
            part = data[k * MiB // 2:(k + 1) * MiB // 2]
            ck.write("x", part, offset=(k * MiB // 2,), global_shape=data.shape)
    backend = detect_backend(str(path))
    meta = backend.read_document(str(path))
    monkeypatch.setattr(verify_scan, "WINDOW", 4 * MiB)
    sizes: list[int] = []
    real = os.preadv

    def recorded(fd, buffers, offset):
        got = real(fd, buffers, offset)
        sizes.append(got)
        return got

    monkeypatch.setattr(os, "preadv", recorded)
    result = verify._scan_rows(backend, str(path), meta, backend.extent_table(meta), False, True, sharing)
    assert result.findings == [] and result.ranges["x"][:2] == [0.0, float(data[-1])]
    assert max(sizes) == largest and sum(sizes) >= data.nbytes, sizes
