"""The memory of a restart's own outputs (``ckptio.engine.restart_memory``): whole huge pages, recycled.

What is tested is the mechanism (where the pages are, whether they are mapped before a read touches them, when
they go back to the system), not a speed: issue 29 measured that the first touch of fresh outputs, inside the
restart's kernel copies, was what made the allocating restart slower than one into ``out=`` arrays."""

from __future__ import annotations

import ctypes
import gc
import json
import mmap
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import run_mpi

from ckptio.engine import restart_memory
from ckptio.engine.restart_memory import HUGE_PAGE, MIN_BYTES, RecycledMemory

PROGRAM = Path(__file__).resolve().parent / "programs" / "recycled_reads.py"
UNDER_LIMIT = Path(__file__).resolve().parent / "programs" / "kept_memory_under_limit.py"
BAD_SETTING = Path(__file__).resolve().parent / "programs" / "bad_recycle_setting.py"
needs_lazy_free = pytest.mark.skipif(not hasattr(mmap, "MADV_FREE") or not restart_memory._kernel_at_least(5, 18),
                                     reason="no MADV_FREE, or a kernel before 5.18, here")
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]


def resident_fraction(a: np.ndarray) -> float:
    """The fraction of ``a``'s pages that are mapped in this process (mincore)."""
    page = mmap.PAGESIZE
    start = a.ctypes.data - a.ctypes.data % page
    npages = (a.ctypes.data + a.nbytes - start + page - 1) // page
    vec = (ctypes.c_ubyte * npages)()
    assert _libc.mincore(start, npages * page, vec) == 0, ctypes.get_errno()
    return sum(b & 1 for b in bytes(vec)) / npages


def smaps_entry(addr: int) -> dict[str, list[str]]:
    """The /proc/self/smaps fields of the mapping that holds address ``addr``."""
    fields: dict[str, list[str]] = {}
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= addr < hi
        elif inside:
            fields[head.rstrip(":")] = line.split()[1:]
    assert fields, hex(addr)
    return fields


def vm_flags(a: np.ndarray) -> list[str]:
    """The VmFlags of the mapping that holds ``a`` (/proc/self/smaps)."""
    return smaps_entry(a.ctypes.data)["VmFlags"]


def lazy_free_bytes(addr: int) -> int:
    """The bytes of the mapping at ``addr`` the kernel may take back under memory pressure (MADV_FREE)."""
    return int(smaps_entry(addr)["LazyFree"][0]) * 1024


@pytest.fixture
def recycled(monkeypatch):
    monkeypatch.setenv("CKPTIO_RECYCLE_SECONDS", "60")
    monkeypatch.delenv("CKPTIO_READ_THREAD", raising=False)
    pool = RecycledMemory()
    monkeypatch.setattr(restart_memory, "RECYCLED", pool)
    yield pool
    pool.release()


def test_large_outputs_are_2mib_aligned_and_advised_huge_pages_small_ones_are_numpys(recycled):
    a = restart_memory.empty((5, 1000, 1000), np.float64)
    assert a.shape == (5, 1000, 1000) and a.dtype == np.float64 and a.flags.c_contiguous and a.flags.writeable
    assert a.ctypes.data % HUGE_PAGE == 0
    if hasattr(mmap, "MADV_HUGEPAGE"):
        assert "hg" in vm_flags(a)  # MADV_HUGEPAGE: the kernel backs it with 2 MiB pages where it has them
    small = restart_memory.empty((100, 100), np.float64)  # below MIN_BYTES: as before (page-aligned from 64 KiB)
    assert small.nbytes < MIN_BYTES and small.ctypes.data % 4096 == 0 and recycled.fresh == 1


