"""Per-variable metadata: ``write(name, a, ..., dims=(...), attrs={...})`` in every backend.

A 2-rank job writes one checkpoint per backend (and an async and a staged one) whose variables share named
dimensions and carry attributes; then

* ckptio reads ``variables[name].dims/.attrs`` back (on 2 ranks; defaults ``<name>_d<i>`` when undeclared);
* xarray opens the HDF5 and netCDF files with the netCDF-C engine (``netcdf4``) as one Dataset whose
  variables share dimensions: ``ds.dens + ds.pres`` has the variables' shape (before, every netCDF variable
  had its own dimensions and the sum broadcast to the product of both shapes), attributes are there, a 1-D
  variable named like its dimension is a coordinate;
* h5py sees one dimension scale per dimension name, attached to every variable using it;
* the HDF5 metadata is read without h5py (the built-in parser) with the scales in the file;
* ranks declaring different dims or attrs for one variable, a dimension name with two lengths and a
  dimension named like a variable that is not its coordinate fail with DeclarationError on every rank,
  before any file exists; local mistakes fail at ``write()`` on the rank that made them;
* ``ckptio.model.meta.validate`` checks the optional fields (no MPI).

The MPI programs are this file (``python test_variable_metadata.py write|errors|crowded ...``); the pytest
process never initializes MPI.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import mpi_env, run_mpi

HERE = Path(__file__).resolve()
NB = 6  # blocks along the leading axis
DENS_ATTRS = {"units": "g/cm**3", "long_name": "density", "scale": [1.5, 2.0], "ok": True}
PRES_ATTRS = {"units": "erg/cm**3"}
X_ATTRS = {"units": "cm"}
CASES = ("mpiio", "hdf5", "pnetcdf", "async", "staged")


def dens(i: int) -> np.ndarray:
    return np.arange(15, dtype=np.float64).reshape(1, 3, 5) + 100.0 * i


def pres(i: int) -> np.ndarray:
    return np.full((1, 3, 5), 0.5 * i)


# ----------------------------------------------------------------------------- programs run under mpirun
def write_job(case: str, path: str, stage: str) -> None:
    """Under mpirun: blocks of dens/pres (dims block, y, x) round robin, the coordinate x on rank 0, a
    segment along "particle", a variable without dims; then read back on every rank."""
    from mpi4py import MPI

    import ckptio

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    backend = case if case in ("mpiio", "hdf5", "pnetcdf") else "mpiio"
    extra = {"mode": "async"} if case == "async" else {"stage_dir": stage} if case == "staged" else {}
    ck = ckptio.create(path, comm, backend=backend, attrs={"step": 7}, **extra)
    for i in range(rank, NB, size):
        ck.write("dens", dens(i), offset=(i, 0, 0), global_shape=(NB, 3, 5), dims=("block", "y", "x"),
                 attrs=DENS_ATTRS)
        ck.write("pres", pres(i), offset=(i, 0, 0), global_shape=(NB, 3, 5), dims=["block", "y", "x"],
                 attrs=PRES_ATTRS)
    if rank == 0:
        ck.write("x", np.linspace(0.0, 1.0, 5), offset=(0,), global_shape=(5,), dims=("x",), attrs=X_ATTRS)
    ck.write("tracer", np.arange(rank + 2, dtype=np.float64), dims=("particle",), attrs={"units": "cm"})
    ck.write("plain", np.arange(4, dtype=np.int32) + 4 * rank, offset=(4 * rank,), global_shape=(4 * size,))
    ck.close()
    ck.wait()
    with ckptio.open(path, comm) as r:
        v = r.variables
        got = {name: [list(v[name].dims), dict(v[name].attrs)] for name in v}
        np.testing.assert_array_equal(r.read("dens", offset=(0, 0, 0), shape=(NB, 3, 5)),
                                      np.concatenate([dens(i) for i in range(NB)]))
    print(f"VARS {rank} {json.dumps(got, sort_keys=True)}", flush=True)


ERROR_CASES = {
    # case: (what rank 1 declares differently, expected words in the message)
    "dims differ": "rank 0 declared dims ['block', 'y', 'x']",
    "attrs differ": "rank 0 declared dims ['block', 'y', 'x'] and attrs {'units': 'K'} but rank 1",
    "dims only on one rank": "no dims and no attrs",
    "one dimension two lengths": "dimension 'y' has length 3 in variable 'dens' but 4 in variable 'pres'",
    "dimension named like a variable": "dimension 'y' is also the name of variable 'y', which is not its coordinate",
    # outside trial o1: a variable named like another's DEFAULT dimension showed in xarray as its coordinate
    "default dimension named like a variable": "default dimension 'dens_d1' is also the name of variable 'dens_d1'",
}


def crowded_job(out_dir: str) -> None:
    """Under mpirun (2 ranks): three hdf5 variables share the dimension "n", one more than the (lowered) number of
    datasets an HDF5 dimension scale may serve: CapabilityError at close, nothing left in ``out_dir``. Prints
    ``REFUSED`` (``NOERROR`` or ``BAD <error>`` otherwise) and ``LEFT <what out_dir holds>``."""
    from mpi4py import MPI
    from programs import internals

    import ckptio

    comm = MPI.COMM_WORLD
    internals.lower_hdf5_dimension_scale_users(2)  # the real limit (4000) would need 4001 datasets
    ck = ckptio.create(os.path.join(out_dir, "chk"), comm, backend="hdf5")
    for name in ("a", "b", "c"):
        ck.write(name, np.zeros((1, 4)), offset=(comm.Get_rank(), 0), global_shape=(2, 4), dims=("n", "x"))
    try:
        ck.close()
        print("NOERROR", flush=True)
    except ckptio.CapabilityError as exc:
        print("REFUSED" if "dimension 'n' is shared by 3 variables" in str(exc) else f"BAD {exc!r}", flush=True)
    print("LEFT", sorted(os.listdir(out_dir)), flush=True)


def errors_job(directory: str) -> None:
    """Under mpirun (2 ranks): every case of ERROR_CASES must fail with DeclarationError on every rank, leaving
    no file; then local mistakes must fail at write() on the rank that made them."""
    from mpi4py import MPI

    import ckptio

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    block = np.zeros((1, 3, 5))
    for k, case in enumerate(ERROR_CASES):
        path = os.path.join(directory, f"chk_{k}")
        ck = ckptio.create(path, comm, backend=sys.argv[3])
        dims: tuple[str, ...] | None = ("block", "y", "x")
        attrs = {"units": "K"}
        if case == "dims differ" and rank == 1:
            dims = ("block", "z", "x")
        if case == "attrs differ" and rank == 1:
            attrs = {"units": "C"}
        if case == "dims only on one rank" and rank == 1:
            dims, attrs = None, {}
        if case == "default dimension named like a variable":
            dims, attrs = None, {}
        ck.write("dens", block, offset=(rank, 0, 0), global_shape=(2, 3, 5), dims=dims, attrs=attrs)
        if case == "one dimension two lengths":
            ck.write("pres", np.zeros((1, 4)), offset=(rank, 0), global_shape=(2, 4), dims=("block", "y"))
        if case == "dimension named like a variable":
            ck.write("y", np.zeros((1, 4)), offset=(rank, 0), global_shape=(2, 4))
        if case == "default dimension named like a variable":  # dens got dens_d0, dens_d1, dens_d2
            ck.write("dens_d1", np.zeros((1, 4)), offset=(rank, 0), global_shape=(2, 4))
        tag = case.replace(" ", "_")
        try:
            ck.close()
            print(f"CASE {tag} {rank} NOERROR", flush=True)
        except ckptio.DeclarationError as exc:
            ok = ERROR_CASES[case] in str(exc) and not os.listdir(directory)
            print(f"CASE {tag} {rank} {'OK' if ok else 'BAD'} {str(exc)!r}", flush=True)
    local = {"too_few_dims": dict(dims=("block", "y")), "bare_string": dict(dims="block"),
             "bad_name": dict(dims=("block", "y z", "x")), "repeated_dim": dict(dims=("b", "b", "x")),
             "reserved_attr": dict(attrs={"DIMENSION_LIST": 1}), "underscore_attr": dict(attrs={"_FillValue": 0.0}),
             "bad_value": dict(attrs={"units": object()}), "not_a_mapping": dict(attrs=[("units", "K")]),
             "differs_from_earlier_block": dict(dims=("a", "b", "c"))}
    for case, kw in local.items():
        ck = ckptio.create(os.path.join(directory, "chk_local"), comm, backend=sys.argv[3])
        ck.write("dens", block, offset=(rank, 0, 0), global_shape=(2, 3, 5), dims=("block", "y", "x"))
        try:
            if rank == 1:
                ck.write("dens", block, offset=(1 - rank, 0, 0), global_shape=(2, 3, 5), **kw)
            print(f"LOCAL {case} {rank} {'NOERROR' if rank == 1 else 'OK'}", flush=True)
        except ckptio.DeclarationError as exc:
            print(f"LOCAL {case} {rank} {'OK' if 'rank 1' in str(exc) and 'dens' in str(exc) else 'BAD'} {str(exc)!r}",
                  flush=True)
        try:
            ck.close()  # the local error is raised on every rank
            print(f"LOCALCLOSE {case} {rank} NOERROR", flush=True)
        except ckptio.DeclarationError:
            print(f"LOCALCLOSE {case} {rank} OK", flush=True)


# --------------------------------------------------------------------------------------------- helpers
def _serial(code: str, cwd: Path) -> str:
    """Python code in a plain subprocess (no mpirun; MPI, if used, is a singleton)."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=mpi_env(), capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """case -> (checkpoint path, the job's stdout), all written by one 2-rank job per case."""
    out = {}
    for case in CASES:
        directory = tmp_path_factory.mktemp(case)
        path = directory / "chk_000007"
        proc = run_mpi(2, [str(HERE), "write", case, str(path), str(directory / "stage")], timeout=240)
        out[case] = (path, proc.stdout)
    return out


EXPECTED_VARS = {
    "dens": [["block", "y", "x"], DENS_ATTRS],
    "pres": [["block", "y", "x"], PRES_ATTRS],
    "x": [["x"], X_ATTRS],
    "tracer": [["particle"], {"units": "cm"}],
    "plain": [["plain_d0"], {}],
}


# -------------------------------------------------------------------------------------------------- tests
@pytest.mark.mpi
@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", CASES)
def test_reader_reports_declared_dims_and_attrs(written, case: str) -> None:
    _, stdout = written[case]
    lines = [line.split(" ", 2) for line in stdout.splitlines() if line.startswith("VARS ")]
    assert sorted(int(rank) for _, rank, _ in lines) == [0, 1]
    for _, _, got in lines:
        assert json.loads(got) == EXPECTED_VARS


@pytest.mark.mpi
@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["hdf5", "pnetcdf"])
def test_xarray_sees_shared_dimensions_and_attributes(written, backend: str) -> None:
    pytest.importorskip("xarray")
    pytest.importorskip("netCDF4")
    path, _ = written[backend]
    out = _serial(f"""
import json, numpy as np, xarray as xr
with xr.open_dataset({str(path)!r}, engine="netcdf4") as ds:
    total = ds.dens + ds.pres
    print(json.dumps({{"sizes": dict(ds.sizes), "total_dims": list(total.dims), "total": total.values.tolist(),
                      "dens_attrs": {{k: getattr(v, "tolist", lambda v=v: v)() for k, v in ds.dens.attrs.items()}},
                      "pres_attrs": dict(ds.pres.attrs), "coords": list(ds.coords), "x": ds.x.values.tolist(),
                      "tracer_dims": list(ds.tracer.dims), "attrs": {{k: int(v) for k, v in ds.attrs.items()
                                                                      if k == "step"}}}}))
""", path.parent)
    got = json.loads(out)
    want_total = np.concatenate([dens(i) + pres(i) for i in range(NB)])
    assert got["total_dims"] == ["block", "y", "x"]
    np.testing.assert_array_equal(np.array(got["total"]), want_total)
    assert {k: got["sizes"][k] for k in ("block", "y", "x", "particle")} == {"block": NB, "y": 3, "x": 5,
                                                                          "particle": 5}
    assert got["dens_attrs"]["units"] == "g/cm**3" and got["dens_attrs"]["long_name"] == "density"
    assert got["dens_attrs"]["scale"] == [1.5, 2.0]
    assert got["pres_attrs"] == PRES_ATTRS
    assert got["coords"] == ["x"] and got["x"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert got["tracer_dims"] == ["particle"]
    assert got["attrs"] == {"step": 7}


@pytest.mark.mpi
@pytest.mark.timeout(600)
def test_hdf5_dimension_scales_are_shared_and_need_no_h5py_to_read(written) -> None:
    path, _ = written["hdf5"]
    out = _serial(f"""
import h5py
with h5py.File({str(path)!r}, "r") as f:
    d, p = f["dens"], f["pres"]
    print(all(d.dims[i][0] == p.dims[i][0] for i in range(3)), d.dims[2][0] == f["x"], f["x"].is_scale,
          sorted(k for k in f if isinstance(f[k], h5py.Dataset)), sorted(d.attrs), len(f["plain"].dims[0]))
""", path.parent)
    assert out.split() == ["True", "True", "True", "['block',", "'dens',", "'particle',", "'plain',", "'pres',",
                           "'tracer',", "'x',", "'y']", "['DIMENSION_LIST',", "'long_name',", "'ok',", "'scale',",
                           "'units']", "0"]
    lite = _serial(f"""
import sys; sys.modules["h5py"] = None
from ckptio.backends import get_backend
meta = get_backend("hdf5").read_document({str(path)!r})
print(meta["variables"]["dens"]["dims"], meta["variables"]["dens"]["attrs"]["units"])
""", path.parent)
    assert lite.split() == ["['block',", "'y',", "'x']", "g/cm**3"]


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["mpiio", "hdf5", "pnetcdf"])
def test_declarations_that_differ_fail_on_every_rank(tmp_path: Path, backend: str) -> None:
    out = run_mpi(2, [str(HERE), "errors", str(tmp_path), backend], timeout=240).stdout
    results: dict[tuple[str, str], set[str]] = {}
    for line in out.splitlines():
        kind, case, rank, verdict = (line.split(" ", 4) + [""] * 4)[:4]
        if kind in ("CASE", "LOCAL", "LOCALCLOSE"):
            results.setdefault((kind, case), set()).add(f"{rank}:{verdict}")
    for case in ERROR_CASES:
        assert results[("CASE", case.replace(" ", "_"))] == {"0:OK", "1:OK"}, out
    for kind in ("LOCAL", "LOCALCLOSE"):
        cases = [c for k, c in results if k == kind]
        assert len(cases) == 9, out
        for case in cases:
            assert results[(kind, case)] == {"0:OK", "1:OK"}, (case, out)


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_hdf5_refuses_a_dimension_scale_beyond_its_attribute_limit(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = run_mpi(2, [str(HERE), "crowded", str(out_dir)], timeout=240).stdout.split("\n")
    assert sorted(line for line in out if line) == ["LEFT []", "LEFT []", "REFUSED", "REFUSED"], out


def test_ranks_agree_on_descriptions_as_stored() -> None:
    """The declare phase compares what every rank would store: a NaN equals a NaN, 1, 1.0 and True differ;
    each rank sends each distinct description once."""
    from ckptio.model import varmeta

    with_nan = varmeta.declare("a", 1, ("n",), {"fill": float("nan")}, 0)
    packed = varmeta.pack({"a": with_nan, "b": with_nan, "c": {}})
    assert sorted(map(len, packed)) == [2, len('{"attrs": {"fill": NaN}, "dims": ["n"]}')]
    agreed = varmeta.agree([packed, varmeta.pack({"a": varmeta.declare("a", 1, ("n",), {"fill": np.nan}, 1)})])
    assert agreed["b"]["dims"] == ["n"] and np.isnan(agreed["b"]["attrs"]["fill"]) and agreed["c"] == {}
    for one, other in ((1, 1.0), (1, True), (0.0, -0.0), ([1], [1.0])):
        with pytest.raises(ckptio_declaration_error(), match="variable 'a': rank 0 declared"):
            varmeta.agree([varmeta.pack({"a": varmeta.declare("a", 0, None, {"k": one}, 0)}),
                           varmeta.pack({"a": varmeta.declare("a", 0, None, {"k": other}, 1)})])


def ckptio_declaration_error() -> type:
    from ckptio import DeclarationError

    return DeclarationError


def _doc() -> dict:
    return {"schema": 1, "backend": "mpiio", "nprocs": 1, "checksum": "xxh3_64", "attrs": {},
            "variables": {"a": {"dtype": "<f8", "shape": [2, 3], "kind": "array", "dims": ["n", "m"],
                                "attrs": {"units": "K"},
                                "blocks": [{"rank": 0, "offset": [0, 0], "shape": [2, 3], "checksum": "0" * 16}]},
                          "b": {"dtype": "<f8", "shape": [3], "kind": "array", "dims": ["m"],
                                "blocks": [{"rank": 0, "offset": [0], "shape": [3], "checksum": "0" * 16}]}}}


@pytest.mark.parametrize("change, message", [
    (lambda d: d["variables"]["a"].update(dims=["n"]), "name 1 axes, but the variable has 2"),
    (lambda d: d["variables"]["a"].update(dims="nm"), "must be a sequence"),
    (lambda d: d["variables"]["a"].update(dims=["n", "n"]), "twice"),
    (lambda d: d["variables"]["a"].update(dims=["n", "bad name"]), "dimension name 'bad name'"),
    (lambda d: d["variables"]["b"].update(dims=["n"]), "dimension 'n' has length 2 in variable 'a' but 3"),
    (lambda d: d["variables"]["a"].update(attrs=[1]), "attrs is list"),
    (lambda d: d["variables"]["a"].update(attrs={"NAME": "x"}), "reserved"),
    (lambda d: d["variables"]["a"].update(attrs={"k": {"nested": 1}}), "not JSON-compatible"),
])
def test_metadata_validation_checks_dims_and_attrs(change, message: str) -> None:
    from ckptio.model import meta

    meta.validate(_doc())
    plain = copy.deepcopy(_doc())
    for var in plain["variables"].values():
        var.pop("dims"), var.pop("attrs", None)
    meta.validate(plain)  # documents without the optional fields (older checkpoints) stay valid
    doc = _doc()
    change(doc)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        meta.validate(doc)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write_job(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "errors":
        errors_job(sys.argv[2])
    elif sys.argv[1] == "crowded":
        crowded_job(sys.argv[2])


def test_the_dimension_check_without_declared_dims_agrees_with_listing_every_dimension():
    """A document's check of shared dimension lengths skips listing the default names when no variable declares
    dims (default names never meet: ``<name>_d<axis>`` reads back as one name and axis). Random documents with
    tricky names (a variable called ``a_d0``, declared names that are other variables' defaults) fail the check
    exactly when listing every dimension does."""
    import random

    from ckptio.errors import DeclarationError
    from ckptio.model.dims_attrs import check_shared_dim_lengths, shared_dim_lengths

    rng = random.Random(7)
    names = ["a", "a_d0", "a_d1", "b", "a_d0_d0", "b_d10", "b_d1"]
    for _ in range(3000):
        variables = {}
        for name in rng.sample(names, rng.randint(1, len(names))):
            shape = [rng.randint(1, 3) for _ in range(rng.randint(0, 2))]
            entry = {"shape": shape}
            if shape and rng.random() < 0.3:
                entry["dims"] = rng.sample([*names, *(f"{n}_d{i}" for n in names for i in range(2)), "x"], len(shape))
            variables[name] = entry

        def fails(check, variables=variables) -> bool:
            try:
                check(variables)
            except DeclarationError:
                return True
            return False

        assert fails(check_shared_dim_lengths) == fails(shared_dim_lengths), variables
