"""The restart control plane at scale (issue 13): the scale harness (:mod:`ckptio.tools.scale`) and ``ckptio plan``
at 1,000 / 7,620 / 30,000 / 100,000 ranks of the FLASH-like job (24 variables, 189 GiB), one table.

One process, no MPI. Every measurement runs in a fresh subprocess (so the growth of resident memory that the
harness reports for rank 0's open is not hidden by memory an earlier size freed), one size after the other:

* ``harness``: :func:`ckptio.tools.scale.restart_control_plane` at the full size, including rank 0's parse of the
  whole (format-2) metadata document, unless ``--open-max-ranks`` caps it (then rank 0's open is extrapolated,
  as ``ckptio plan`` does above 250,000 ranks);
* ``plan``: ``ckptio plan --ranks N --bytes 189G --ranks-per-node 16 --json`` as a user runs it (its own
  harness capped at the default ``--open-max-ranks``): wall time and peak RSS from ``wait4``.

    python -m benchmarks.control_plane [--ranks 1000 7620 30000 100000] [--open-max-ranks N] [--json FILE]

Prints a Markdown table and each issue-13 goal as met or missed with its figure (``benchmarks/README.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any

GOALS = {  # issue 13: restart control plane per rank, (seconds, MiB); an aggregator may use 4x
    7620: (0.5, 64),
    100_000: (2.0, 256),
}
WRITE_GOALS = {7620: 2.0, 100_000: 10.0}  # issue 13: rank 0's write control plane, seconds
WRITE_OTHER_GOAL = (0.2, 32)  # every other rank: seconds, MiB
WRITE_HARNESS = ("import json, sys; from ckptio.tools import scale; "
                 "print(json.dumps(scale.write_control_plane(int(sys.argv[1]), int(sys.argv[2]))))")
HARNESS = ("import json, sys; from ckptio.tools import scale; "
           "print(json.dumps(scale.restart_control_plane(int(sys.argv[1]), int(sys.argv[2]), "
           "open_max_ranks=(int(sys.argv[3]) or None))))")


def _run_measured(cmd: list[str], timeout: float) -> tuple[str, float, float]:
    """Run ``cmd``: its stdout, wall seconds and the child's peak RSS in MiB (``wait4``, as ``/usr/bin/time``)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    chunks = []
    while True:
        data = proc.stdout.read(1 << 20)
        if not data:
            break
        chunks.append(data)
    _, status, rusage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode or wall > timeout:
        raise RuntimeError(f"{' '.join(cmd[:6])}: exit {proc.returncode} after {wall:.0f} s: "
                           f"{proc.stderr.read().decode()[-2000:]}")
    return b"".join(chunks).decode(), wall, rusage.ru_maxrss / 1024


def measure(ranks: int, total: int, open_max_ranks: int | None, timeout: float) -> dict[str, Any]:
    out, wall, rss = _run_measured([sys.executable, "-c", HARNESS, str(ranks), str(total), str(open_max_ranks or 0)],
                                   timeout)
    harness = json.loads(out) | {"process_seconds": round(wall, 1), "process_peak_MiB": round(rss)}
    out, wall, rss = _run_measured([sys.executable, "-m", "ckptio", "plan", "--ranks", str(ranks), "--bytes",
                                    str(total), "--ranks-per-node", "16", "--json"], timeout)
    plan = json.loads(out)
    return {"ranks": ranks, "harness": harness,
            "plan": {"seconds": round(wall, 1), "peak_MiB": round(rss),
                     "rank0_open_extrapolated": plan["control_plane"]["rank0_open"]["extrapolated"]}}


def measure_write(ranks: int, total: int, timeout: float) -> dict[str, Any]:
    out, wall, rss = _run_measured([sys.executable, "-c", WRITE_HARNESS, str(ranks), str(total)], timeout)
    return json.loads(out) | {"process_seconds": round(wall, 1), "process_peak_MiB": round(rss)}


def write_table(rows: list[dict[str, Any]]) -> str:
    def cell(m: dict[str, Any]) -> str:
        return f"{m['seconds']:.3f} s / {m['peak_MiB']:.1f} MiB"

    out = ["| ranks | blocks | rank 0 (plan, shares, document) | any other rank | every other rank receives | "
           "metadata document (rank 0) | harness process |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['ranks']:,} | {r['blocks']:,} | {cell(r['rank0'])} | {cell(r['any_other_rank'])} | "
                   f"{r['every_rank_receives_bytes'] / 1024:.1f} KiB | {r['metadata_document_bytes'] / 2**20:.1f} MiB "
                   f"| {r['process_seconds']} s / {r['process_peak_MiB']} MiB |")
    return "\n".join(out)


