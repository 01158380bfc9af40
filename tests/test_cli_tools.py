"""`ckptio ls`, `diff`, `dump`, `convert`, `inspect A B --verify` (min/max), `--version`, `python -m ckptio`:
serial commands run as one process without mpirun; the checkpoints they read are written under mpirun at 2 and 3
ranks with different backends."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import PROGRAMS, mpi_env, run_mpi

CKPTIO = str(Path(sys.executable).parent / "ckptio")
# The programs that write the checkpoints (see "tools" and "particles" there for their contents)
PROGRAM = str(PROGRAMS / "cli.py")


DENS = np.arange(12 * 5 * 3, dtype=np.float64).reshape(12, 5, 3) * 0.5


def ckptio(*args: str, module: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ckptio"] if module else [CKPTIO]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, env=mpi_env(), timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict[str, Path]:
    """a: mpiio on 2 ranks; b: hdf5 on 3; c: pnetcdf on 3; mod: a with one element changed; attr: another time
    attribute and an extra variable (one process, no mpirun)."""
    d = tmp_path_factory.mktemp("cli_tools")
    paths = {"a": d / "a.ck", "b": d / "b.h5", "c": d / "c.nc", "mod": d / "mod.ck", "attr": d / "attr.ck"}
    run_mpi(2, [PROGRAM, "tools", str(paths["a"]), "mpiio", "0", "0.5"])
    run_mpi(3, [PROGRAM, "tools", str(paths["b"]), "hdf5", "0", "0.5"])
    run_mpi(3, [PROGRAM, "tools", str(paths["c"]), "pnetcdf", "0", "0.5"])
    run_mpi(2, [PROGRAM, "tools", str(paths["mod"]), "mpiio", "1", "0.5"])
    subprocess.run([sys.executable, PROGRAM, "tools", str(paths["attr"]), "mpiio", "0", "0.75", "extra"], check=True,
                   env=mpi_env(), timeout=120, capture_output=True)
    (d / "junk").write_text("not a checkpoint\n")
    return {**paths, "dir": d, "junk": d / "junk"}


# ----------------------------------------------------------------------------------------------------- diff
@pytest.mark.mpi
def test_diff_identical_across_formats_and_rank_counts(run):
    for x, y in (("a", "b"), ("a", "c"), ("c", "b")):
        proc = ckptio("diff", str(run[x]), str(run[y]))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.startswith("identical: 3 variables")
        assert proc.stderr == ""  # not a terminal: no progress bar


@pytest.mark.mpi
def test_diff_finds_one_changed_element_and_honours_tolerances(run):
    proc = ckptio("diff", str(run["b"]), str(run["mod"]))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(s for s in proc.stdout.splitlines() if s.strip().startswith("dens:"))
    assert "1 of 180 elements differ" in line and "first at (5, 2, 1)" in line, line
    assert "max abs diff 0.001" in line, line
    assert "1 of 3 common variables differ" in proc.stdout
    doc = json.loads(ckptio("diff", str(run["mod"]), str(run["c"]), "--json").stdout)
    (d,) = doc["differences"]
    assert d["variable"] == "dens" and d["count"] == 1 and d["first_index"] == [5, 2, 1]
    assert d["max_abs_diff"] == pytest.approx(1e-3, rel=1e-6)
    assert d["max_rel_diff"] == pytest.approx(1e-3 / DENS[5, 2, 1], rel=1e-6)
    assert ckptio("diff", str(run["a"]), str(run["mod"]), "--atol", "0.01").returncode == 0
    assert ckptio("diff", str(run["a"]), str(run["mod"]), "--rtol", "1e-4").returncode == 0  # 1e-3/38.5 < 1e-4
    assert ckptio("diff", str(run["a"]), str(run["mod"]), "--rtol", "1e-6").returncode == 1


@pytest.mark.mpi
def test_diff_compares_attributes_and_variable_sets(run):
    proc = ckptio("diff", str(run["a"]), str(run["attr"]))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "attributes: time: 0.5 vs 0.75" in proc.stdout
    assert "only in B: extra" in proc.stdout
    doc = json.loads(ckptio("diff", str(run["attr"]), str(run["b"]), "--json").stdout)
    assert doc["only_in_a"] == ["extra"] and doc["differences"] == [] and not doc["identical"]


@pytest.mark.mpi
@pytest.mark.parametrize("which, message", [("missing", "no such file"), ("junk", "not a ckptio checkpoint"),
                                            ("dir", "is a directory")])
def test_diff_bad_input_is_exit_2(run, which, message):
    path = str(run["dir"] / "nope") if which == "missing" else str(run[which])
    proc = ckptio("diff", str(run["a"]), path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and proc.stderr.startswith("ckptio diff: error:"), proc.stderr
    assert ckptio("diff", str(run["a"]), str(run["b"]), "--rtol", "-1").returncode == 2


@pytest.mark.mpi
def test_diff_of_a_damaged_checkpoint_is_an_error_not_a_difference(run, tmp_path):
    bad = tmp_path / "bad.ck"
    shutil.copy(run["a"], bad)
    os.truncate(bad, bad.stat().st_size // 2)
    proc = ckptio("diff", str(run["a"]), str(bad))
    assert proc.returncode == 2 and str(bad) in proc.stderr, proc.stdout + proc.stderr


# ----------------------------------------------------------------------------------------------------- dump
@pytest.mark.mpi
@pytest.mark.parametrize("which", ["a", "b", "c"])
def test_dump_slices_like_numpy(run, which):
    for text, expected in (("3:5,:,0", DENS[3:5, :, 0]), ("-1,::-2,1", DENS[-1, ::-2, 1]), ("7", DENS[7]),
                           ("2:9:3,4,-3:", DENS[2:9:3, 4, -3:]), ("5:2", DENS[5:2])):
        proc = ckptio("dump", str(run[which]), "dens", f"--slice={text}", "--json")
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert np.array_equal(np.array(doc["data"]).reshape(expected.shape), expected), text
    proc = ckptio("dump", str(run[which]), "dens", "--slice", "3:5,:,0")
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[0] == ("dens[3:5,:,0]  dtype float64  shape (2, 5) (of (12, 5, 3))  "
                                           "dims (dens_d0, dens_d1, dens_d2)")  # the default names
    assert np.array2string(DENS[3:5, :, 0], separator=", ") in proc.stdout
    assert json.loads(ckptio("dump", str(run[which]), "ids", "--json").stdout)["data"] == list(range(40))
    assert ckptio("dump", str(run[which]), "scal").stdout.splitlines()[1] == "3.5"


@pytest.mark.mpi
@pytest.mark.parametrize("args, message", [
    (("VAR", "nope"), "variable 'nope' is not in"),
    (("VAR", "dens", "--slice", "1,2,3,4"), "has 4 indices but the variable has 3 dimension(s)"),
    (("VAR", "dens", "--slice", "a:b"), "'a:b' on axis 0 is not an index"),
    (("VAR", "dens", "--slice", "12"), "index 12 is out of range for axis 0 of size 12"),
    (("VAR", "dens", "--slice", "::0"), "step 0 on axis 0"),
    (("MISSING", "dens"), "no such file"),
    (("JUNK", "dens"), "not a ckptio checkpoint"),
])
def test_dump_bad_input_is_exit_2_with_a_clear_message(run, args, message):
    path = {"VAR": str(run["a"]), "MISSING": str(run["dir"] / "missing"), "JUNK": str(run["junk"])}[args[0]]
    proc = ckptio("dump", path, *args[1:])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""


# -------------------------------------------------------------------------------------------------- convert
@pytest.mark.mpi
def test_convert_round_trip_through_every_format(run, tmp_path):
    chain = [(run["a"], "hdf5", tmp_path / "x.h5"), (tmp_path / "x.h5", "pnetcdf", tmp_path / "x.nc"),
             (tmp_path / "x.nc", "mpiio", tmp_path / "x.ck"), (run["b"], "mpiio", tmp_path / "y.ck")]
    for src, backend, dst in chain:
        proc = ckptio("convert", str(src), str(dst), "--backend", backend)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "every checksum checked" in proc.stdout
        proc = ckptio("inspect", str(dst), "--verify", "--json")
        assert proc.returncode == 0, proc.stdout
        doc = json.loads(proc.stdout)
        assert doc["format"] == backend and doc["attrs"] == {"time": 0.5, "units": "cgs"}
        src_doc = json.loads(ckptio("inspect", str(src), "--json").stdout)
        assert doc["variables"]["dens"]["nblocks"] == src_doc["variables"]["dens"]["nblocks"]  # decomposition kept
        assert ckptio("diff", str(src), str(dst)).returncode == 0
    assert ckptio("diff", str(run["a"]), str(tmp_path / "x.ck")).returncode == 0
    assert not [p for p in os.listdir(tmp_path) if "ckptio" in p]  # no spool or temporary left behind


@pytest.mark.mpi
def test_convert_refuses_bad_inputs_and_never_overwrites_other_files(run, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    cases = [((str(run["a"]), str(notes), "--backend", "mpiio"), "exists (use --force"),
             ((str(run["a"]), str(notes), "--backend", "mpiio", "--force"), "is not a complete ckptio checkpoint"),
             ((str(run["a"]), str(tmp_path / "o"), "--backend", "netcdf4"), "unknown backend 'netcdf4'"),
             ((str(tmp_path / "missing"), str(tmp_path / "o"), "--backend", "mpiio"), "no such file"),
             ((str(run["junk"]), str(tmp_path / "o"), "--backend", "hdf5"), "not a ckptio checkpoint")]
    for args, message in cases:
        proc = ckptio("convert", *args)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
    assert notes.read_text() == "mine" and not (tmp_path / "o").exists()
    out = tmp_path / "o.ck"
    assert ckptio("convert", str(run["b"]), str(out), "--backend", "mpiio").returncode == 0
    proc = ckptio("convert", str(run["mod"]), str(out), "--backend", "mpiio", "--force")
    assert proc.returncode == 0, proc.stderr
    assert ckptio("diff", str(run["mod"]), str(out)).returncode == 0


USER_FILES = """
import sys, numpy as np, h5py, netCDF4
with h5py.File(sys.argv[1], "w") as f:
    f["precious"] = np.arange(10)
