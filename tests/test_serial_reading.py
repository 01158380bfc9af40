"""Serial reading for analysis: ``ckptio.open(path)`` with no communicator and no mpirun, lazy h5py-like
slicing (``ck["dens"][3:5]``), readable reprs, and the xarray engine (``xr.open_dataset(path, engine="ckptio")``).

The checkpoints (one per backend) are written by 2 ranks under mpirun by ``test_variable_metadata.py``'s
write job; every check here then runs in a plain ``python`` subprocess, without mpirun (MPI, if initialized,
is a singleton of one process), as in a notebook. The pytest process never initializes MPI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import test_variable_metadata as tvm
from mpi_helpers import mpi_env, run_mpi

BACKENDS = ("mpiio", "hdf5", "pnetcdf")
# Index expressions checked against numpy indexing of the whole array (dens has shape (NB, 3, 5) = (6, 3, 5))
KEYS = ["()", "...", "3", "-1", "slice(3, 5)", "(slice(3, 5), 0)", "(1, 2, 4)", "(-1, -1, -1)", "(..., 4)",
        "(2, ...)", "(slice(None, None, 2), slice(None), slice(1, None, 3))", "slice(None, None, -2)",
        "(slice(4, 0, -3), 1, slice(None, None, -1))", "slice(5, 2)", "slice(-100, 100)", "(slice(None), 1)",
        "np.int64(2)", "(Ellipsis, slice(2, 3), 0)"]


def _serial(code: str, cwd: Path) -> str:
    """Python code in a plain subprocess: no mpirun, no Open MPI launcher variables."""
    env = {k: v for k, v in mpi_env().items() if not k.startswith(("OMPI_COMM_WORLD", "PMI_", "PMIX_RANK"))}
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for backend in BACKENDS:
        directory = tmp_path_factory.mktemp(backend)
        out[backend] = directory / "chk_000007"
        run_mpi(2, [str(Path(tvm.__file__)), "write", backend, str(out[backend]), str(directory / "stage")],
                timeout=240)
    return out


@pytest.mark.mpi
@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", BACKENDS)
def test_open_without_communicator_and_slice_lazily(checkpoints, backend: str) -> None:
    path = checkpoints[backend]
    out = _serial(f"""
import json, os, numpy as np, ckptio
assert not any(k.startswith("OMPI_COMM_WORLD") for k in os.environ)  # not launched by mpirun
ck = ckptio.open({str(path)!r})
result = {{"size": ck.comm.Get_size(), "slice": ck["dens"][3:5].tolist(), "slice_bytes": ck.stats.file_bytes,
          "total_bytes": ck.variables["dens"].nbytes + ck.variables["pres"].nbytes}}
full = ck["dens"][...]
result["keys"] = {{}}
for key in {KEYS!r}:
    got = ck["dens"][eval(key)]
    want = full[eval(key)]
    result["keys"][key] = [type(got).__name__, list(np.shape(got)), bool(np.array_equal(got, want)),
                           type(want).__name__]
result["asarray"] = np.asarray(ck["x"]).tolist()
result["tracer"] = ck["tracer"][1:4].tolist()
var = ck["dens"]
result["var"] = [var.dims, list(var.shape), var.dtype.str, var.ndim, len(var), dict(var.attrs), repr(var)]
result["repr"] = repr(ck)
errors = {{}}
for key in ("6", "-7", "(0, 0, 0, 0)", "[1, 2]", "(..., ...)", "slice(None, None, 0)", "None", "1.5", "True"):
    try:
        ck["dens"][eval(key)]
        errors[key] = "no error"
    except Exception as exc:
        errors[key] = type(exc).__name__
try:
    ck["nope"]
except KeyError as exc:
    errors["nope"] = [type(exc).__name__, isinstance(exc, ckptio.CheckpointError), str(exc)]
