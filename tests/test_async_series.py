"""Asynchronous and staged checkpoints, compression, Series retention and fallback (issue: async/staged)."""

from __future__ import annotations

import pytest
from mpi_helpers import (
    BACKENDS,
    REPO,
    parse_cases,
    run_mpi,
    run_script,
)

from ckptio.testing import CASES

ASYNC_SNAPSHOT = """
import sys, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
u = np.full((1000, 64), float(r))
v = np.asfortranarray(np.arange(60.0).reshape(6, 10) + r)
with ckptio.create(sys.argv[1], comm, backend=sys.argv[2], mode="async") as ck:
    ck.write("u", u, offset=(1000 * r, 0), global_shape=(1000 * n, 64))
    ck.write("v", v, offset=(6 * r, 0), global_shape=(6 * n, 10))
u[:] = -1.0          # the simulation overwrites its state right away
v[:] = -1.0
ck.wait()
assert ck.done()
with ckptio.open(sys.argv[1], comm) as rd:
    got = rd.read("u")
    assert (got == np.repeat(np.arange(n, dtype=float), 1000)[:, None]).all(), "async checkpoint lost the snapshot"
    want = np.concatenate([np.arange(60.0).reshape(6, 10) + k for k in range(n)])
    assert (rd.read("v") == want).all()
# a failing background checkpoint: the error reaches every rank at wait()
bad = ckptio.create(sys.argv[1] + "_bad", comm, backend=sys.argv[2], mode="async")
bad.write("x", np.zeros(3), offset=(2 * r,), global_shape=(2 * n + 1,))
bad.close()
try:
    bad.wait()
    raise SystemExit("no error from an overlapping async checkpoint")
except ckptio.DeclarationError as exc:
    assert "'x'" in str(exc)
print("OK", r, flush=True)
"""

SERIES = """
import os, sys, warnings, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
d, backend, mode = sys.argv[1], sys.argv[2], sys.argv[3]
series = ckptio.Series(d, comm, keep=2, backend=backend, mode=mode)
for step in range(1, 6):
    with series.create(step, attrs={"step": step}) as ck:
        ck.write("x", np.full(8, step, np.int64), offset=(8 * r,), global_shape=(8 * n,))
series.wait()
left = sorted(n for n in os.listdir(d) if not n.endswith(".ckptio-lease"))  # (the series lease: ckptio.lease)
assert left == ["chk_000004", "chk_000005"], os.listdir(d)
assert series.latest() == os.path.join(d, "chk_000005")
if r == 0:  # corrupt one data byte of the newest checkpoint
    from ckptio.backends import detect_backend
    path = os.path.join(d, "chk_000005")
    be = detect_backend(path)
    e = be.extents(be.read_metadata(path))[0]
    with open(path, "r+b") as f:
        f.seek(e.file_offset)
        b = f.read(1)
        f.seek(e.file_offset)
        f.write(bytes([b[0] ^ 0xFF]))
comm.Barrier()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    found = series.latest()
assert found == os.path.join(d, "chk_000004"), found
if r == 0:
    assert any("chk_000005" in str(w.message) and "checksum" in str(w.message) for w in caught), caught
with ckptio.open(found, comm) as ck:
    assert ck.attrs["step"] == 4 and (ck.read("x") == 4).all()
print("OK", r, flush=True)
"""

STAGED = """
import os, sys, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
d, stage, backend = sys.argv[1], sys.argv[2], sys.argv[3]
series = ckptio.Series(d, comm, keep=3, backend=backend, stage_dir=stage)
for step in (1, 2):
    with series.create(step) as ck:
        ck.write("y", np.full((4, 3), 10 * step + r, np.float32), offset=(4 * r, 0), global_shape=(4 * n, 3))
series.wait()
final = os.path.join(d, "chk_000002")
assert os.path.exists(final)
# the stage holds the newest drained checkpoint only, under a directory named by the final directory
from ckptio import staging
key = staging.key_dir(stage, final)
assert sorted(os.listdir(stage)) == [os.path.basename(key)], os.listdir(stage)
assert sorted(os.listdir(key)) == ["chk_000002"], os.listdir(key)
assert series.latest() == final
if r == 0:
    os.unlink(final)                       # the drain "did not finish": restart drains the staged copy again
comm.Barrier()
assert series.latest() == final and os.path.exists(final)
with ckptio.open(final, comm) as ck:
    assert (ck.read("y") == (20 + np.repeat(np.arange(n), 4))[:, None]).all()
print("OK", r, flush=True)
"""

