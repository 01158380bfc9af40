"""Smoke test of the benchmark suite: ``mpirun -n 2 python -m benchmarks.run --quick`` runs every section and writes
a complete results document (JSON sections, positive bandwidths, verified restarts), the Markdown table and
issue 29's goal table. It neither builds FLASH-IO nor needs IOR (``--ior none``: the built-in MPI-IO reference
of IOR's pattern; the FLASH-IO case is reported skipped and every backend still writes its shape, scaled down).

Behaviour only: nothing here asserts on elapsed time or on a bandwidth figure (the benchmark itself reports
those); the generous mpirun timeout only turns a deadlock into a failure."""

from __future__ import annotations

import json

import pytest
from mpi_helpers import run_mpi

pytestmark = pytest.mark.mpi

SECTIONS = ("config", "environment", "modes", "bandwidth", "page_cache", "overhead", "compression", "small_variables",
            "checksum", "plan", "targets", "flash", "restart", "verify", "goals")


def test_quick_benchmark_run(tmp_path):
    scratch, results = tmp_path / "scratch", tmp_path / "results"
    run_mpi(2, ["-m", "benchmarks.run", "--quick", "--ior", "none", "--outdir", str(scratch),
                "--results", str(results)], timeout=420)
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
        assert entry["group"] in ("raw", "reference") or entry.get("verified"), entry["label"]
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
    # the storage reference without IOR: the built-in MPI-IO reference, independent and collective
    for key in ("mpiio-ref-independent", "mpiio-ref-collective"):
        assert bw[key]["status"] == "ok" and bw[key]["write_time"]["mean_s"] > 0, key
    assert "built-in MPI-IO reference" in doc["config"]["reference"]
    flash = doc["flash"]["by_ranks"]["2"]
    assert flash["blocks_per_rank"] == [8, 9]  # FLASH-IO's 0.8 * maxblocks + rank % 3, scaled down for --quick
    assert flash["cases"]["flash-io"]["status"] == "skipped" and "FLASH-IO" in flash["cases"]["flash-io"]["reason"]
    for key in ("ckptio-mpiio", "mpiio-ref-independent"):
        entry = flash["cases"][key]
        assert entry["status"] == "ok" and entry["write_time"]["n"] == 1 and entry["write_time"]["mean_s"] > 0, key
    assert flash["cases"]["ckptio-mpiio"]["verified"]
    restart = doc["restart"]["readers"]["1"]
    for key in ("ckptio-alloc", "ckptio-out", "h5py", "reference"):
        if restart[key]["status"] == "skipped":
            continue
        assert restart[key]["status"] == "ok", (key, restart[key].get("reason"))
        assert restart[key]["read_cold_time"]["mean_s"] > 0 and restart[key]["read_hot_time"]["mean_s"] > 0, key
        assert key == "reference" or restart[key]["verified"], key
        assert max(restart[key]["resident_before_cold_read"]) < 0.05, key
    assert {"io", "exchange", "plan"} <= set(restart["ckptio-alloc"]["cold_phases_mean"])
    # every file was read once, untimed, before the rounds (benchmarks.restart.warm_up)
    files = [k for k, f in doc["restart"]["files"].items() if f["status"] == "ok"]
    assert files and sorted(doc["restart"]["warm_up_seconds"]) == sorted(files)
    verify = doc["verify"]
    assert verify["status"] == "ok", verify.get("reason")
    assert verify["inspect_verify_time"]["mean_s"] > 0 and verify["sequential_read_time"]["mean_s"] > 0
    assert verify["parallel"]["status"] == "ok" or verify["parallel"]["reason"]
    goals = {g["goal"] for g in doc["goals"]}
    for goal in ("native write >= 0.9x IOR MPI-IO independent", "native write >= every peer",
                 "allocating restart >= 0.9x the out= restart",
                 "allocating restart >= h5py's allocating collective read",
                 "cold restart (allocating) >= 0.9x IOR independent read of the same bytes",
                 "inspect --verify >= 0.9x a cold sequential read in one process",
                 "metadata per variable, mpiio write (us)"):
        assert goal in goals, goal
    assert all(g["met"] in (True, False, None) and "threshold" in g for g in doc["goals"])
    table = (results / "results.md").read_text()
    assert "## Issue 29 goals (this run)" in table and "## FLASH-IO's checkpoint shape" in table
    assert "| case | write GiB/s" in table and "ckptio mpiio" in table
    assert "## Time blocked per checkpoint" in table and "## Compression break-even" in table
    assert not any(scratch.iterdir()), "the scratch directory was not cleaned up"