def write_goals(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in rows:
        other = r["any_other_rank"]
        ok = other["seconds"] <= WRITE_OTHER_GOAL[0] and other["peak_MiB"] <= WRITE_OTHER_GOAL[1]
        lines.append(f"- write, {r['ranks']:,} ranks, any other rank (goal <= {WRITE_OTHER_GOAL[0]} s, <= "
                     f"{WRITE_OTHER_GOAL[1]} MiB): **{'met' if ok else 'missed'}**, {other['seconds']:.4f} s, "
                     f"{other['peak_MiB']:.2f} MiB, receives {r['every_rank_receives_bytes'] / 1024:.1f} KiB")
        if r["ranks"] in WRITE_GOALS:
            goal = WRITE_GOALS[r["ranks"]]
            sec = r["rank0"]["seconds"]
            lines.append(f"- write, {r['ranks']:,} ranks, rank 0 (goal <= {goal:g} s): "
                         f"**{'met' if sec <= goal else 'missed'}**, {sec:.2f} s")
    return lines


def goals(rows: list[dict[str, Any]]) -> list[str]:
    """Each issue-13 goal met or missed, with its figure."""
    lines = []
    for row in rows:
        if row["ranks"] not in GOALS:
            continue
        sec, mib = GOALS[row["ranks"]]
        h = row["harness"]
        for what, key, factor in (("any rank, per read", "any_rank_per_read", 1),
                                  ("aggregator, per read", "aggregator_per_read", 4),
                                  ("rank 0 (an aggregator), at open", "rank0_open", 4)):
            m = h[key]
            ok = m["seconds"] <= sec * factor and m["peak_MiB"] <= mib * factor
            lines.append(f"- {row['ranks']:,} ranks, {what} (goal <= {sec * factor:g} s, <= {mib * factor:g} MiB): "
                         f"**{'met' if ok else 'missed'}**, {m['seconds']:.3f} s, {m['peak_MiB']:.1f} MiB"
                         + (" (extrapolated)" if m.get("extrapolated") else ""))
    for row in rows:
        if row["ranks"] == 100_000:
            p = row["plan"]
            lines.append(f"- `ckptio plan --ranks 100000 --bytes 189G` (goal <= 60 s): "
                         f"**{'met' if p['seconds'] <= 60 else 'missed'}**, {p['seconds']:.1f} s, {p['peak_MiB']} MiB")
    return lines


def table(rows: list[dict[str, Any]]) -> str:
    def cell(m: dict[str, Any]) -> str:
        return f"{m['seconds']:.3f} s / {m['peak_MiB']:.1f} MiB" + (" (extrap.)" if m.get("extrapolated") else "")

    out = ["| ranks | blocks | rank 0 at open | one aggregator per read | any other rank per read | "
           "broadcast to every rank at open | an aggregator's rows | metadata document | harness process | "
           "`ckptio plan` wall / RSS |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        h, p = row["harness"], row["plan"]
        out.append(f"| {row['ranks']:,} | {h['blocks']:,} | {cell(h['rank0_open'])} | {cell(h['aggregator_per_read'])} "
                   f"({h['ranks_routed_to_aggregator']} ranks' requests, {h['rounds']} rounds) | "
                   f"{cell(h['any_rank_per_read'])} | {h['broadcast_to_every_rank_bytes'] / 1024:.0f} KiB | "
                   f"{h['aggregator_rows_bytes'] / 2**20:.1f} MiB | {h['metadata_document_bytes'] / 2**20:.0f} MiB | "
                   f"{h['process_seconds']} s / {h['process_peak_MiB']} MiB | {p['seconds']} s / {p['peak_MiB']} MiB |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1000, 7620, 30_000, 100_000])
    parser.add_argument("--bytes", type=int, default=189 << 30)
    parser.add_argument("--open-max-ranks", type=int, default=None,
                        help="cap rank 0's measured parse at N ranks (default: parse the whole document)")
    parser.add_argument("--write-ranks", type=int, nargs="*", default=[1000, 7620, 30_000],
                        help="sizes for the write control plane (its harness builds every rank's declarations in one "
                             "process: 100,000 ranks need ~3 GB and ~15 min here)")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    header = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, {os.cpu_count()} cores, "
              f"Python {platform.python_version()}, load average before {load[0]:.2f}")
    rows = []
    for n in args.ranks:
        rows.append(measure(n, args.bytes, args.open_max_ranks, args.timeout))
        print(f"{n} ranks done ({rows[-1]['harness']['process_seconds']} s)", file=sys.stderr)
    write_rows = []
    for n in args.write_ranks:
        write_rows.append(measure_write(n, args.bytes, args.timeout))
        print(f"{n} ranks (write) done ({write_rows[-1]['process_seconds']} s)", file=sys.stderr)
    load_after = os.getloadavg()[0]
    print(f"{header}, after {load_after:.2f}\n")
    print(table(rows))
    print()
    print("\n".join(goals(rows)))
    if write_rows:
        print("\nWrite control plane (native format):\n")
        print(write_table(write_rows))
        print()
        print("\n".join(write_goals(write_rows)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"when": header, "load_after": load_after, "rows": rows, "write_rows": write_rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
