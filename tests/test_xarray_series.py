"""A series as a time dimension: ``ckptio.open_series(directory, prefix="chk")`` (issue 27, item 11).

A 2-rank job writes, per backend, a series through :class:`ckptio.Series`: steps 10, 20, 30, then a second run
restarts from step 20 (30 is superseded) and writes 25 and 35. Each checkpoint holds ``dens`` (block, x) whose
values encode the step and the block, an index coordinate ``x``, and a particle segment ``tracer`` whose length
changes with the step. Then, in a plain ``python`` process (no mpirun, as in a notebook), the series is opened as
one Dataset: steps in order without the superseded one, values, coordinates ``step``/``time``/``x``, laziness
(opening reads only the index coordinate; a selection reads only its checkpoints), and the errors for a variable
that is not alike in every checkpoint. The pytest process never initializes MPI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import BACKENDS, mpi_env, run_mpi

HERE = Path(__file__).resolve()
NB, NX = 4, 3
TIMELINE = [10, 20, 25, 35]  # 30 is superseded by the second run's 25


def dens(step: int, block: int) -> np.ndarray:
    return np.full((1, NX), step * 100.0 + block) + np.arange(NX) / 10


def write_job(root: str) -> None:
    """Under mpirun (2 ranks): per backend, two runs of one series (see the module docstring)."""
    from mpi4py import MPI

    import ckptio

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()

    def checkpoint(series: ckptio.Series, step: int) -> None:
        with series.create(step, attrs={"time": 0.5 * step, "step": step, "run": "demo"}) as ck:
            for b in range(rank, NB, size):
                ck.write("dens", dens(step, b), offset=(b, 0), global_shape=(NB, NX), dims=("block", "x"),
                         attrs={"units": "g/cm**3"})
            if rank == 0:
                ck.write("x", np.linspace(0.0, 1.0, NX), offset=(0,), global_shape=(NX,), dims=("x",))
            ck.write("tracer", np.arange(step // 10 + rank, dtype=np.float64), dims=("particle",))
            if rank == 0:
                ck.write("energy", np.array(step * 2.0), offset=(), global_shape=())

    for backend in BACKENDS:
        first = ckptio.Series(f"{root}/{backend}", comm, backend=backend, keep=10)
        for step in (10, 20, 30):
            checkpoint(first, step)
        first.wait()
        second = ckptio.Series(f"{root}/{backend}", comm, backend=backend, keep=10)  # a rerun from step 20
        for step in (25, 35):
            checkpoint(second, step)
        second.wait()


CHECK = r"""
import json, sys, warnings
import numpy as np
import ckptio, ckptio.lazy
reads = []
original = ckptio.lazy.LazyVariable.__getitem__
def spy(self, key):
    reads.append([self.name, self.reader.path.rsplit("/", 1)[-1]])
    return original(self, key)
ckptio.lazy.LazyVariable.__getitem__ = spy
out = {}
with warnings.catch_warnings():
    warnings.simplefilter("error")
    ds = ckptio.open_series(sys.argv[1], prefix="chk", drop_variables=["tracer"])
with ds:
    out["at_open"] = reads[:]
    out["dims"] = {k: int(v) for k, v in ds.sizes.items()}
    out["dens_dims"] = list(ds.dens.dims)
    out["coords"] = sorted(ds.coords)
    out["step"] = ds.step.values.tolist()
    out["time"] = ds.time.values.tolist()
    out["time_dims"] = list(ds.time.dims)
    out["x"] = ds.x.values.tolist()
    out["attrs"] = dict(ds.attrs)
    out["dens_attrs"] = dict(ds.dens.attrs)
    reads.clear()
    out["one"] = ds.dens.sel(step=25).values.tolist()
    out["one_reads"] = reads[:]
    reads.clear()
    out["column"] = ds.dens[::-2, 1, 2].values.tolist()
    out["column_reads"] = reads[:]
    out["all"] = ds.dens.values.tolist()
    out["mean"] = ds.dens.mean(["block", "x"]).values.tolist()
    out["empty"] = list(ds.dens[2:2].shape)
    out["energy"] = [list(ds.energy.dims), ds.energy.values.tolist(), ds.energy[1].values.tolist()]
try:
    ckptio.open_series(sys.argv[1], prefix="chk")
    out["tracer_error"] = "no error"
except ValueError as exc:
    out["tracer_error"] = str(exc)
try:
    ckptio.open_series(sys.argv[1], prefix="nothing")
    out["empty_error"] = "no error"
except FileNotFoundError as exc:
    out["empty_error"] = str(exc)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def series_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("series")
    run_mpi(2, [str(HERE), str(root)], timeout=400)
    return root


@pytest.mark.mpi
@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_series_opens_as_a_step_dimension(series_root: Path, backend: str) -> None:
    pytest.importorskip("xarray")
    directory = series_root / backend
    names = sorted(p.name for p in directory.iterdir() if p.name.startswith("chk_"))
    assert names == [f"chk_{s:06d}" for s in (10, 20, 25, 30, 35)]  # the superseded 30 is still on disk
    env = {k: v for k, v in mpi_env().items() if not k.startswith(("OMPI_COMM_WORLD", "PMI_", "PMIX_RANK"))}
    proc = subprocess.run([sys.executable, "-c", CHECK, str(directory)], env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    got = json.loads(proc.stdout)
    # opening reads only the index coordinate x of each checkpoint; no dens data
    assert sorted(got["at_open"]) == sorted(["x", f"chk_{s:06d}"] for s in TIMELINE)
    assert got["dims"] == {"step": 4, "block": NB, "x": NX}
    assert got["dens_dims"] == ["step", "block", "x"]
    assert got["coords"] == ["step", "time", "x"]
    assert got["step"] == TIMELINE
    assert got["time"] == [0.5 * s for s in TIMELINE] and got["time_dims"] == ["step"]
    assert got["x"] == [0.0, 0.5, 1.0]
    assert got["attrs"] == {"run": "demo"}  # step and time differ between checkpoints
    assert got["dens_attrs"] == {"units": "g/cm**3"}
    want = np.stack([np.concatenate([dens(s, b) for b in range(NB)]) for s in TIMELINE])
    np.testing.assert_array_equal(np.array(got["all"]), want)
    np.testing.assert_array_equal(np.array(got["one"]), want[2])
    assert got["one_reads"] == [["dens", "chk_000025"]]  # one checkpoint read, not the series
    np.testing.assert_array_equal(np.array(got["column"]), want[::-2, 1, 2])
    assert sorted(got["column_reads"]) == [["dens", "chk_000020"], ["dens", "chk_000035"]]  # 2 of 4 checkpoints
    np.testing.assert_allclose(got["mean"], want.mean(axis=(1, 2)))
    assert got["empty"] == [0, NB, NX]
    assert got["energy"] == [["step"], [2.0 * s for s in TIMELINE], 40.0]  # a scalar per checkpoint
    assert "'tracer'" in got["tracer_error"] and "drop_variables=" in got["tracer_error"]
    assert "no checkpoint named nothing_<step>" in got["empty_error"]


if __name__ == "__main__":
    write_job(sys.argv[1])
