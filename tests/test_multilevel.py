"""Multi-level checkpoints on emulated nodes (issue 28): node-local checkpoints protected by partner copies or XOR
parity across nodes, drained every k-th to the parallel file system; a restart after a lost node rebuilds the
lost pieces from the other nodes, or falls back to the newest level that survives, saying why."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_helpers import PROGRAMS, run_mpi
from multinode import node_dir, node_local, run_nodes, skip_reason

import ckptio
from ckptio.engine.faults import MARKER

pytestmark = [pytest.mark.mpi, pytest.mark.nodes,
              pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))]

PROGRAM = str(PROGRAMS / "multilevel.py")
LAYOUTS = {"2x2": (2, 2), "3x1": (1, 1, 1), "4x1": (1, 1, 1, 1), "2+1+1": (2, 1, 1)}


def reports(stdout: str) -> list[dict]:
    out = [json.loads(line[5:]) for line in stdout.splitlines() if line.startswith("JSON ")]
    return sorted(out, key=lambda r: r["rank"])


def job(layout, args, root: Path, names=None, env=None) -> list[dict]:
    kw = {"names": names} if names else {}
    proc = run_nodes(layout, [sys.executable, PROGRAM, *map(str, args)], root, timeout=180, env=env, **kw)
    got = reports(proc.stdout)
    assert len(got) == sum(layout) and all(r["ok"] for r in got), proc.stdout + proc.stderr[-3000:]
    return got


def check_levels(got: list[dict], scheme: str, layout) -> None:
    """drain_every=2 over steps 1-3: only step 2 on the parallel file system, only step 3 on the stages, with the
    redundancy the scheme costs (partner: a second copy of every byte; xor: one block of the largest node's
    data per node, 1/(n-1) of it)."""
    leaders = [r["before"] for r in got if r["before"]["leader"]]
    assert len(leaders) == len(layout)
    assert all(b["pfs"] == ["chk_000002"] and b["staged"] == ["chk_000003"] for b in leaders), leaders
    pieces = [b["pieces"] for b in leaders]
    if scheme == "partner":
        assert sum(b["redundancy"] for b in leaders) == sum(pieces) and all(b["parity"] == 0 for b in leaders)
    else:
        n = len(layout)
        block = -(-max(pieces) // (n - 1))
        assert all(b["parity"] == block == b["redundancy"] for b in leaders), (pieces, leaders)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("layout", LAYOUTS, ids=list(LAYOUTS))
@pytest.mark.parametrize("scheme", ["partner", "xor"])
def test_one_wiped_stage_is_rebuilt_and_restarts_from_the_node_level(scheme, layout, tmp_path):
    """Steps 1-3 with drain_every=2; the last rank's node loses its stage; latest() rebuilds its pieces from the
    partner copy / the set's parity (checksums verified), drains step 3 and the data reads back N to N and N-to-M."""
    shape = LAYOUTS[layout]
    out = tmp_path / "out"
    out.mkdir()
    got = job(shape, ["lose", scheme, out, node_local(tmp_path) / "stage", "wipe"], tmp_path)
    check_levels(got, scheme, shape)
    assert all(r["found"] == "chk_000003" for r in got)
    said = got[0]["warned"]
    assert len(said) == 1 and "rebuilt node node" in said[0], said
    assert ("partner copy" if scheme == "partner" else "XOR parity") in said[0], said
    victim = next(r for r in got if r["rank"] == len(got) - 1)["host"]
    lost = next(r for r in got if r["host"] == victim and r["after"]["leader"])
    assert lost["after"]["pieces"] == lost["before"]["pieces"]  # the rebuilt pieces are back on the node
    assert (out / "chk_000003").is_file()


@pytest.mark.timeout(200)
@pytest.mark.parametrize("backend", ["hdf5", "pnetcdf"])
def test_every_backend_as_the_drained_level(backend, tmp_path):
    """The parallel file system level in the hdf5 and pnetcdf formats (the node-local level is ckptio's own
    stage format whatever the backend): 3x1 xor, one wiped stage; step 3 is rebuilt, drained in the backend's
    format and reads back N to N and N-to-M (the program checks the values)."""
    out = tmp_path / "out"
    out.mkdir()
    got = job(LAYOUTS["3x1"], ["lose", "xor", out, node_local(tmp_path) / "stage", "wipe", backend], tmp_path)
    check_levels(got, "xor", LAYOUTS["3x1"])
    assert all(r["found"] == "chk_000003" for r in got)
    said = got[0]["warned"]
    assert len(said) == 1 and "rebuilt node nodeC" in said[0] and "XOR parity" in said[0], said
    for name in ("chk_000002", "chk_000003"):  # drained by the Series, and by the restart's rebuild
        with ckptio.open(out / name) as r:
            assert r.backend.name == backend, (name, r.backend.name)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("layout", ["2x2", "3x1"])
