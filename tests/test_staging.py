"""Staged checkpoints on one node (issue 11 items 3 and 4, issue 14 item 3): copies named by their final
path, retention of staged copies as each checkpoint commits, a stage that cannot be used fails on every rank."""

from __future__ import annotations

import pytest
from mpi_helpers import run_script

TWO_RUNS = """
import os, sys, shutil, numpy as np, ckptio
from mpi4py import MPI
from ckptio import staging
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
base, stage = sys.argv[1], sys.argv[2]
runs = {name: ckptio.Series(os.path.join(base, name), comm, keep=2, stage_dir=stage) for name in ("A", "B")}
for step in range(1, 7):                     # interleaved: both runs write the same names into one stage
    for name, series in runs.items():
        with series.create(step, attrs={"run": name}) as ck:
            ck.write("x", np.full(4, step + (100 if name == "B" else 0) + 1000 * r, np.int64),
                     offset=(4 * r,), global_shape=(4 * n,))
for series in runs.values():
    series.wait()
# each run has its own key directory, holding only its newest drained checkpoint (retention at each commit)
keys = {name: staging.key_dir(stage, series.path(1)) for name, series in runs.items()}
assert keys["A"] != keys["B"] and sorted(os.listdir(stage)) == sorted(os.path.basename(k) for k in keys.values())
for key in keys.values():
    assert os.listdir(key) == ["chk_000006"], os.listdir(key)
    assert len(os.listdir(os.path.join(key, "chk_000006"))) == 1
# A's final copy of step 6 is lost: A recovers its own staged copy, never B's
a6 = runs["A"].path(6)
if r == 0:
    os.unlink(a6)
comm.Barrier()
assert runs["A"].latest() == a6
with ckptio.open(a6, comm) as ck:
    assert ck.attrs["run"] == "A" and (ck.read("x", offset=(4 * r,), shape=(4,)) == 6 + 1000 * r).all()
# a staged copy moved under A's name (B's pieces) is refused: its manifest names B's final path
if r == 0:
    os.unlink(a6)
    shutil.rmtree(os.path.join(keys["A"], "chk_000006"))
    shutil.copytree(os.path.join(keys["B"], "chk_000006"), os.path.join(keys["A"], "chk_000006"))
comm.Barrier()
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    found = runs["A"].latest()
assert found == runs["A"].path(5), found
if r == 0:
    assert any("belongs to" in str(w.message) and "/B/chk_000006" in str(w.message) for w in caught), caught
print("OK", r, flush=True)
"""

BAD_STAGE = """
import os, sys, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r = comm.Get_rank()
out, stage = sys.argv[1], sys.argv[2]
try:
    with ckptio.create(os.path.join(out, "chk_000001"), comm, stage_dir=stage) as ck:
        ck.write("x", np.zeros(3), offset=(3 * r,), global_shape=(3 * comm.Get_size(),))
    print("NOERROR", r, flush=True)
except ckptio.CheckpointIOError as exc:
    assert stage in str(exc), exc
    assert not os.path.exists(os.path.join(out, "chk_000001"))
    print("OK", r, flush=True)
series = ckptio.Series(os.path.join(out, "series"), comm, stage_dir=stage)  # the stage is checked at close
try:
    with series.create(1) as ck:
        ck.write("x", np.zeros(3), offset=(3 * r,), global_shape=(3 * comm.Get_size(),))
    print("NOERROR", r, flush=True)
except ckptio.CheckpointIOError as exc:
    assert stage in str(exc), exc
    print("OK", r, flush=True)
"""


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_runs_sharing_a_stage_keep_their_own_copies_and_retention_runs_at_commit(tmp_path):
    proc = run_script(2, TWO_RUNS, tmp_path, str(tmp_path / "runs"), str(tmp_path / "stage"))
    assert proc.stdout.count("OK") == 2, proc.stdout


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("nprocs", [1, 2])
def test_stage_that_is_a_file_fails_on_every_rank(nprocs, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "stage").write_text("not a directory")
    proc = run_script(nprocs, BAD_STAGE, tmp_path, str(tmp_path / "out"), str(tmp_path / "stage"))
    assert proc.stdout.count("OK") == 2 * nprocs, proc.stdout