result["errors"] = errors
ck.close()
result["closed"] = repr(ck)
print(json.dumps(result))
""", path.parent)
    got = json.loads(out)
    assert got["size"] == 1
    np.testing.assert_array_equal(np.array(got["slice"]), np.concatenate([tvm.dens(3), tvm.dens(4)]))
    # lazy: rows 3 and 4 of dens were read, not the 12 rows of dens and pres
    assert 0 < got["slice_bytes"] <= got["total_bytes"] / 3, got
    for key, (kind, shape, equal, want_kind) in got["keys"].items():
        assert equal and kind == want_kind, (key, kind, want_kind)
        assert shape == list(np.shape(np.empty((tvm.NB, 3, 5))[eval(key)])), key
    assert got["asarray"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert got["tracer"] == [1.0, 0.0, 1.0]  # segments of rank 0 (0, 1) and rank 1 (0, 1, 2), concatenated
    dims, shape, dtype, ndim, length, attrs, var_repr = got["var"]
    assert (dims, shape, dtype, ndim, length, attrs) == (["block", "y", "x"], [tvm.NB, 3, 5], "<f8", 3, tvm.NB,
                                                         tvm.DENS_ATTRS)
    assert var_repr.startswith("<ckptio variable 'dens' (block: 6, y: 3, x: 5) float64, 720 B, array, ")
    assert "units='g/cm**3'" in var_repr
    lines = got["repr"].splitlines()
    assert lines[0].startswith(f"<ckptio.Reader {path}: {backend}, written on 2 rank(s) at ")
    assert lines[0].endswith(", open on 1 rank(s)>")
    assert lines[1] == "attributes: step=7"
    assert lines[2] == "variables (5):"
    dens_line = next(line for line in lines if line.split()[0] == "dens")
    assert dens_line.split()[1:8] == ["(block:", "6,", "y:", "3,", "x:", "5)", "float64"], dens_line
    assert got["closed"] == f"<ckptio.Reader {path} (closed)>"
    errors = got["errors"]
    assert errors.pop("nope")[:2] == ["ReadRequestError", True]
    assert errors == {"6": "IndexError", "-7": "IndexError", "(0, 0, 0, 0)": "IndexError", "[1, 2]": "TypeError",
                      "(..., ...)": "IndexError", "slice(None, None, 0)": "ValueError", "None": "TypeError",
                      "1.5": "TypeError", "True": "TypeError"}


@pytest.mark.mpi
@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", BACKENDS)
def test_xarray_engine_opens_every_format_lazily(checkpoints, backend: str) -> None:
    pytest.importorskip("xarray")
    path = checkpoints[backend]
    out = _serial(f"""
import json, numpy as np, xarray as xr
import ckptio.lazy
reads = []
original = ckptio.lazy.LazyVariable.__getitem__
def spy(self, key):
    reads.append([self.name, repr(key)])
    return original(self, key)
ckptio.lazy.LazyVariable.__getitem__ = spy
engine = {{"engine": "ckptio"}} if {backend!r} != "mpiio" else {{}}  # native files: found by guess_can_open
with xr.open_dataset({str(path)!r}, **engine) as ds:
    at_open = [name for name, _ in reads]
    total = ds.dens + ds.pres
    result = {{"at_open": at_open, "vars": sorted(ds.data_vars), "coords": list(ds.coords),
              "sizes": dict(ds.sizes), "attrs": dict(ds.attrs), "dens_attrs": dict(ds.dens.attrs),
              "total_dims": list(total.dims), "total": total.values.tolist()}}
    reads.clear()
    result["rows"] = ds.dens[3:5, 1].values.tolist()
    result["rows_reads"] = list(reads)
    result["strided"] = ds.pres[::-2, 0, 1].values.tolist()
with xr.open_dataset({str(path)!r}, engine="ckptio", drop_variables=["pres", "tracer"]) as ds:
    result["dropped"] = sorted(ds.data_vars)
print(json.dumps(result))
""", path.parent)
    got = json.loads(out)
    assert got["at_open"] == ["x"]  # only the index coordinate is read at open; data variables stay lazy
    assert got["vars"] == ["dens", "plain", "pres", "tracer"]  # no ckptio bookkeeping
    assert got["coords"] == ["x"]
    assert got["sizes"] == {"block": tvm.NB, "y": 3, "x": 5, "particle": 5, "plain_d0": 8}
    assert got["attrs"] == {"step": 7}
    assert got["dens_attrs"] == tvm.DENS_ATTRS
    assert got["total_dims"] == ["block", "y", "x"]
    np.testing.assert_array_equal(np.array(got["total"]),
                                  np.concatenate([tvm.dens(i) + tvm.pres(i) for i in range(tvm.NB)]))
    np.testing.assert_array_equal(np.array(got["rows"]), np.concatenate([tvm.dens(3), tvm.dens(4)])[:, 1])
    assert [name for name, _ in got["rows_reads"]] == ["dens"]
    np.testing.assert_array_equal(np.array(got["strided"]), [tvm.pres(i)[0, 0, 1] for i in (5, 3, 1)])
    assert got["dropped"] == ["dens", "plain"]


def test_an_hdf5_checkpoint_the_program_has_open_in_h5py_still_opens(tmp_path) -> None:
    """HDF5 refuses a second open with other locking flags ("file locking flag values don't match"): a good
    checkpoint was reported as corrupt, and latest() fell back to an older one."""
    import h5py
    from mpi4py import MPI

    import ckptio

    run = tmp_path / "run"
    run.mkdir()
    for step in (1, 2):
        with ckptio.create(run / f"chk_{step:06d}", MPI.COMM_SELF, backend="hdf5") as w:
            w.write("x", np.full(4, float(step)), offset=(0,), global_shape=(4,))
    with h5py.File(run / "chk_000002", "r"):
        with ckptio.open(run / "chk_000002") as ck:
            np.testing.assert_array_equal(ck.read("x"), np.full(4, 2.0))
        assert ckptio.latest(str(run), verify=True).endswith("chk_000002")
