"""ckptio across emulated nodes (issue 14): tests/multinode.py starts Open MPI on "nodes" that are namespaces of
this machine (own hostname, own /dev/shm, own node-local directory), so COMM_TYPE_SHARED, aggregator placement
and node-local stages behave as on a cluster. Skipped, with the reason, where unshare is not permitted."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from mpi_helpers import BACKENDS
from multinode import node_dir, node_local, node_of_rank, run_nodes, skip_reason

pytestmark = [pytest.mark.mpi, pytest.mark.nodes,
              pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))]

APP = str(Path(__file__).with_name("multinode_app.py"))
LAYOUTS = {"2x2": (2, 2), "2+1+1": (2, 1, 1)}


def per_node(nodes: list[str]) -> list[tuple[str, int, int]]:
    """(host, ranks, first rank) of every node, in first-rank order."""
    return [(n, nodes.count(n), nodes.index(n)) for n in dict.fromkeys(nodes)]


def reports(stdout: str) -> list[dict]:
    out = [json.loads(line[5:]) for line in stdout.splitlines() if line.startswith("JSON ")]
    return sorted(out, key=lambda r: r["rank"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("layout", LAYOUTS, ids=list(LAYOUTS))
@pytest.mark.parametrize("mode", ["sync", "async", "staged"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_write_and_restart_across_nodes(backend, mode, layout, tmp_path):
    """Write on every node, restart on one rank fewer; hostnames are the nodes; one aggregator per node; a
    node-local stage (the same stage_dir path on every node) holds exactly its own node's ranks' pieces."""
    shape = LAYOUTS[layout]
    out = tmp_path / "out"
    out.mkdir()
    proc = run_nodes(shape, [sys.executable, APP, "write-restart", backend, mode, out,
                             node_local(tmp_path) / "stage"], tmp_path, timeout=240)
    got = reports(proc.stdout)
    nodes = node_of_rank(shape)
    assert [r["host"] for r in got] == nodes and all(r["ok"] for r in got), proc.stdout
    aggregators = got[0]["aggregators"]
    assert sorted(nodes[a] for a in aggregators) == sorted(set(nodes))  # one per node
    assert all(r["is_aggregator"] == (r["rank"] in aggregators) for r in got)
    # the placement report (ckptio.coord.placement): hosts, one aggregator per node, only aggregators read the file
    placed = {k: v for k, v in got[0]["read"].items() if k != "rank"}
    assert all({k: v for k, v in r["read"].items() if k != "rank"} == placed for r in got)
    expected = {n: [a for a in aggregators if nodes[a] == n] for n in dict.fromkeys(nodes)}
    assert placed["aggregators_per_node"] == expected
    assert all(len(v) == 1 for v in placed["aggregators_per_node"].values())
    assert [(n["host"], n["ranks"], n["first_rank"]) for n in placed["nodes"]] == per_node(nodes)
    assert all(r["read"]["rank"]["host"] == r["host"] for r in got)
    assert all((r["read"]["rank"]["file_bytes"] > 0) == r["read"]["rank"]["aggregator"] for r in got)
    assert sum(n["file_bytes"] for n in placed["nodes"]) >= 8 * 5 * 8 * len(nodes)
    more = got[0]["more"]  # one more aggregator than nodes: every node has one, the first node a second
    assert [len(v) for v in more.values()] == [2] + [1] * (len(more) - 1), more
    # the placement the write recorded in the checkpoint (the MPI-IO layer's write aggregators, measured)
    written = got[0]["written"]
    assert all(r["written"] == written for r in got)
    assert [(n["host"], n["ranks"], n["first_rank"]) for n in written["nodes"]] == per_node(nodes)
    assert sum(n["declared_bytes"] for n in written["nodes"]) >= 8 * 5 * 8 * len(nodes)
    if written["measured"]:  # not on a tmpfs test directory
        assert written["aggregators"] >= 1 and written["file_bytes"] > 0, written
    assert (out / "chk_000001").is_file()
    if mode == "staged":
        for r in got:
            mates = [q for q, n in enumerate(nodes) if n == r["host"]]
            assert r["staged"] == [f"rank-{q:06d}-of-{len(nodes):06d}.json" for q in mates]
        for node in set(nodes):
            assert (node_dir(tmp_path, node) / "stage").is_dir()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stage", ["node-local", "dev-shm", "shared"])
def test_staged_restart_recovers_from_every_node_or_falls_back(stage, tmp_path):
    """A staged checkpoint whose final copy is gone is drained again at restart from the pieces on every
    node; with one rank's piece missing, restart falls back to the older checkpoint (warning, no hang)."""
    out = tmp_path / "out"
    out.mkdir()
    where = {"node-local": node_local(tmp_path) / "stage", "dev-shm": Path("/dev/shm/ckptio-test-stage"),
             "shared": tmp_path / "shared-stage"}[stage]
    proc = run_nodes((2, 1, 1), [sys.executable, APP, "recover", out, where], tmp_path, timeout=240)
    got = reports(proc.stdout)
    assert all(r["ok"] for r in got) and len(got) == 4, proc.stdout
    assert got[0]["warned"] and "not usable on every rank" in got[0]["warned"][0], got[0]