def test_stage_kind_decision_names_the_node_that_cannot_see():
    """ckptio.staging._decide (rank 0's part of locate): views are (host, node leader, probes seen) per rank."""
    from ckptio import staging
    from ckptio.errors import CheckpointIOError

    shared = [("a", 0, [0, 2]), ("a", 0, [0, 2]), ("b", 2, [0, 2])]
    local = [("a", 0, [0]), ("a", 0, [0]), ("b", 2, [2])]
    assert staging._decide("/s", shared) is True
    assert staging._decide("/s", local) is False
    assert staging._decide("/s", [("a", 0, [0])]) is True  # one node: shared and node-local alike
    blind = [("a", 0, [0]), ("a", 0, [0]), ("b", 2, [0])]  # node b sees node a's stage, not its own
    with pytest.raises(CheckpointIOError, match=r"node b \(ranks 2\) cannot see its own node's probe file in /s"):
        staging._decide("/s", blind)
    partial = [("a", 0, [0, 1]), ("b", 1, [0, 1]), ("c", 2, [2])]  # a and b share a stage, c has its own
    with pytest.raises(CheckpointIOError, match=r"node c \(ranks 2\) sees the stage of no other node out of a, b"):
        staging._decide("/s", partial)


def test_staged_copies_are_keyed_by_the_final_directory(tmp_path):
    from ckptio import staging

    a, b = staging.key_dir("/st", "/runs/A/chk_1"), staging.key_dir("/st", "/other/A/chk_1")
    assert a != b and a.startswith("/st/A-") and b.startswith("/st/A-")
    assert staging.key_dir("/st", "/runs/A/chk_2") == a
    assert staging.checkpoint_dir("/st", "/runs/A/chk_1", "t").startswith(a + "/chk_1/")


ONE_RANK_FAILS = """
import os, sys, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
out, stage = sys.argv[1], sys.argv[2]
try:                                           # a bad declaration on the last rank only
    with ckptio.create(os.path.join(out, "chk_000001"), comm, stage_dir=stage) as ck:
        ck.write("x", np.zeros(3), offset=(3 * r + (1 if r == n - 1 else 0),), global_shape=(3 * n,))
except ckptio.CheckpointError as exc:
    assert "x" in str(exc), exc
    print("DECL", r, flush=True)
try:                                           # an exception inside the with-block on rank 0 only
    with ckptio.create(os.path.join(out, "chk_000002"), comm, stage_dir=stage) as ck:
        ck.write("x", np.zeros(3), offset=(3 * r,), global_shape=(3 * n,))
        if r == 0:
            raise RuntimeError("simulation failed")
except RuntimeError:
    print("RAISED", r, flush=True)
except ckptio.CheckpointError as exc:
    print("OTHERS", r, flush=True)
assert not os.listdir(out), os.listdir(out)
staged = [f for _, _, files in os.walk(stage) for f in files if f.endswith(".json")]
assert not staged, staged
print("OK", r, flush=True)
"""


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_staged_close_with_one_failing_rank_raises_everywhere_and_stages_nothing(tmp_path):
    (tmp_path / "out").mkdir()
    proc = run_script(3, ONE_RANK_FAILS, tmp_path, str(tmp_path / "out"), str(tmp_path / "stage"))
    assert proc.stdout.count("DECL") == 3 and proc.stdout.count("OK") == 3, proc.stdout
    assert proc.stdout.count("RAISED") == 1 and proc.stdout.count("OTHERS") == 2, proc.stdout


