"""ckptio's own write aggregators across emulated nodes (issue 29 item 1, with issue 14's emulated nodes): with as
many write aggregators as nodes (``CKPTIO_WRITE_AGGREGATORS``), each node gets exactly one, and only it moves
bytes to the file: measured by the kernel (``write_bytes`` of ``/proc/thread-self/io``, summed per node in the
checkpoint's ``stats.write.placement``), the helper thread's writes included. The domains are whole rank regions
(no striping here), each node's ranks going to their own node's aggregator, so the exchange never leaves a node.

Skipped where emulated nodes cannot run or the test directory does not account storage writes (tmpfs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from multinode import node_of_rank, run_nodes, skip_reason
from test_multinode_romio import LAYOUTS, MiB, accounting_reason

APP = str(Path(__file__).with_name("multinode_app.py"))

pytestmark = [pytest.mark.mpi, pytest.mark.nodes,
              pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("layout", LAYOUTS, ids=list(LAYOUTS))
def test_one_write_aggregator_per_node_and_only_it_writes(layout, tmp_path):
    reason = accounting_reason(tmp_path)
    if reason:
        pytest.skip(reason)
    shape = LAYOUTS[layout]
    out = tmp_path / "out"
    out.mkdir()
    env = {"CKPTIO_WRITE_AGGREGATORS": str(len(shape)), "CKPTIO_WRITE_BUFFER_BYTES": "512K",
           "CKPTIO_HINTS": "striping_unit=262144"}  # several rounds: the helper thread writes
    proc = run_nodes(shape, [sys.executable, APP, "placement-write", out, "default"], tmp_path, env=env,
                     timeout=240)
    got = sorted((json.loads(line[5:]) for line in proc.stdout.splitlines() if line.startswith("JSON ")),
                 key=lambda r: r["rank"])
    assert len(got) == sum(shape) and all(r["ok"] for r in got), proc.stdout
    nodes = node_of_rank(shape)
    written = got[0]["written"]
    assert written["measured"], written
    assert written["aggregators_per_node"] == {n: 1 for n in dict.fromkeys(nodes)}, written
    assert all(n["file_bytes"] >= k * MiB for n, k in zip(written["nodes"], shape, strict=True)), written
    assert [n["declared_bytes"] for n in written["nodes"]] == [k * MiB for k in shape]
