"""On a real CephFS (ci/cephfs.sh): two emulated nodes (tests/multinode.py), each mounting the file system with its
own ceph-fuse client inside its mount namespace, write one checkpoint with the layout ckptio chose and restart it
on other nodes: the MPI-IO traffic of each node goes through its own client, as on a cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from multinode import AGENT, run_nodes, skip_reason

from ckptio.engine import fslayout

pytestmark = [pytest.mark.cephfs, pytest.mark.mpi,
              pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))]

APP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cephfs_app.py")

# multinode's agent, with one more step inside each node's namespace: its own ceph-fuse on the CephFS mount point
# (over the host's). The agent's shell cannot unmount at the end: with an exit trap that did, the ranks saw no node
# mount (the shell ends before the job's ranks do). So the test stops the clients it started, by their pids, after
# the job, and their mounts go with their namespaces.
_NODE_STEP = '''    ceph-fuse -c {conf} -n client.admin -k {keyring} --client_fs cephfs -o nonempty {mnt} \\
      >"$2/ceph-fuse.$1.log" 2>&1 || exit 96
    shift 2
    exec /bin/sh -c "$*"' agent "$node" "$root" "$@"'''


def ceph_agent(env: dict[str, str]) -> str:
    old = '''    shift 2
    exec /bin/sh -c "$*"' agent "$node" "$root" "$@"'''
    assert old in AGENT, "tests/multinode.py's agent changed: update the ceph-fuse step"
    step = _NODE_STEP.format(conf=env["CEPH_CONF"], keyring=env["CKPTIO_CEPH_KEYRING"], mnt=env["CKPTIO_CEPHFS"])
    return AGENT.replace(old, step)


def fuse_clients() -> set[int]:
    out = subprocess.run(["pgrep", "-x", "ceph-fuse"], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def stop(pids: set[int]) -> None:
    """Stop the node clients this test started (SIGTERM, then SIGKILL after 10 s)."""
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while pids and time.monotonic() < deadline:
        pids = {p for p in pids if os.path.exists(f"/proc/{p}")}
        time.sleep(0.2)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def report(stdout: str) -> dict:
    lines = [line[5:] for line in stdout.splitlines() if line.startswith("JSON ")]
    assert len(lines) == 1, stdout
    return json.loads(lines[0])


@pytest.mark.timeout(600)
def test_two_nodes_with_their_own_clients(cephdir, ceph_env, tmp_path):
    before = fuse_clients()
    agent = ceph_agent(ceph_env)
    host_dev = os.stat(cephdir).st_dev
    path = cephdir / "two_nodes"
    try:
        w = report(run_nodes((2, 2), [sys.executable, APP, "write", path, "mpiio", "sync", "2"], tmp_path / "w",
                             timeout=300, agent_script=agent).stdout)
        r = report(run_nodes((1, 2), [sys.executable, APP, "read", path], tmp_path / "r", timeout=300,
                             agent_script=agent).stdout)
    finally:
        stop(fuse_clients() - before)
    for rep, nodes in ((w, {"nodeA", "nodeB"}), (r, {"nodeA", "nodeB"})):
        devices = {host: dev for host, dev in rep["clients"]}
        assert set(devices) == nodes, rep["clients"]
        assert len({dev for _, dev in rep["clients"]}) == len(nodes), rep["clients"]  # one client per node
        assert host_dev not in devices.values()  # and none of them the host's mount
    got = w["layout"]["fs"]["got"]
    assert (got["stripe_count"], got["stripe_unit"]) == (4, 1 << 20), w["layout"]
    assert fslayout.read_ceph(str(path))["stripe_count"] == 4
    assert r["readers"] == 3 and len(r["aggregators"]) == 3  # min(readers, stripe count 4)
    assert {r["clients"][a][0] for a in r["aggregators"]} == {"nodeA", "nodeB"}  # spread over both nodes