CORRUPT_PIECE = """
import os, sys, warnings, numpy as np, ckptio
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
out, stage = sys.argv[1], sys.argv[2]
path = os.path.join(out, "chk_000001")
ck = ckptio.create(path, comm, stage_dir=stage, attrs={"step": 1})
ck.write("x", np.arange(6, dtype=np.float32) + 10 * r, offset=(6 * r,), global_shape=(6 * n,))
ck.close()
ck.wait()
with ckptio.open(path, comm, stage_dir=stage) as rd:   # every piece fine: read from the stage
    assert rd.source == "stage" and rd.attrs == {"step": 1}
    assert (rd.read("x") == np.concatenate([np.arange(6, dtype=np.float32) + 10 * q for q in range(n)])).all()
if r == n - 1:                                          # one flipped byte in the last rank's piece
    data = [os.path.join(d, f) for d, _, fs in os.walk(stage) for f in fs if f.startswith(f"rank-{r:06d}")
            and f.endswith(".data")][0]
    with open(data, "r+b") as f:
        f.seek(5)
        b = f.read(1)
        f.seek(5)
        f.write(bytes([b[0] ^ 0xFF]))
comm.Barrier()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    rd = ckptio.open(path, comm, stage_dir=stage)
assert isinstance(rd, ckptio.Reader), type(rd)
if r == 0:
    assert any(f"rank {n - 1}" in str(w.message) and "checksum" in str(w.message) for w in caught), caught
assert (rd.read("x", offset=(6 * r,), shape=(6,)) == np.arange(6, dtype=np.float32) + 10 * r).all()
rd.close()
print("OK", r, flush=True)
"""


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("nprocs", [1, 3])
def test_restart_reads_the_stage_and_falls_back_on_a_corrupt_piece(nprocs, tmp_path):
    (tmp_path / "out").mkdir()
    proc = run_script(nprocs, CORRUPT_PIECE, tmp_path, str(tmp_path / "out"), str(tmp_path / "stage"))
    assert proc.stdout.count("OK") == nprocs, proc.stdout


STAGED_READER_AS_READER = """
import sys, numpy as np, ckptio
from mpi4py import MPI
from ckptio.errors import CollectiveError, ReadRequestError
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
path, stage = sys.argv[1], sys.argv[2]
rows = np.arange((r + 1) * 4, dtype=np.float64).reshape(r + 1, 4) + 100 * r  # an N-d per-rank segment
with ckptio.create(path, comm, stage_dir=stage) as w:
    w.write("tracers", rows)
w.wait()
every = np.concatenate([np.arange((q + 1) * 4, dtype=np.float64).reshape(q + 1, 4) + 100 * q for q in range(n)])
with ckptio.open(path, comm, stage_dir=stage) as ck:
    assert type(ck).__name__ == "StagedReader"
    # out= on one rank only (a strided view), the others allocate
    halo = np.zeros((r + 3, 6))
    got = ck.read("tracers", out=halo[1:-1, 1:-1] if r == 0 else None)
    assert (got == rows).all() and (r != 0 or (halo[1:-1, 1:-1] == rows).all())
    assert (ck["tracers"][1:3] == every[1:3]).all() and "StagedReader" in repr(ck)
    # a bad request on one rank: ReadRequestError on every rank, nothing hangs
    try:
        ck.read("tracers", offset=(0,) if r == n - 1 else (0, 0), shape=None if r == n - 1 else (1, 4))
        raise AssertionError("no error")
    except ReadRequestError as exc:
        assert isinstance(exc, CollectiveError) and f"rank {n - 1}" in str(exc) and "2 dimension(s)" in str(exc)
# rank 0 leaves the with block with its own exception while the others read: they raise, naming it
try:
    with ckptio.open(path, comm, stage_dir=stage) as ck:
        if r == 0:
            raise ValueError("rank 0 bails out")
        ck.read("tracers")
        raise AssertionError("read went on")
except ValueError as exc:
    assert r == 0 and "bails out" in str(exc)
except CollectiveError as exc:
    assert r != 0 and "rank 0: ValueError: rank 0 bails out" in str(exc), exc
print("STAGED READER OK", r, flush=True)
"""


@pytest.mark.parametrize("nprocs", [2, 3])
def test_staged_reader_reads_like_a_reader_and_never_hangs_when_a_rank_leaves(nprocs, tmp_path):
    """The staged restart reader (outside trial o1): out= (strided, on one rank only), lazy slicing, repr, a bad
    request on one rank as ReadRequestError everywhere, and a rank leaving its with block meets the others in
    their read (they hung before)."""
    proc = run_script(nprocs, STAGED_READER_AS_READER, tmp_path, str(tmp_path / "chk_000001"),
                      str(tmp_path / "stage"), timeout=240)
    assert proc.stdout.count("STAGED READER OK") == nprocs, proc.stdout + proc.stderr
