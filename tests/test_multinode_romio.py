"""ROMIO's write aggregators across emulated nodes (issue 14, item 5): with ``OMPI_MCA_io=romio321`` forwarded to
the ranks, ckptio passes ``cb_config_list=*:1``, and ROMIO must then put one write aggregator on every node.

MPI does not say which ranks ROMIO made aggregators: ``MPI_File_get_info`` gives back ``cb_config_list`` as
passed and ``cb_nodes`` as asked (4 on 4 ranks here, although with ``*:1`` only one rank per node, 2 or 3 ranks,
writes). So placement is checked through what the write recorded in the checkpoint: every rank's bytes moved to
storage during the collective write, measured by the kernel (``write_bytes`` of ``/proc/thread-self/io``, see
``ckptio/engine/placement_stats.py``), summed per node. ``cb_config_list=*:*`` (any number per node) is the control:
the same measurement then finds two writing ranks on the first node of 2+1+1.

These tests are about ROMIO's own write aggregators, so they ask for the single collective write through MPI-IO
(``CKPTIO_WRITE_IO=write_all``); ckptio's own write aggregators across nodes are checked by
``tests/test_multinode_write_aggregators.py``.

Skipped where emulated nodes cannot run, or where the test directory's file system does not account storage
writes to the writing thread (tmpfs): then nothing would be measured.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from multinode import node_of_rank, run_nodes, skip_reason

from ckptio.engine.placement_stats import storage_bytes_written

APP = str(Path(__file__).with_name("multinode_app.py"))
LAYOUTS = {"2x2": (2, 2), "2+1+1": (2, 1, 1)}
MiB = 1 << 20


def accounting_reason(directory: Path) -> str | None:
    """Why storage writes to ``directory`` are not accounted to the writing thread (None when they are)."""
    before = storage_bytes_written()
    if before is None:
        return "no per-thread I/O accounting (/proc/thread-self/io)"
    probe = directory / "accounting-probe"
    with open(probe, "wb") as f:
        f.write(b"\1" * MiB)
    moved = (storage_bytes_written() or 0) - before
    probe.unlink()
    return None if moved >= MiB else f"{directory} does not account storage writes (tmpfs?): {moved} bytes"


pytestmark = [pytest.mark.mpi, pytest.mark.nodes,
              pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))]


def placement_job(layout: tuple[int, ...], config_list: str, root: Path) -> dict:
    reason = accounting_reason(root)
    if reason:
        pytest.skip(reason)
    out = root / "out"
    out.mkdir()
    proc = run_nodes(layout, [sys.executable, APP, "placement-write", out, config_list], root,
                     env={"OMPI_MCA_io": "romio321", "CKPTIO_WRITE_IO": "write_all"}, timeout=240)
    got = sorted((json.loads(line[5:]) for line in proc.stdout.splitlines() if line.startswith("JSON ")),
                 key=lambda r: r["rank"])
    assert len(got) == sum(layout) and all(r["ok"] for r in got), proc.stdout
    assert [r["host"] for r in got] == node_of_rank(layout)
    assert all(r["written"] == got[0]["written"] for r in got)
    return got[0]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("layout", LAYOUTS, ids=list(LAYOUTS))
def test_romio_writes_through_one_aggregator_per_node(layout, tmp_path):
    """ckptio's default under ROMIO: cb_config_list=*:1 reaches ROMIO, and exactly one rank of every node moves
    bytes to the file; together they move at least the data (ROMIO also rewrites the alignment hole)."""
    shape = LAYOUTS[layout]
    got = placement_job(shape, "default", tmp_path)
    assert got["hints"]["io_component"] == "Open MPI io=romio321"
    assert got["hints"]["requested"]["cb_config_list"] == "*:1"
    assert got["hints"]["effective"].get("cb_config_list") == "*:1", got["hints"]["effective"]
    written = got["written"]
    assert written["measured"], written
    assert written["aggregators_per_node"] == {n: 1 for n in dict.fromkeys(node_of_rank(shape))}, written
    assert written["aggregators"] == len(shape)
    assert all(n["file_bytes"] >= MiB for n in written["nodes"]), written  # each aggregator wrote its domain
    assert written["file_bytes"] >= sum(shape) * MiB
    assert [n["declared_bytes"] for n in written["nodes"]] == [k * MiB for k in shape]


@pytest.mark.timeout(300)
def test_romio_without_one_per_node_puts_two_aggregators_on_the_first_node(tmp_path):
    """The control: cb_config_list=*:* lets ROMIO take every rank (cb_nodes=4 on 4 ranks), and the same
    measurement sees both ranks of nodeA write, so the one-per-node result above is ROMIO's doing."""
    got = placement_job((2, 1, 1), "*:*", tmp_path)
    assert got["hints"]["effective"].get("cb_config_list") == "*:*"
    written = got["written"]
    assert written["measured"], written
    assert written["aggregators_per_node"] == {"nodeA": 2, "nodeB": 1, "nodeC": 1}, written
    assert os.path.isfile(tmp_path / "out" / "chk_000001")