@pytest.mark.parametrize("scheme", ["partner", "xor"])
def test_lost_node_and_damaged_piece_fall_back_to_the_drained_level(scheme, layout, tmp_path):
    """The last node's stage is wiped and one more piece is damaged (xor: another member's data; partner: the
    lost node's partner copy): step 3 cannot be rebuilt; latest() says why and restarts from step 2, the newest
    checkpoint of the parallel file system level."""
    shape = LAYOUTS[layout]
    out = tmp_path / "out"
    out.mkdir()
    got = job(shape, ["lose", scheme, out, node_local(tmp_path) / "stage", "two"], tmp_path)
    assert all(r["found"] == "chk_000002" for r in got)
    said = got[0]["warned"]
    assert len(said) == 1 and "cannot be rebuilt" in said[0] and "falling back" in said[0], said
    if scheme == "xor":
        assert "XOR set 0 lost 2 nodes" in said[0], said
    else:
        assert "partner copy on" in said[0] and "does not match its checksums" in said[0], said
    assert not (out / "chk_000003").exists()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("scheme", ["partner", "xor"])
def test_node_replaced_by_a_new_name_gets_the_lost_pieces(scheme, tmp_path):
    """Job 1 on nodeA (2 ranks), nodeB, nodeC; job 2 on nodeA, nodeB, nodeE: nodeE (an empty stage, a name never
    seen) takes nodeC's ranks; latest() rebuilds nodeC's pieces onto nodeE, restarts from step 3, and the job
    writes step 4 with its redundancy on the new node set, drained at once (create(4, drain=True))."""
    out = tmp_path / "out"
    out.mkdir()
    stage = node_local(tmp_path) / "stage"
    job((2, 1, 1), ["write", scheme, out, stage], tmp_path)
    got = job((2, 1, 1), ["restart", scheme, out, stage, 3], tmp_path, names=("nodeA", "nodeB", "nodeE"))
    assert [r["host"] for r in got] == ["nodeA", "nodeA", "nodeB", "nodeE"]
    said = got[0]["warned"]
    assert len(said) == 1 and "rebuilt node nodeC (ranks 3, now nodeE)" in said[0], said
    assert any(p.name.startswith("rank-000003") for p in (node_dir(tmp_path, "nodeE") / "stage").rglob("*.json"))
    e = next(r for r in got if r["host"] == "nodeE")
    assert e["next"]["staged"] == ["chk_000004"] and e["next"]["redundancy"] > 0, e
    assert sorted(p.name for p in out.glob("chk_*")) == ["chk_000003", "chk_000004"]  # drain=True; keep=2


@pytest.mark.timeout(300)
def test_the_xor_rebuild_needs_the_lost_nodes_size_in_free_space(tmp_path):
    """XOR over nodeA, nodeB, nodeC (one rank each, nodeC's piece ~1.2 MB); the restart runs on nodeA, nodeB and
    nodeE, whose stage is a tmpfs of 1.6x nodeC's piece: the rebuild XORs straight into nodeC's files and the job
    restarts from the node level (with an accumulator of the same size beside them, as before, it needed 2x: the
    rebuild failed on the full stage and the restart fell back to the drained step 2)."""
    out = tmp_path / "out"
    out.mkdir()
    stage = node_local(tmp_path) / "stage"
    scale = {"MULTILEVEL_SCALE": "5000"}  # nodeC: rank 2, 6 x 5000 rows of 5 float64 = 1.2 MB
    job((1, 1, 1), ["write", "xor", out, stage], tmp_path, env=scale)
    piece = sum(p.stat().st_size for p in (node_dir(tmp_path, "nodeC") / "stage").rglob("rank-000002-of-*")
                if "chk_000003" in str(p) and "redundancy" not in str(p))
    assert 1_200_000 <= piece < 1_300_000, piece
    new = node_dir(tmp_path, "nodeE")
    new.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(piece * 1.6) // 1024}k", "tmpfs", str(new)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs for nodeE: {mounted.stderr.strip()}")
    try:
        got = job((1, 1, 1), ["other", "xor", out, stage, 3, 3], tmp_path, names=("nodeA", "nodeB", "nodeE"),
                  env=scale)
    finally:
        subprocess.run(["umount", str(new)], check=False)
    said = got[0]["warned"]
    assert len(said) == 1 and "rebuilt node nodeC (ranks 2, now nodeE)" in said[0], said
    assert all(r["found"] == "chk_000003" for r in got)