COMPRESSION = """
import sys, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
x = np.linspace(0, 1, 20000).reshape(200, 100) + r
for spec in ("zstd", "zstd+shuffle:5"):
    with ckptio.create(sys.argv[1], comm, compression=spec) as ck:
        ck.write("x", x, offset=(200 * r, 0), global_shape=(200 * n, 100))
        ck.write("ids", np.arange(r * 3, dtype=np.int64))
    with ckptio.open(sys.argv[1], comm, buffer_bytes=4096) as ck:
        assert (ck.read("x", offset=(200 * r, 0), shape=(200, 100)) == x).all()
        b = ck.backend.read_metadata(sys.argv[1])["variables"]["x"]["blocks"][0]
        assert b["codec"] == spec.split(":")[0] + ":" + (spec.split(":")[1] if ":" in spec else "3")
        assert b["stored_nbytes"] < 200 * 100 * 8
try:
    ckptio.create(sys.argv[1] + "_h5", comm, backend="hdf5", compression="zstd").close()  # raised in its first phase
    raise SystemExit("hdf5 accepted compression")
except ckptio.CapabilityError as exc:
    assert "compression" in str(exc)
print("OK", r, flush=True)
"""


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
def test_async_checkpoint_holds_values_at_close_and_reports_errors(backend, tmp_path):
    proc = run_script(4, ASYNC_SNAPSHOT, tmp_path, str(tmp_path / "chk_000001"), backend)
    assert proc.stdout.count("OK") == 4


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_series_keeps_last_k_and_falls_back_past_a_corrupt_newest(backend, mode, tmp_path):
    proc = run_script(3, SERIES, tmp_path, str(tmp_path / "run"), backend, mode)
    assert proc.stdout.count("OK") == 3


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
def test_staged_checkpoint_drains_and_restart_prefers_stage(backend, tmp_path):
    proc = run_script(2, STAGED, tmp_path, str(tmp_path / "run"), str(tmp_path / "stage"), backend)
    assert proc.stdout.count("OK") == 2


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_compression_round_trip_and_capability_error(tmp_path):
    proc = run_script(2, COMPRESSION, tmp_path, str(tmp_path / "chk_000001"))
    assert proc.stdout.count("OK") == 2


_RESULTS: dict = {}


@pytest.mark.mpi
@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", ["async", "staged"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", [name for name, _ in CASES])
def test_conformance_in_background_modes(backend, mode, case, tmp_path_factory):
    key = (backend, mode)
    if key not in _RESULTS:
        d = tmp_path_factory.mktemp(f"conf_{backend}_{mode}")
        proc = run_mpi(4, ["-m", "ckptio.testing", "--backend", backend, "--outdir", str(d), "--mode", mode],
                       timeout=400, check=False)
        _RESULTS[key] = parse_cases(proc.stdout) or {"*": proc.stderr[-3000:]}
    assert _RESULTS[key].get(case) == "PASS", _RESULTS[key].get(case, _RESULTS[key].get("*"))


APP = str(REPO / "examples" / "flash_like" / "flash_like.py")


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
def test_flash_restart_equality_async_and_staged(backend, tmp_path):
    small = ["--nblocks", "12", "--nxb", "8", "--quiet", "--backend", backend]
    run_mpi(2, [APP, "--outdir", str(tmp_path / "a"), "--steps", "20", "--final-state", str(tmp_path / "a.npz"),
                *small])
    out = str(tmp_path / "b")
    run_mpi(4, [APP, "--outdir", out, "--steps", "10", "--mode", "async", *small])
    run_mpi(3, [APP, "--outdir", out, "--steps", "20", "--restart", "--stage-dir", str(tmp_path / "stage"),
                "--final-state", str(tmp_path / "b.npz"), *small])
    import numpy as np

    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
        assert a[k].tobytes() == b[k].tobytes(), k


BACKGROUND_RESULTS = """
import sys
import numpy as np
from mpi4py import MPI
import ckptio
from ckptio.block_table import BlockTable

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
d, how = sys.argv[1], sys.argv[2]
for backend in ("mpiio", "hdf5", "pnetcdf"):
    path = f"{d}/{how}_{backend}"
    kw = {"stage_dir": f"{d}/stage"} if how == "staged" else {"mode": how}
    w = ckptio.create(path, comm, backend=backend, **kw)
    if rank == 0:  # a 0-d variable (the staged copy made it 1-d: the drain refused it), as a numpy scalar too
        w.write("e", np.array(2.5), offset=(), global_shape=())
        w.write("f", np.float32(3.5), offset=(), global_shape=())
    w.write("x", np.full(4, rank, np.float64), offset=(4 * rank,), global_shape=(4 * size,))
    w.close()
    w.wait()
    # after wait() as after a synchronous close(): the statistics and the document (rank 0's whole)
    assert w.stats.bytes_total == 32 * size + 12, w.stats
    assert "write" in w.stats.seconds, w.stats
    var = w.meta["variables"]["x"]
    assert isinstance(var["blocks"], BlockTable) if rank == 0 else var["nblocks"] == size, var
    with ckptio.open(path, comm) as ck:
        assert float(ck.read("e")) == 2.5 and float(ck.read("f")) == 3.5 and ck.read("f").dtype == np.float32
        assert np.array_equal(ck.read("x", (4 * rank,), (4,)), np.full(4, rank))
print("OK", rank)
"""


@pytest.mark.mpi
@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["sync", "async", "staged"])
def test_background_checkpoints_keep_scalars_and_report_stats_and_meta_after_wait(how, tmp_path):
    proc = run_script(2, BACKGROUND_RESULTS, tmp_path, str(tmp_path), how, timeout=200)
    assert proc.stdout.count("OK") == 2, proc.stdout + proc.stderr
