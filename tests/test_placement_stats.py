"""Where the bytes went (issue 14, item 4): the O(nodes) placement a write records in the checkpoint
(``stats.write.placement``), ``ckptio inspect --stats`` showing it, and ``ckptio plan --ranks-per-node``.
The multi-node cases (one write aggregator per node under ROMIO) are in tests/test_multinode_romio.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_helpers import PROGRAMS, mpi_env, run_mpi

from ckptio.engine.placement_stats import storage_bytes_written, summarize
from ckptio.tools.cli import main as cli_main
from ckptio.tools.commands.stats_view import stats_lines

CKPTIO = str(Path(sys.executable).parent / "ckptio")
PROGRAM = str(PROGRAMS / "placement_stats.py")  # the MPI program of these tests


def _human(n: float) -> str:
    return f"{n:.0f} B"


# ------------------------------------------------------------------------------------------ pure summary
def test_summary_is_per_node_and_counts_only_ranks_that_moved_bytes():
    records = [{"host": "a", "file_bytes": 8192}, {"host": "a", "file_bytes": 0}, {"host": "b", "file_bytes": 0},
               {"host": "c", "file_bytes": 4096}, {"host": "b", "file_bytes": 4096}]
    got = summarize(records, [100, 100, 100, 100, 100])
    assert got["measured"] and got["why"] is None
    assert got["nodes"] == [
        {"host": "a", "ranks": 2, "first_rank": 0, "aggregators": 1, "file_bytes": 8192, "declared_bytes": 200},
        {"host": "b", "ranks": 2, "first_rank": 2, "aggregators": 1, "file_bytes": 4096, "declared_bytes": 200},
        {"host": "c", "ranks": 1, "first_rank": 3, "aggregators": 1, "file_bytes": 4096, "declared_bytes": 100}]
    assert got["aggregators"] == 3 and got["file_bytes"] == 16384


def test_summary_of_a_job_of_100000_ranks_stays_per_node():
    records = [{"host": f"n{r // 64:05d}", "file_bytes": 1 << 20 if r % 64 == 0 and r < 80 * 64 else 0}
               for r in range(100_000)]
    got = summarize(records, [1 << 20] * 100_000)
    assert len(got["nodes"]) == 1563 and got["aggregators"] == 80
    assert len(json.dumps(got)) < 200 * len(got["nodes"])  # no per-rank list anywhere


def test_summary_says_when_nothing_was_measured():
    tmpfs = summarize([{"host": "a", "file_bytes": 0}, {"host": "a", "file_bytes": 0}], [10, 10])
    assert not tmpfs["measured"] and "tmpfs" in tmpfs["why"]
    assert tmpfs["aggregators"] is None and tmpfs["nodes"][0]["file_bytes"] is None
    blind = summarize([{"host": "a", "file_bytes": 4096}, {"host": "b", "file_bytes": None}], [10, 10])
    assert not blind["measured"] and "rank 1" in blind["why"] and blind["file_bytes"] is None
    empty = summarize([{"host": "a", "file_bytes": 0}], [0])  # nothing to write: measured, no aggregator
    assert empty["measured"] and empty["aggregators"] == 0


def test_stats_view_shows_aggregators_and_bytes_per_node():
    placement = summarize([{"host": "nodeA", "file_bytes": 8192}, {"host": "nodeA", "file_bytes": 0},
                           {"host": "nodeB", "file_bytes": 4096}], [4000, 4000, 4000])
    text = "\n".join(stats_lines({"write": {"seconds": {"write": 0.5}, "placement": placement}}, _human))
    assert "2 write aggregator(s) on 2 of 2 node(s) moved 12288 B to the file" in text
    assert [line.split() for line in text.splitlines() if line.strip().startswith(("nodeA", "nodeB"))] == [
        ["nodeA", "2", "0", "1", "8192", "B", "8000", "B"], ["nodeB", "1", "2", "1", "4096", "B", "4000", "B"]]
    older = "\n".join(stats_lines({"write": {"seconds": {}}}, _human))
    assert "placement   not recorded" in older
    unmeasured = summarize([{"host": "a", "file_bytes": 0}], [10])
    assert "not measured: the kernel" in "\n".join(stats_lines({"write": {"placement": unmeasured}}, _human))


# --------------------------------------------------------------------------------- measured in a real job

def _accounted(directory: Path) -> bool:
    before = storage_bytes_written()
    probe = directory / "probe"
    probe.write_bytes(b"\1" * (1 << 20))
    after = storage_bytes_written()
    probe.unlink()
    return before is not None and after is not None and after - before >= 1 << 20


@pytest.mark.mpi
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("where", ["disk", "tmpfs"])
def test_write_records_the_bytes_moved_to_the_file_and_inspect_shows_them(where, mode, tmp_path):
    if where == "disk" and not _accounted(tmp_path):
        pytest.skip(f"{tmp_path} does not account storage writes (tmpfs?)")
    if where == "tmpfs" and not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    directory = tmp_path if where == "disk" else Path("/dev/shm") / f"ckptio-test-{os.getpid()}-{tmp_path.name}"
    directory.mkdir(exist_ok=True)
    path = directory / "chk"
    try:
        proc = run_mpi(2, [PROGRAM, "write", str(path), mode])
        got = sorted((json.loads(line[5:]) for line in proc.stdout.splitlines() if line.startswith("JSON ")),
                     key=lambda r: r["rank"])
        assert len(got) == 2 and got[0]["written"] == got[1]["written"]
        written, host = got[0]["written"], got[0]["read"]["rank"]["host"]
        assert [(n["host"], n["ranks"], n["declared_bytes"]) for n in written["nodes"]] == [(host, 2, 2 << 20)]
        # the read side: this rank's host and aggregator flag; the one aggregator is on the one node
        assert got[0]["read"]["aggregators_per_node"] == {host: [0]}
        assert [r["read"]["rank"]["aggregator"] for r in got] == [True, False]
        assert got[0]["read"]["nodes"][0]["file_bytes"] >= 2 << 20
        stats = subprocess.run([CKPTIO, "inspect", "--stats", str(path)], capture_output=True, text=True,
                               env=mpi_env(), timeout=120)
        assert stats.returncode == 0, stats.stderr
        if where == "disk":
            assert written["measured"] and written["file_bytes"] >= 2 << 20, written
            assert 1 <= written["aggregators"] <= 2
            assert "on 1 of 1 node(s) moved" in stats.stdout
        else:
            assert not written["measured"] and "tmpfs" in written["why"], written
            assert "bytes moved to the file not measured" in stats.stdout
        assert any(line.split()[:3] == [host, "2", "0"] for line in stats.stdout.splitlines()), stats.stdout
        doc = json.loads(subprocess.run([CKPTIO, "inspect", "--json", "--stats", str(path)], capture_output=True,
                                        text=True, env=mpi_env(), timeout=120).stdout)
        assert doc["stats"]["write"]["placement"]["nodes"] == written["nodes"]
    finally:
        if where == "tmpfs":
            for f in directory.iterdir():
                f.unlink()
            directory.rmdir()


# ------------------------------------------------------------------------------------------ ckptio plan
def _plan(capsys, *args: str) -> dict:
    assert cli_main(["plan", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_reports_aggregators_per_node_for_the_flash_case(capsys):
    got = _plan(capsys, "--ranks", "7620", "--bytes", "189G", "--stripe-count", "80", "--ranks-per-node", "16")
    for phase in ("write", "restart"):
        naive, ck = got[phase]["naive"]["aggregators_per_node"], got[phase]["ckptio"]["aggregators_per_node"]
        assert naive["nodes"] == 477 and naive["max"] == 16 and naive["nodes_with_aggregators"] == 477
        assert ck["max"] == 1 and ck["nodes_with_aggregators"] == 80, ck  # one per node, 80 of 477 nodes
        assert ck["histogram"] == {"0": 397, "1": 80}
        assert got[phase]["ckptio"]["clients"]["max"] <= 80  # aggregators per OST


def test_plan_with_fewer_nodes_than_aggregators(capsys):
    got = _plan(capsys, "--ranks", "64", "--bytes", "1G", "--readers", "48", "--ranks-per-node", "16")
    write = got["write"]["ckptio"]
    assert write["aggregators"] == 4 and write["aggregators_per_node"]["max"] == 1  # ROMIO *:1: one per node
    restart = got["restart"]["ckptio"]["aggregators_per_node"]
    assert restart["nodes"] == 3 and restart["max"] == 16 and restart["min"] == 16  # 48 readers all aggregate
    assert cli_main(["plan", "--ranks", "64", "--bytes", "1G", "--ranks-per-node", "16"]) == 0
    text = capsys.readouterr().out
    assert "PLACEMENT (16 ranks per node: 4 writer nodes, 4 restart nodes" in text
    assert [line.split()[:5] for line in text.splitlines() if line.startswith("  write ckptio")] == [
        ["write", "ckptio", "1", "/", "1.00"]]


def test_plan_without_ranks_per_node_is_unchanged_and_bad_values_are_usage_errors(capsys):
    got = _plan(capsys, "--ranks", "512", "--bytes", "8G")
    assert "aggregators_per_node" not in got["write"]["ckptio"] and got["scenario"]["ranks_per_node"] is None
    assert got["write"]["ckptio"]["aggregators"] == 80
    for bad in ("0", "-3", "x"):
        assert cli_main(["plan", "--ranks", "512", "--bytes", "8G", "--ranks-per-node", bad]) == 2
        assert "--ranks-per-node" in capsys.readouterr().err