@pytest.mark.timeout(300)
def test_stage_seen_by_some_nodes_only_fails_on_every_rank_naming_the_node(tmp_path):
    """nodeA and nodeB reach one shared stage through the node-local path, nodeC has a directory of its own:
    neither shared nor node-local. Every rank fails before anything is written, and the message names nodeC."""
    shared = tmp_path / "shared"
    shared.mkdir()
    for node in ("nodeA", "nodeB", "nodeC"):
        node_dir(tmp_path, node).mkdir(parents=True)
    os.symlink(shared, node_dir(tmp_path, "nodeA") / "stage")
    os.symlink(shared, node_dir(tmp_path, "nodeB") / "stage")
    (node_dir(tmp_path, "nodeC") / "stage").mkdir()
    out = tmp_path / "out"
    out.mkdir()
    proc = run_nodes((2, 1, 1), [sys.executable, APP, "bad-stage", out, node_local(tmp_path) / "stage"], tmp_path,
                     timeout=120)
    got = reports(proc.stdout)
    assert len(got) == 4 and all(r["ok"] for r in got), proc.stdout
    assert all("node nodeC (ranks 3)" in r["error"] for r in got), got[0]["error"]
    assert not any(out.iterdir())
    assert not any(p.name.startswith(".ckptio-probe") for p in shared.iterdir())


@pytest.mark.timeout(400)
def test_drain_killed_restart_on_same_nodes_uses_the_stage_other_nodes_fall_back(tmp_path):
    """Step 2's drain is killed (a rank dies in its collective write to the parallel file system): only the
    node-local stages hold it. A restart on the same nodes drains it from there and restarts from step 2; a
    restart on other nodes (another layout: the pieces are not where the ranks are) falls back to step 1."""
    out = tmp_path / "out"
    out.mkdir()
    stage = node_local(tmp_path) / "stage"
    run_nodes((2, 2), [sys.executable, APP, "stage-step", "1", out, stage], tmp_path)
    killed = run_nodes((2, 2), [sys.executable, APP, "stage-step", "2", out, stage], tmp_path,
                       env={"CKPTIO_FAULT": "write data:1"}, check=False)
    assert killed.returncode != 0 and "ckptio fault injected" in killed.stderr, killed.stderr[-3000:]
    assert not (out / "chk_000002").exists()
    other = tmp_path / "other-nodes"  # the same node names, but empty node-local directories
    proc = run_nodes((2, 2), [sys.executable, APP, "restart", out, node_local(other) / "stage", "1"], other)
    got = reports(proc.stdout)
    assert len(got) == 4 and all(r["ok"] for r in got), proc.stdout
    proc = run_nodes((1, 1, 2), [sys.executable, APP, "restart", out, stage, "1"], tmp_path)
    got = reports(proc.stdout)
    assert len(got) == 4 and all(r["ok"] for r in got), proc.stdout
    assert got[0]["warned"] and "missing" in got[0]["warned"][0], got[0]
    proc = run_nodes((2, 2), [sys.executable, APP, "restart", out, stage, "2"], tmp_path)
    got = reports(proc.stdout)
    assert len(got) == 4 and all(r["ok"] for r in got) and not got[0]["warned"], proc.stdout
    assert (out / "chk_000002").is_file()


@pytest.mark.timeout(300)
def test_final_directory_one_node_cannot_see_fails_on_every_rank_before_staging(tmp_path):
    """The final directory exists only on nodeA (it is on node-local storage by mistake): every rank fails at
    close(), the message names nodeB, and nothing is staged (the drain would open the file on every node)."""
    node_dir(tmp_path, "nodeA").mkdir(parents=True)
    (node_dir(tmp_path, "nodeA") / "out").mkdir()
    stage = tmp_path / "shared-stage"
    proc = run_nodes((2, 2), [sys.executable, APP, "bad-stage", node_local(tmp_path) / "out", stage], tmp_path,
                     timeout=120)
    got = reports(proc.stdout)
    assert len(got) == 4 and all(r["ok"] for r in got), proc.stdout
    assert all("seen from nodeB (rank 2)" in r["error"] for r in got), got[0]["error"]
    assert not stage.exists() or not any(stage.rglob("*.json"))


@pytest.mark.timeout(400)
def test_restart_reads_the_node_local_stages_only_where_every_piece_is(tmp_path):
    """open(path, stage_dir=) reads a staged checkpoint from the nodes' stages (same reads as from the file:
    whole arrays, hyperslabs across writers, segments) when every rank's piece is on its own node; on other
    nodes, or after the file was rewritten without staging, it reads the file (with a warning)."""
    out = tmp_path / "out"
    out.mkdir()
    stage = node_local(tmp_path) / "stage"

    def job(layout, mode, expect):
        proc = run_nodes(layout, [sys.executable, APP, "staged-read", out, stage, mode, expect], tmp_path)
        got = reports(proc.stdout)
        assert len(got) == sum(layout) and all(r["ok"] for r in got), proc.stdout
        return got[0]

    assert not job((2, 2), "staged", "stage")["warned"]
    assert "no staged piece" in job((1, 1, 2), "none", "pfs")["warned"][0]  # the pieces are not where the ranks are
    job((2, 2), "none", "stage")                                           # the same nodes again
    assert "older" in job((2, 2), "sync", "pfs")["warned"][0]            # the file was rewritten since
