"""Smoke test of the benchmark suite: ``mpirun -n 2 python -m benchmarks.run --quick`` runs every section and writes
a complete results document (JSON sections, positive bandwidths, verified restarts) and the Markdown table.

Behaviour only: nothing here asserts on elapsed time or on a bandwidth figure (the benchmark itself reports
those); the generous mpirun timeout only turns a deadlock into a failure."""

from __future__ import annotations

import json

import pytest
from mpi_helpers import run_mpi

pytestmark = pytest.mark.mpi

SECTIONS = ("config", "environment", "modes", "bandwidth", "page_cache", "overhead", "compression", "small_variables",
            "checksum", "plan", "targets")


def test_quick_benchmark_run(tmp_path):
    scratch, results = tmp_path / "scratch", tmp_path / "results"
    run_mpi(2, ["-m", "benchmarks.run", "--quick", "--outdir", str(scratch), "--results", str(results)], timeout=300)
    doc = json.loads((results / "results.json").read_text())
    for section in SECTIONS:
        assert section in doc, f"results.json has no {section!r} section"
    bw = doc["bandwidth"]
    assert bw["raw"]["status"] == "ok" and bw["ckptio-mpiio"]["status"] == "ok"
    assert bw["raw-fill"]["status"] == "ok"  # the raw read into a whole-size array: a restart's memory traffic
    measured = [e for e in bw.values() if e["status"] == "ok"]
    assert len(measured) >= 3
    for entry in measured:
        for what in ("write", "read_cold", "read_hot"):
            assert entry[what]["median"] > 0, (entry["label"], what)
            assert entry[what]["min"] <= entry[what]["median"] <= entry[what]["max"]
        assert entry["group"] == "raw" or entry.get("verified"), entry["label"]
    for entry in bw.values():  # unavailable backends/peers are reported, with a reason
        assert entry["status"] in ("ok", "skipped"), (entry["label"], entry.get("reason"))
        if entry["status"] == "skipped":
            assert entry["reason"]
    assert doc["page_cache"]["max_resident_before_cold_read"] < 0.05
    assert doc["modes"]["async"] in ("available", "not available")
    for key in ("ckptio-mpiio-async", "ckptio-mpiio-staged"):  # blocked time is reported per background mode
        if bw[key]["status"] == "ok":
            assert len(bw[key]["blocked_seconds"]) == len(bw[key]["write_seconds"])
    comp = doc["compression"]
    assert comp["throughput"]["ratio"] > 1 and comp["throughput"]["compress_aggregate_gib_s"] > 0
    assert set(comp["regimes"]) == {"disk", "tmpfs"} and "rule" in comp
    small = doc["small_variables"]["libraries"]
    assert small["ckptio mpiio"]["status"] == "ok" and small["ckptio mpiio"]["write"]["median"] > 0
    assert doc["checksum"]["seconds_all_ranks"]["median"] > 0
    assert doc["targets"] and all("measured" in t for t in doc["targets"])
    # the restart is reported with and without out= arrays, with cold and hot phases in wall and CPU time
    for key in ("ckptio-mpiio-out", "ckptio-mpiio-out-aligned"):
        assert bw[key]["status"] == "ok" and bw[key]["verified"], key
    for key in ("ckptio-mpiio", "ckptio-mpiio-out", "ckptio-mpiio-out-aligned"):
        for phases in ("read_phases_median", "read_hot_phases_median"):
            assert {"data", "io", "exchange", "hidden", "cpu_data", "cpu_io"} <= set(bw[key][phases]), (key, phases)
    restart = [t["target"] for t in doc["targets"] if t["target"].startswith("restart read")]
    assert len(restart) == 6 and sum("out=" in t for t in restart) == 4 and sum("(hot)" in t for t in restart) == 3
    table = (results / "results.md").read_text()
    assert "| case | write GiB/s" in table and "ckptio mpiio" in table
    assert "## Time blocked per checkpoint" in table and "## Compression break-even" in table
    assert not any(scratch.iterdir()), "the scratch directory was not cleaned up"