with netCDF4.Dataset(sys.argv[2], "w", format="NETCDF3_64BIT_DATA") as f:
    f.createDimension("n", 10)
    f.createVariable("precious", "i8", ("n",))[:] = np.arange(10)
"""


def test_convert_force_never_replaces_an_hdf5_or_netcdf_file_ckptio_did_not_write(run, tmp_path):
    """Outside trial: ``--force`` over a user's plain HDF5 / CDF-5 file (the right signature, no ckptio metadata)
    replaced it with a checkpoint: data loss. Only a complete ckptio checkpoint may be replaced."""
    h5, nc = tmp_path / "user.h5", tmp_path / "user.nc"
    subprocess.run([sys.executable, "-c", USER_FILES, str(h5), str(nc)], check=True, env=mpi_env(), timeout=120)
    before = {p: p.read_bytes() for p in (h5, nc)}
    for dst in (h5, nc):
        for backend in ("mpiio", "hdf5", "pnetcdf"):
            proc = ckptio("convert", str(run["a"]), str(dst), "--backend", backend, "--force")
            assert proc.returncode == 2 and "not a complete ckptio checkpoint" in proc.stderr, (dst, backend,
                                                                                                 proc.stderr)
    assert {p: p.read_bytes() for p in (h5, nc)} == before


# ------------------------------------------------------------------------------------------------------- ls
def _flip_data_byte(path: Path) -> None:
    """Damage one data byte of a native checkpoint (a block of "dens"), leaving its index intact."""
    proc = subprocess.run([sys.executable, "-c", "import sys, json, ckptio.backends as b; m = b.detect_backend("
                           "sys.argv[1]).read_document(sys.argv[1]); print(m['variables']['dens']['blocks'][0]"
                           "['file_offset'])", str(path)], capture_output=True, text=True, env=mpi_env(),
                          timeout=120, check=True)
    offset = int(proc.stdout)
    with open(path, "r+b") as f:
        f.seek(offset + 8)
        byte = f.read(1)
        f.seek(offset + 8)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.mpi
def test_ls_lists_status_and_newest_valid(run, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(run["a"], d / "chk_000010")
    shutil.copy(run["mod"], d / "chk_000020")
    shutil.copy(run["a"], d / "chk_000030")
    _flip_data_byte(d / "chk_000030")
    shutil.copy(run["a"], d / "chk_000040")
    os.truncate(d / "chk_000040", (d / "chk_000040").stat().st_size - 100)
    (d / "chk_000050").write_text("not a checkpoint")
    (d / ".chk_000060.ckptio-tmp-0123456789ab").write_bytes(b"\0" * 64)
    (d / "notes.txt").write_text("notes")
    shutil.copy(run["c"], d / "restart.nc")  # a checkpoint under any name is listed

    proc = ckptio("ls", str(d))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # chk_000040 is damaged
    lines = {line.split()[1] if line.startswith("*") else line.split()[0]: line for line in proc.stdout.splitlines()}
    assert "notes.txt" not in proc.stdout
    assert lines["chk_000030"].startswith("* "), proc.stdout  # without --verify the flipped byte is not seen
    assert "valid" in lines["chk_000010"] and "mpiio" in lines["chk_000010"] and "0.5" in lines["chk_000010"]
    assert "incomplete" in lines["chk_000040"] or "corrupt" in lines["chk_000040"]
    assert "not a ckptio checkpoint" in lines["chk_000050"]
    assert "temporary" in lines[".chk_000060.ckptio-tmp-0123456789ab"]
    assert "pnetcdf" in lines["restart.nc"]

    doc = json.loads(ckptio("ls", str(d), "--verify", "--json").stdout)
    rows = {r["name"]: r for r in doc["files"]}
    assert rows["chk_000030"]["status"] == "corrupt" and "checksum" in rows["chk_000030"]["error"]
    assert rows["chk_000020"]["newest_valid"] and rows["chk_000020"]["status"] == "valid+verified"
    assert [n for n, r in rows.items() if r["newest_valid"]] == ["chk_000020"]  # restart.nc has no step
    assert rows["chk_000010"]["step"] == 10 and rows["chk_000010"]["time"] == 0.5
    assert rows["chk_000010"]["nprocs"] == 2 and rows["chk_000010"]["size"] == run["a"].stat().st_size
    # the mark agrees with ckptio.latest
    latest = subprocess.run([sys.executable, "-c", "import sys, warnings, ckptio; warnings.simplefilter('ignore'); "
                             "print(ckptio.latest(sys.argv[1], verify=True))", str(d)], capture_output=True,
                            text=True, env=mpi_env(), timeout=120, check=True).stdout.strip()
    assert latest == str(d / "chk_000020")


@pytest.mark.mpi
def test_ls_bad_directory_is_exit_2(run):
    for path, message in ((run["dir"] / "nope", "does not exist"), (run["a"], "is not a directory")):
        proc = ckptio("ls", str(path))
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr


# ---------------------------------------------------------------------------------- inspect, version, module
@pytest.mark.mpi
def test_inspect_several_paths_with_min_max(run):
    proc = ckptio("inspect", str(run["a"]), str(run["c"]), "--verify", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    docs = json.loads(proc.stdout)
    assert [d["format"] for d in docs] == ["mpiio", "pnetcdf"]
    for doc in docs:
        assert doc["variables"]["dens"]["min"] == 0.0 and doc["variables"]["dens"]["max"] == DENS.max()
        assert doc["variables"]["ids"]["max"] == 39 and doc["variables"]["scal"]["min"] == 3.5
    text = ckptio("inspect", str(run["b"]), "--verify").stdout
    assert " ".join(text.split("values", 1)[1].split()).startswith("name min max dens 0 89.5 ids 0 39 scal 3.5 3.5")
    assert "values" not in ckptio("inspect", str(run["a"])).stdout  # without --verify: no data read
    proc = ckptio("inspect", str(run["a"]), str(run["junk"]))
    assert proc.returncode == 2 and proc.stdout.count("checkpoint  ") == 2


def test_version_and_python_m():
    from ckptio.model.meta import __version__

    for module in (False, True):
        proc = ckptio("--version", module=module)
        assert proc.returncode == 0 and proc.stdout.strip() == f"ckptio {__version__}", proc
    proc = ckptio("--help", module=True)
    assert proc.returncode == 0
    for word in ("ls", "diff", "dump", "convert", "exit status", "identical"):
        assert word in proc.stdout
    assert ckptio("frobnicate").returncode == 2


@pytest.mark.mpi
def test_progress_bar_only_on_a_terminal(run):
    master, slave = pty.openpty()
    try:
        proc = subprocess.run([CKPTIO, "diff", str(run["a"]), str(run["b"])], stdout=slave, stderr=subprocess.PIPE,
                              env=mpi_env(), timeout=120, stdin=subprocess.DEVNULL)
    finally:
        os.close(slave)
        os.close(master)
    assert proc.returncode == 0
    assert b"diff:" in proc.stderr and b"var" in proc.stderr, proc.stderr  # tqdm's bar


# ------------------------------------------------------------------------------------------- streaming reads
@pytest.mark.mpi
@pytest.mark.parametrize("which", ["a", "b", "c"])
def test_stream_reads_each_byte_once_in_bounded_pieces(run, which):
    """The pieces diff/convert/min-max use: at most `limit` bytes (one row here), covering the variable once,
    each stored byte read once, values as written (one process, no MPI)."""
    from ckptio.model.layout import Box
    from ckptio.tools.commands.stream import Source

    row = 5 * 3 * 8
    with Source(str(run[which])) as src:
        got = np.full(DENS.shape, np.nan)
        for box, arr in src.pieces("dens", limit=row + 7):
            assert arr.nbytes <= row + 7 and arr.shape == box.shape
            sel = box.relative_to(Box((0, 0, 0), DENS.shape))
            assert np.isnan(got[sel]).all()  # nothing yielded twice
            got[sel] = arr
        assert np.array_equal(got, DENS) and src.bytes_read == DENS.nbytes


@pytest.mark.mpi
def test_stream_and_diff_detect_a_damaged_block_split_into_pieces(run, tmp_path):
    from ckptio import CorruptCheckpointError
    from ckptio.tools.commands.stream import Source

    bad = tmp_path / "bad.ck"
    shutil.copy(run["a"], bad)
    _flip_data_byte(bad)
    with Source(str(bad)) as src, pytest.raises(CorruptCheckpointError, match=r"block 0 \(written by rank 0\)"):
        for _ in src.pieces("dens", limit=1):
            pass
    proc = ckptio("diff", str(run["b"]), str(bad))
    assert proc.returncode == 2 and "checksum mismatch" in proc.stderr, proc.stdout + proc.stderr
    proc = ckptio("convert", str(bad), str(tmp_path / "out.h5"), "--backend", "hdf5")
    assert proc.returncode == 1 and "is damaged, nothing written" in proc.stderr, proc.stderr
    assert not (tmp_path / "out.h5").exists() and not [p for p in os.listdir(tmp_path) if "ckptio" in p]


def test_ls_marks_superseded_checkpoints_of_a_series_identity_like_latest(tmp_path):
    """The same with today's Series, which records its identity in the document (not the old attribute): a rerun
    from step 90 after step 100 existed supersedes 100 in `ckptio ls` as in ckptio.latest."""
    latest = subprocess.run([sys.executable, PROGRAM, "rerun_series", str(tmp_path)], capture_output=True, text=True,
                            env=mpi_env(), timeout=120, check=True).stdout.strip()
    assert latest == str(tmp_path / "chk_000095")
    rows = {r["name"]: r for r in json.loads(ckptio("ls", str(tmp_path), "--json").stdout)["files"]}
    assert rows["chk_000100"]["status"] == "superseded" and rows["chk_000100"]["error"] == "by chk_000095"
    assert [n for n, r in rows.items() if r["newest_valid"]] == ["chk_000095"]
    assert all("_identity" not in r for r in rows.values())


def test_ls_marks_superseded_checkpoints_like_latest(tmp_path):
    """A run that restarted from step 90 after step 100 existed wrote chk_000095 later (higher series sequence):
    chk_000100 is superseded and chk_000095 is the newest valid, as ckptio.latest says. One process, no mpirun."""
    (tmp_path / "series.py").write_text("# not a checkpoint\n")  # a file beside them that ls must not list
    latest = subprocess.run([sys.executable, PROGRAM, "rerun_attribute", str(tmp_path)], capture_output=True, text=True,
                            env=mpi_env(), timeout=120, check=True).stdout.strip()
    assert latest == str(tmp_path / "chk_000095")
    proc = ckptio("ls", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)["files"]}
    assert rows["chk_000100"]["status"] == "superseded" and rows["chk_000100"]["error"] == "by chk_000095"
    assert [n for n, r in rows.items() if r["newest_valid"]] == ["chk_000095"]
    assert rows["chk_000090"]["status"] == "valid" and "series.py" not in rows
    text = ckptio("ls", str(tmp_path)).stdout
    assert "superseded (by chk_000095)" in text and "* chk_000095" in text


def test_diff_compares_dimension_names(tmp_path):
    """Issue 23: ``diff`` ignored ``dims``: two checkpoints with the same values under other dimension names (what
    HDF5 and netCDF tools show, and what xarray aligns on) were "identical"."""
    from mpi4py import MPI

    import ckptio as lib

    values = np.arange(12.0).reshape(3, 4)
    for name, dims in (("yx.ck", ("y", "x")), ("yx2.ck", ("y", "x")), ("default.ck", None), ("xy.ck", ("x", "y"))):
        with lib.create(tmp_path / name, MPI.COMM_SELF) as ck:
            ck.write("v", values, offset=(0, 0), global_shape=(3, 4), dims=dims)
    assert ckptio("diff", str(tmp_path / "yx.ck"), str(tmp_path / "yx2.ck")).returncode == 0
    proc = ckptio("diff", str(tmp_path / "yx.ck"), str(tmp_path / "default.ck"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "v: dims ['y', 'x'] in A, ['v_d0', 'v_d1'] in B" in proc.stdout, proc.stdout
    doc = json.loads(ckptio("diff", str(tmp_path / "yx.ck"), str(tmp_path / "xy.ck"), "--json").stdout)
    (d,) = doc["differences"]
    assert not doc["identical"] and d["count"] == 0 and "dims ['y', 'x'] in A, ['x', 'y'] in B" in d["message"]


# ------------------------------------------------------------ particles: diff --key, dims and attrs (issue 27)

@pytest.fixture(scope="module")
def particles(tmp_path_factory) -> dict[str, Path]:
    """a: mpiio on 2 ranks; b: the same particles from hdf5 on 3 ranks (other order); moved: b with particle 5's
    component 1 changed; lost: b without particle 7."""
    d = tmp_path_factory.mktemp("particles")
    paths = {"a": d / "a.ck", "b": d / "b.h5", "moved": d / "moved.ck", "lost": d / "lost.ck"}
    run_mpi(2, [PROGRAM, "particles", str(paths["a"]), "mpiio", "-1", "-1"])
    run_mpi(3, [PROGRAM, "particles", str(paths["b"]), "hdf5", "-1", "-1"])
    run_mpi(3, [PROGRAM, "particles", str(paths["moved"]), "mpiio", "5", "-1"])
    run_mpi(3, [PROGRAM, "particles", str(paths["lost"]), "mpiio", "-1", "7"])
    return paths


@pytest.mark.mpi
def test_diff_key_matches_particles_across_rank_counts(particles):
    a, b = str(particles["a"]), str(particles["b"])
    by_position = ckptio("diff", a, b)
    assert by_position.returncode == 1 and "parts:" in by_position.stdout, by_position.stdout  # reordered
    for key in ("pid", "parts:0"):
        proc = ckptio("diff", a, b, "--key", key)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.startswith("identical (rows of kind, parts, pid matched by --key ") and key in proc.stdout
    doc = json.loads(ckptio("diff", a, b, "--key", "pid", "--json").stdout)
    assert doc["identical"] and doc["key"] == "pid" and doc["keyed"] == ["kind", "parts", "pid"], doc


@pytest.mark.mpi
def test_diff_key_finds_the_changed_and_the_missing_particle(particles):
    a = str(particles["a"])
    doc = json.loads(ckptio("diff", a, str(particles["moved"]), "--key", "pid", "--json").stdout)
    (d,) = doc["differences"]
    assert d["variable"] == "parts" and d["count"] == 1, d
    order_a = [i for r in range(2) for i in range(30) if (7 * i) % 2 == r]  # rank 0's ids, then rank 1's
    assert d["first_index"] == [order_a.index(5), 1], d  # the row of id 5 in A, component 1
    assert "first differing key 5" in " ".join(d["notes"]), d
    proc = ckptio("diff", a, str(particles["lost"]), "--key", "pid")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "pid: 1 key(s) only in A (first 7)" in proc.stdout, proc.stdout
    assert "parts:" not in proc.stdout  # the 29 common particles are the same


@pytest.mark.mpi
@pytest.mark.parametrize("key, message", [("dens", "not a per-rank segment"), ("nosuch", "no variable 'nosuch'"),
                                          ("parts:3", "has shape (30, 3)"), ("parts:x", "NAME:COLUMN"),
                                          ("kind", "the key is not unique in A"),
                                          ("parts:1", None)])
def test_diff_key_that_cannot_be_used_exit_2(particles, key, message):
    proc = ckptio("diff", str(particles["a"]), str(particles["b"]), "--key", key)
    if message is None:  # sin(id) is unique for these ids: usable, and then the rows match
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


@pytest.mark.mpi
def test_inspect_and_dump_show_dimension_names_units_and_attributes(particles):
    for path in (particles["a"], particles["b"]):
        text = ckptio("inspect", str(path))
        assert text.returncode == 0, text.stdout + text.stderr
        assert ("dimensions  x = 12, y = 4, particle = 30, component = 3, 2 variable(s) with the default dimension "
                "names <name>_d0, <name>_d1, ...") in text.stdout, text.stdout
        assert "  dens(x, y)  long_name='density', units='g/cm**3'" in text.stdout, text.stdout
        assert "  parts(particle, component)  units='cm'" in text.stdout, text.stdout
        assert "  pid(" not in text.stdout and "  kind(" not in text.stdout  # nothing declared: the summary only
        doc = json.loads(ckptio("inspect", "--json", str(path)).stdout)
        assert doc["variables"]["dens"]["dims"] == ["x", "y"] and doc["variables"]["dens"]["dims_declared"]
        assert doc["variables"]["dens"]["attrs"] == {"units": "g/cm**3", "long_name": "density"}
        assert doc["variables"]["parts"]["attrs"] == {"units": "cm"} and doc["dimensions"]["particle"] == 30
        assert doc["variables"]["pid"]["dims"] == ["pid_d0"] and not doc["variables"]["pid"]["dims_declared"]
        dump = ckptio("dump", str(path), "dens", "--slice", "0,:2")
        assert dump.returncode == 0, dump.stderr
        assert dump.stdout.splitlines()[:2] == [
            "dens[0,:2]  dtype float64  shape (2,) (of (12, 4))  dims (x, y)",
            "attributes  long_name='density', units='g/cm**3'"], dump.stdout
        got = json.loads(ckptio("dump", str(path), "parts", "--json").stdout)
        assert got["dims"] == ["particle", "component"] and got["attrs"] == {"units": "cm"}