def test_a_dropped_output_is_reused_with_its_pages_already_mapped(recycled):
    a = restart_memory.empty((MIN_BYTES // 8 * 3,), np.float64)
    a[...] = 1.5  # the read fills it: its pages are mapped now
    where = a.ctypes.data
    del a
    gc.collect()
    assert recycled.kept_bytes >= 3 * MIN_BYTES
    b = restart_memory.empty((MIN_BYTES // 8 * 3 - 1000,), np.float64)  # a little smaller: still fits
    assert b.ctypes.data == where and recycled.reused == 1 and recycled.fresh == 1
    assert resident_fraction(b) == 1.0  # mapped before anything touched it: the read will not fault on it
    fresh = restart_memory.empty((MIN_BYTES // 8 * 3,), np.float64)  # b holds the kept one
    assert fresh.ctypes.data != where and recycled.fresh == 2 and resident_fraction(fresh) < 0.5


def test_kept_memory_is_advised_before_any_other_thread_can_take_it(recycled, monkeypatch):
    """The advice comes before the kept list holds the mapping: advised later, an output another thread had
    written into it meanwhile would be the kernel's to discard."""
    advised = []
    lazy_free = restart_memory._lazy_free

    def checked(found):
        assert found not in recycled._kept and recycled.kept_bytes == 0
        advised.append(found)
        lazy_free(found)

    monkeypatch.setattr(restart_memory, "_lazy_free", checked)
    a = restart_memory.empty((2 * MIN_BYTES,), np.uint8)
    del a
    gc.collect()
    assert len(advised) == 1 and recycled.kept_bytes == 2 * MIN_BYTES


@pytest.mark.parametrize(("sysname", "release", "expected"), [
    ("Linux", "6.18.0-cloud", True), ("Linux", "5.18.0", True), ("Linux", "5.17.15", False),
    ("Linux", "4.19.0-26-amd64", False), ("Darwin", "23.1.0", False)])
def test_lazy_freeing_only_on_kernels_with_the_pinned_page_fix(monkeypatch, sysname, release, expected):
    fake = os.uname_result((sysname, "host", release, "#1", "x86_64"))
    monkeypatch.setattr(os, "uname", lambda: fake)
    assert restart_memory._kernel_at_least(5, 18) is expected


@needs_lazy_free
def test_kept_memory_is_lazily_freed_and_reused_without_faults(recycled):
    """A kept mapping stays mapped but is the kernel's to take under memory pressure (MADV_FREE), and the next
    output written into it takes it back without a page fault (x86-64 and arm64 set the dirty bit in hardware)."""
    nbytes = 3 * MIN_BYTES
    a = restart_memory.empty((nbytes // 8,), np.float64)
    a[...] = 1.5
    where = a.ctypes.data
    assert lazy_free_bytes(where) == 0  # in use: the caller's
    del a
    gc.collect()
    assert recycled.kept_bytes >= nbytes
    # kept: reclaimable (4 KiB pages are marked in per-CPU batches, a few may still be pending)
    assert lazy_free_bytes(where) >= nbytes - 64 * mmap.PAGESIZE
    b = restart_memory.empty((nbytes // 8,), np.float64)
    assert b.ctypes.data == where and resident_fraction(b) == 1.0
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    b[...] = 2.5  # what the read does
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults <= 2, faults  # (fresh or given back: 3,072 faults of 4 KiB pages, or 6 of huge ones)
    assert lazy_free_bytes(where) == 0 and float(b[0]) == 2.5 and float(b[-1]) == 2.5


def memory_cgroup(limit: int) -> tuple[Path, Path] | None:
    """A new memory cgroup limited to ``limit`` bytes: (its directory, the file a process joins it by), or None
    where this process cannot make one (not root, no memory controller). cgroup v1 or v2."""
    v1, v2 = Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup")
    if (v1 / "memory.limit_in_bytes").exists():
        parent, limit_file = v1, "memory.limit_in_bytes"
    elif (v2 / "cgroup.subtree_control").exists() and "memory" in (v2 / "cgroup.subtree_control").read_text().split():
        parent, limit_file = v2, "memory.max"
    else:
        return None
    d = Path(unique_cgroup_path(parent))
    try:
        d.mkdir()
    except OSError:
        return None
    try:
        (d / limit_file).write_text(str(limit))
    except OSError:
        d.rmdir()
        return None
    if (d / "memory.swap.max").exists():  # v2 with swap accounting: no swap either, as on the test machines
        (d / "memory.swap.max").write_text("0")
    return d, d / "cgroup.procs"


def unique_cgroup_path(parent: Path) -> str:
    """A cgroup path under ``parent`` no other test process uses."""
    return str(parent / f"ckptio-test-{os.getpid()}-{time.monotonic_ns()}")


@needs_lazy_free
def test_kept_memory_gives_way_to_the_simulations_own_allocations_under_a_memory_limit():
    """In a 400 MiB memory cgroup: a 200 MiB restart output is dropped (kept for a next read), then the
    simulation allocates 250 MiB. Kept memory that stayed pinned would get the process killed (it did, before
    the kept mappings were advised MADV_FREE); the kernel must take the kept pages back instead."""
    made = memory_cgroup(400 << 20)
    if made is None:
        pytest.skip("cannot make a memory cgroup here (needs root and a memory controller)")
    d, procs = made
    try:
        proc = subprocess.run(
            [sys.executable, str(UNDER_LIMIT)], capture_output=True, text=True, timeout=120,
            env={k: v for k, v in os.environ.items() if k != "CKPTIO_READ_THREAD"} | {"CKPTIO_RECYCLE_SECONDS": "60"},
            preexec_fn=lambda: procs.write_text(str(os.getpid())))
    finally:
        for _ in range(50):  # the cgroup goes once its (killed) process is gone
            try:
                d.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    assert "KEPT 200" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 0 and "OK" in proc.stdout, (proc.returncode, proc.stdout, proc.stderr)
    # the next output is not made in the mapping the kernel took pages of: reclaim split its huge pages, and its
    # 4 KiB refaults (up to 51,200 here) were what made the allocating restart of `make bench` slow on the Intel VM
    second = dict(kv.split("=") for kv in proc.stdout.split("SECOND ")[1].split())
    assert second["taken_back"] == "1" and second["reused"] == "0", proc.stdout
    if "[never]" not in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text():
        assert int(second["faults"]) < (200 << 20) // HUGE_PAGE * 8, proc.stdout  # huge pages: ~100 faults


def test_a_view_keeps_the_memory_and_its_contents(recycled):
    a = restart_memory.empty((MIN_BYTES // 8 * 2,), np.float64)
    a[...] = np.arange(a.size)
    view = a[10:20]
    del a
    gc.collect()
    assert recycled.kept_bytes == 0  # the view still uses it
    other = restart_memory.empty((MIN_BYTES // 8 * 2,), np.float64)
    other[...] = -1
    assert np.array_equal(view, np.arange(10, 20))
    del view, other
    gc.collect()
    assert recycled.kept_bytes == 2 * (2 * MIN_BYTES)


def test_a_much_larger_kept_mapping_is_not_used_for_a_small_output(recycled):
    big = restart_memory.empty((8 * MIN_BYTES,), np.uint8)
    del big
    small = restart_memory.empty((MIN_BYTES,), np.uint8)
    assert recycled.reused == 0 and recycled.fresh == 2 and small.nbytes == MIN_BYTES


def test_kept_memory_goes_back_to_the_system_after_the_retention_time(recycled, monkeypatch):
    monkeypatch.setenv("CKPTIO_RECYCLE_SECONDS", "0.3")
    a = restart_memory.empty((2 * MIN_BYTES,), np.uint8)
    del a
    assert recycled.kept_bytes == 2 * MIN_BYTES
    deadline = time.monotonic() + 10
    while recycled.kept_bytes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert recycled.kept_bytes == 0  # unmapped by the helper thread, without another call


@pytest.mark.parametrize("env", [{"CKPTIO_RECYCLE_SECONDS": "0"}, {"CKPTIO_READ_THREAD": "0"}])
def test_nothing_is_kept_when_recycling_or_helper_threads_are_off(recycled, monkeypatch, env):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    a = restart_memory.empty((2 * MIN_BYTES,), np.uint8)
    del a
    assert recycled.kept_bytes == 0


def test_never_more_is_kept_than_was_in_use_at_once(recycled):
    for _ in range(5):  # one at a time: the peak in use is one of them
        a = restart_memory.empty((2 * MIN_BYTES,), np.uint8)
        del a
    assert recycled.kept_bytes == 2 * MIN_BYTES and recycled.fresh == 1
    arrays = [restart_memory.empty((2 * MIN_BYTES,), np.uint8) for _ in range(3)]
    del arrays
    assert recycled.kept_bytes == 3 * 2 * MIN_BYTES


@pytest.mark.mpi
def test_allocating_reads_reuse_dropped_outputs_and_return_the_right_values(tmp_path):
    """Under mpirun (3 ranks, shifted requests): a second allocating read of the same sizes is made in the first
    one's memory (no fresh mapping, pages mapped before the read), ``reader.stats`` counts both, and every value
    is right, also where the recycled memory held another variable before."""
    proc = run_mpi(3, [str(PROGRAM), str(tmp_path / "chk")], timeout=300)
    lines = [json.loads(x.split(" ", 1)[1]) for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert len(lines) == 3, proc.stdout + proc.stderr
    for r in lines:
        assert r["values_ok"], r
        assert r["first"]["fresh"] >= 1, r
        assert r["second"]["fresh"] == 0 and r["second"]["reused"] >= 1, r  # nothing fresh the second time
        assert r["second"]["resident_before"] == 1.0, r
        assert r["second"]["addresses"] == r["first"]["addresses"], r
        for read in ("first", "second"):  # what reader.stats says is what happened
            assert r[read]["stats"] == {"fresh_outputs": r[read]["fresh"], "recycled_outputs": r[read]["reused"]}, r


@pytest.mark.mpi
@pytest.mark.parametrize("bad", ["abc", "-1"])
def test_a_bad_recycle_setting_on_one_rank_fails_the_open_on_every_rank(tmp_path, bad):
    """CKPTIO_RECYCLE_SECONDS is local and used only when a read allocates, yet a malformed value on one rank
    fails ``ckptio.open`` itself, with the same clear error on every rank (not a later read, and no hang)."""
    proc = run_mpi(3, [str(BAD_SETTING), str(tmp_path / "chk"), bad], timeout=120)
    lines = [json.loads(x.split(" ", 1)[1]) for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert len(lines) == 3, proc.stdout + proc.stderr
    for r in lines:
        assert r["error"] is not None, r
        assert "CKPTIO_RECYCLE_SECONDS" in r["error"] and "rank 2" in r["error"], r