def test_ior_summary_and_pattern():
    """IOR's summary table is read by its column names (later versions add columns), and the pattern splits over
    every rank count of the run (IOR gives every task the same -b)."""
    from benchmarks.ior import ior_argv, parse_summary, pattern_for

    text = """Summary of all tests:
Operation   Max(MiB)   Min(MiB)  Mean(MiB)     StdDev   Max(OPs)   Min(OPs)  Mean(OPs)     StdDev    Mean(s) Test#
write         120.50     100.25     110.00       5.00     120.50     100.25     110.00       5.00    1.50000     0
read         1501.79    1501.79    1501.79       0.00    1501.79    1501.79    1501.79       0.00    0.00533     0
Finished            : Fri Nov 27 00:05:16 2026
"""
    got = parse_summary(text)
    assert got == {"write": {"mean_s": 1.5, "mean_mib_s": 110.0}, "read": {"mean_s": 0.00533, "mean_mib_s": 1501.79}}
    with pytest.raises(Exception, match="Summary of all tests"):
        parse_summary("IOR-4.0.0: MPI Coordinated Test of Parallel I/O\nERROR: ...")
    pattern = pattern_for(nblocks=8192, nvars=8, task_counts=[4, 3, 2], transfer_cap=1 << 20)
    assert pattern.segments == 8 and pattern.segment_bytes == 8184 * 32768  # 8192 rounded down to 12's multiple
    for tasks in (4, 3, 2):
        assert pattern.block(tasks) * tasks == pattern.segment_bytes
        assert pattern.block(tasks) % pattern.transfer(tasks) == 0
    argv = ior_argv("ior", "write", pattern, 4, "/x", collective=True)
    assert argv[:4] == ["ior", "-a", "MPIIO", "-w"] and "-e" in argv and "-c" in argv and "-k" in argv


def test_flash_io_shape():
    """The data set the FLASH-IO comparison writes is FLASH-IO's checkpoint: 80 + rank % 3 blocks per rank, 24
    unknowns of 16^3 float64 and the tree variables with their types (checked against FLASH-IO's own file when
    make bench runs it)."""
    from benchmarks.flashio import block_counts, expected_header, flash_dataset

    assert block_counts(4) == [80, 81, 82, 80]
    data = flash_dataset(2, 1)
    assert (data.first, data.count, data.nblocks) == (80, 81, 161)
    header = expected_header(data)
    assert header["dens"] == ((161, 16, 16, 16), "float64") and header["f13_"] == ((161, 16, 16, 16), "float64")
    assert header["gid"] == ((161, 15), "int32") and header["bndbox"] == ((161, 3, 2), "float64")
    assert len([k for k, (shape, _) in header.items() if shape[1:] == (16, 16, 16)]) == 24 and len(header) == 30
    assert round(data.total_bytes / 2**20, 2) == 120.78  # FLASH-IO's own "I/O amount" on 2 ranks


def test_rounds_change_the_order_of_the_cases():
    """Each round runs every case once, in an order of its own that is the same in every run and on every rank
    (benchmarks.common.round_order, used by the bandwidth, write, FLASH-IO, restart and verification sections):
    over make bench's 6 rounds of 10 cases, no case always follows the same one."""
    from benchmarks.common import round_order

    cases = [f"case{i}" for i in range(10)]
    orders = [round_order(cases, rep) for rep in range(6)]
    assert all(sorted(o) == cases for o in orders)
    assert orders == [round_order(cases, rep) for rep in range(6)]
    assert len({tuple(o) for o in orders}) == 6
    for case in cases:
        before = {o[o.index(case) - 1] if o.index(case) else None for o in orders}
        assert len(before) > 1, case
    assert round_order([], 3) == []


def test_every_case_gets_even_and_odd_turns_over_each_pair_of_rounds():
    """round_order mirrors the previous round's order in odd rounds, so over rounds 2j and 2j+1 every case stands
    once at an even and once at an odd place of the whole sequence of cases, for any number of cases: on the
    development VM consecutive cold reads alternated between fast and slow, and a case that got the slow turn in
    most rounds lost its ratio to the VM (the first verification benchmark read, then verified, every round)."""
    from benchmarks.common import round_order

    for n in range(1, 13):
        cases = list(range(n))
        sequence = [case for rep in range(6) for case in round_order(cases, rep)]
        for pair in range(3):
            places = {case: [] for case in cases}
            for place in range(2 * pair * n, 2 * (pair + 1) * n):
                places[sequence[place]].append(place % 2)
            assert all(sorted(p) == [0, 1] for p in places.values()), (n, pair, places)
        assert round_order(cases, 3) == round_order(cases, 2)[::-1]
        assert n < 3 or round_order(cases, 0) != round_order(cases, 2)  # even rounds draw a new order


def test_fixed_cost_benchmark_run(tmp_path):
    """``benchmarks.fixed_cost`` on 2 ranks, a tiny checkpoint, one round: a row for every writer, ckptio's ratio
    to each library it wraps and its phases (no figure checked), and the scratch directory left as it was
    (the writers' files removed, a file of the user's kept)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "mine.dat").write_bytes(b"not the benchmark's")  # a file of the user's: never removed
    proc = run_mpi(2, ["-m", "benchmarks.fixed_cost", "--rounds", "1", "--maxblocks", "2", "--outdir", str(scratch)],
                   timeout=240)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in proc.stdout.splitlines() if line.startswith("| direct-") or line.startswith("| ckptio-")}
    assert set(rows) == {"direct-pnetcdf", "direct-h5py", "ckptio-pnetcdf", "ckptio-hdf5", "ckptio-mpiio"}, \
        proc.stdout
    for key, (mean, median, ratio, phases) in rows.items():
        assert float(mean) > 0 and float(median) > 0, (key, rows[key])
        if key in ("ckptio-pnetcdf", "ckptio-hdf5"):
            assert float(ratio) > 0, (key, rows[key])
        else:
            assert ratio == "", (key, rows[key])
        assert (len(phases.split(" / ")) == 5) == key.startswith("ckptio"), (key, rows[key])
    assert sorted(p.name for p in scratch.iterdir()) == ["mine.dat"]