@pytest.mark.timeout(300)
def test_more_ranks_on_the_same_nodes_restart_from_the_node_level(tmp_path):
    """Steps 1-3 by 3 ranks (1x3, xor, drain_every=2: step 3 only on the stages); the restart job has 4 ranks on
    the same nodes (2+1+1): one rank per writing rank of each node drains step 3 as the writing job would have,
    and the 4 ranks read it N-to-M (no fallback to step 2)."""
    out = tmp_path / "out"
    out.mkdir()
    stage = node_local(tmp_path) / "stage"
    job((1, 1, 1), ["write", "xor", out, stage], tmp_path)
    assert sorted(p.name for p in out.glob("chk_*")) == ["chk_000002"]
    got = job((2, 1, 1), ["other", "xor", out, stage, 3, 3], tmp_path)
    assert all(r["found"] == "chk_000003" for r in got) and got[0]["warned"] == [], got


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("scheme", "rows", "file"), [("partner", 7500, "/redundancy/partner-0/rank-00000[01]-of-"),
                                                     ("xor", 10000, "/redundancy/xor[.]parity"),
                                                     ("xor", 20000, "/rank-00000[23]-of-000004.data")],
                         ids=["partner-copy", "xor-parity", "own-piece"])
def test_a_full_stage_on_one_node_is_one_clear_error_naming_the_node_and_file(scheme, rows, file, tmp_path):
    """nodeB's node-local directory is a 1 MiB tmpfs: steps 1-3 fit, step 4 (``rows`` x 40 bytes per rank) does
    not, in the redundancy exchange (a partner copy of nodeA's pieces; the XOR parity) or in a rank's own piece.
    Every rank raises the same CheckpointIOError, which names the node (nodeB), the stage file and ENOSPC (an
    outside trial got "rank 2: OSError: [Errno 28] No space left on device" alone); step 3 still restarts."""
    out = tmp_path / "out"
    out.mkdir()
    small = node_dir(tmp_path, "nodeB")
    small.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs for nodeB: {mounted.stderr.strip()}")
    try:
        got = job((2, 2), ["full", scheme, out, node_local(tmp_path) / "stage", rows], tmp_path)
    finally:
        subprocess.run(["umount", str(small)], check=False)
    said = {r["said"] for r in got}
    assert len(said) == 1 and None not in said, said
    message = said.pop()
    assert message.startswith("CollectiveCheckpointIOError"), message
    assert "No space left on device" in message and "(on nodeB)" in message, message
    assert f"{node_local(tmp_path)}/stage/" in message and re.search(file, message), message  # as seen on nodeB
    assert "(on nodeA)" not in message, message
    assert all(r["found"] == "chk_000003" for r in got)


@pytest.mark.timeout(300)
def test_fewer_ranks_on_a_node_fall_back_saying_why(tmp_path):
    """Steps 1-3 by 4 ranks (2+1+1, partner); the restart job has one rank on nodeA, which holds 2 pieces: the
    node-local step 3 cannot be drained by a job numbered like the writing one; latest() says why and restarts
    from step 2, the newest of the parallel file system, N-to-M."""
    out = tmp_path / "out"
    out.mkdir()
    stage = node_local(tmp_path) / "stage"
    job((2, 1, 1), ["write", "partner", out, stage], tmp_path)
    got = job((1, 1, 1), ["other", "partner", out, stage, 4, 2], tmp_path)
    said = got[0]["warned"]
    assert len(said) == 1 and "node nodeA holds 2 pieces but runs 1 rank(s)" in said[0], said
    assert "falling back" in said[0], said


