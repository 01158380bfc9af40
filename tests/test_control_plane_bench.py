"""``benchmarks/control_plane.py``: the table and the issue-13 verdicts it prints (small sizes; never a speed)."""

from benchmarks import control_plane


def _row(ranks, any_s, any_mib, agg_s, agg_mib, open_s, open_mib, plan_s):
    m = lambda s, mib: {"seconds": s, "peak_MiB": mib}  # noqa: E731
    return {"ranks": ranks, "plan": {"seconds": plan_s, "peak_MiB": 100, "rank0_open_extrapolated": True},
            "harness": {"any_rank_per_read": m(any_s, any_mib), "aggregator_per_read": m(agg_s, agg_mib),
                        "rank0_open": m(open_s, open_mib) | {"extrapolated": ranks > 7620}}}


def test_goals_are_marked_met_or_missed_with_their_figures():
    lines = control_plane.goals([_row(7620, 0.4, 64, 1.9, 200, 4.0, 150, 9),
                                 _row(100_000, 0.01, 3, 8.5, 50, 60, 2700, 61)])
    assert lines[0].startswith("- 7,620 ranks, any rank, per read (goal <= 0.5 s, <= 64 MiB): **met**, 0.400 s")
    assert "aggregator, per read (goal <= 2 s, <= 256 MiB): **met**" in lines[1]
    assert "rank 0 (an aggregator), at open (goal <= 2 s, <= 256 MiB): **missed**, 4.000 s, 150.0 MiB" in lines[2]
    assert "100,000 ranks, aggregator, per read (goal <= 8 s, <= 1024 MiB): **missed**, 8.500 s" in lines[4]
    assert lines[5].endswith("**missed**, 60.000 s, 2700.0 MiB (extrapolated)")
    assert lines[6] == "- `ckptio plan --ranks 100000 --bytes 189G` (goal <= 60 s): **missed**, 61.0 s, 100 MiB"


def test_the_benchmark_runs_the_harness_and_ckptio_plan(capsys):
    assert control_plane.main(["--ranks", "120", "200", "--bytes", str(1 << 30), "--open-max-ranks", "150",
                               "--write-ranks", "60"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 1") or line.startswith("| 2")]
    assert [r.split("|")[1].strip() for r in rows] == ["120", "200"]
    assert "Write control plane" in out and "| 60 | 1,440 |" in out, out
    assert "- write, 60 ranks, any other rank (goal <= 0.2 s, <= 32 MiB): **met**" in out, out
    assert "(extrap.)" not in rows[0] and "(extrap.)" in rows[1]  # 200 > --open-max-ranks