@pytest.mark.timeout(300)
def test_rank_killed_in_the_exchange_restarts_from_the_level_below(tmp_path):
    """Steps 1-2, then a job whose rank 3 is killed (SIGKILL) as step 3's redundancy exchange starts: mpirun ends
    the job (no hang); step 3's pieces are all staged but no node completed its redundancy, so the restart does
    not use it (saying why) and restarts from step 2."""
    out = tmp_path / "out"
    out.mkdir()
    stage = node_local(tmp_path) / "stage"
    job((2, 1, 1), ["write", "xor", out, stage, "1,2"], tmp_path)
    killed = run_nodes((2, 1, 1), [sys.executable, PROGRAM, "write", "xor", out, stage, "3"], tmp_path, timeout=120,
                       env={"CKPTIO_FAULT": "redundancy exchange:3"}, check=False)
    assert killed.returncode != 0 and MARKER in killed.stderr, killed.stderr[-3000:]
    assert any((node_dir(tmp_path, "nodeA") / "stage").rglob("rank-000000-of-000004.json"))
    got = job((2, 1, 1), ["restart", "xor", out, stage, 2], tmp_path)
    said = got[0]["warned"]
    assert len(said) == 1 and "redundancy exchange never completed" in said[0], said


@pytest.mark.timeout(300)
@pytest.mark.parametrize("scheme", ["partner", "xor"])
def test_leader_killed_between_chunks_of_the_exchange_restarts_from_the_level_below(scheme, tmp_path):
    """As above, but the exchange runs in 64-byte chunks and node B's leader (rank 2) is killed just after it
    wrote the first chunk it received: a partner copy or the parity file is half written on its node and the
    other leaders are between chunks. mpirun ends the job; the half-written level is never used (no node marked
    it complete) and the restart says so and restarts from step 2, which it reads back whole."""
    out = tmp_path / "out"
    out.mkdir()
    stage = node_local(tmp_path) / "stage"
    job((2, 1, 1), ["write", scheme, out, stage, "1,2"], tmp_path)
    killed = run_nodes((2, 1, 1), [sys.executable, PROGRAM, "write", scheme, out, stage, "3"], tmp_path,
                       timeout=120, env={"CKPTIO_FAULT": "redundancy chunk:2", "MULTILEVEL_CHUNK": "64"},
                       check=False)
    assert killed.returncode != 0 and "phase 'redundancy chunk'" in killed.stderr, killed.stderr[-3000:]
    half = [p for p in (node_dir(tmp_path, "nodeB") / "stage").rglob("*") if p.is_file()
            and "redundancy" in p.parts and p.stat().st_size > 0]
    assert half, "node B's leader was killed before it wrote any redundancy byte"
    got = job((2, 1, 1), ["restart", scheme, out, stage, 2], tmp_path)
    said = got[0]["warned"]
    assert len(said) == 1 and "redundancy exchange never completed" in said[0], said


@pytest.mark.timeout(200)
def test_bad_redundancy_arguments_fail_on_every_rank(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    got = job((2, 2), ["bad_args", out, node_local(tmp_path) / "stage"], tmp_path)
    for r in got:
        bad_value, no_stage, bad_drain, groups = r["errors"]
        assert "redundancy='raid'" in bad_value, bad_value
        assert "need stage_dir" in no_stage and "drain_every=0" in bad_drain
        assert "failure_group differs between the ranks of node node" in groups, groups
        assert r["pfs"] == [] and not [p for p in r["staged"] if p.endswith(".json")], r


@pytest.mark.timeout(120)
def test_the_rebuild_sends_the_layout_to_node_leaders_only(tmp_path):
    """The layout is O(ranks): at restart only the node leaders (which plan and move the bytes) receive it from
    the node that recorded it, not every rank; a level that node cannot read is the same error everywhere."""
    got = reports(run_mpi(4, [PROGRAM, "layout_to_leaders", str(tmp_path)], timeout=100).stdout)
    assert [r["layout"] is not None for r in got] == [True, False, True, False], got
    assert got[0]["same"] and got[2]["same"] and got[0]["layout"] == got[2]["layout"], got
    assert len({r["damaged"] for r in got}) == 1, got
    assert "level record" in got[0]["damaged"] and "Corrupt" in got[0]["damaged"], got
