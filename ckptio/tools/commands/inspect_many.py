"""``ckptio inspect PATH...``: several checkpoints in one call, and each variable's min/max under ``--verify``.

The single-checkpoint report and its printing stay in :mod:`ckptio.tools.cli` (``inspect_report``, ``_print_inspect``);
this module runs them for every path, adds the ranges and combines the exit statuses (the largest). One process.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from ckptio.errors import CheckpointError
from ckptio.model.inspection import InspectReport
from ckptio.tools.commands.ranges import variable_ranges


def inspect_paths(args: argparse.Namespace, report_of: Callable[[str, bool], tuple[int, InspectReport]],
                  print_report: Callable[[InspectReport, bool], None]) -> int:
    """Inspect every ``args.path``; JSON: one document for one path, a list of them for several."""
    code, reports = 0, []
    for i, path in enumerate(args.path):
        status, report = report_of(path, args.verify)
        if args.verify and status == 0 and not report.has_ranges():  # (inspect_report's verification found them)
            try:
                ranges = variable_ranges(path)
            except CheckpointError as exc:  # verified a moment ago: only a file changing meanwhile gets here
                status = 1
                report.set_status("corrupt", f"reading the values for min/max: {exc}")
                ranges = {}
            report.add_ranges(ranges)
        code = max(code, status)
        if args.json:
            if not args.stats and report.document is not None:
                report.document.show_stats = False
            reports.append(report.to_json())
            continue
        if i:
            print()
        print_report(report, args.stats)
        if args.verify and status == 0:
            _print_ranges(report)
    if args.json:
        json.dump(reports[0] if len(reports) == 1 else reports, sys.stdout, indent=2, sort_keys=True, default=str)
        print()
    return code


def _print_ranges(report: InspectReport) -> None:
    found = report.document.variables if report.document is not None else {}
    variables = {n: v.ranges for n, v in found.items() if v.ranges and "min" in v.ranges}
    if not variables:
        return
    width = max(len(n) for n in variables)
    print(f"values      {'name':<{width}}  {'min':>14} {'max':>14}")
    for name, r in variables.items():
        lo = "-" if r["min"] is None else f"{r['min']:.7g}"
        hi = "-" if r["max"] is None else f"{r['max']:.7g}"
        nan = f"  ({r['nan_count']} NaN)" if r["nan_count"] else ""
        print(f"            {name:<{width}}  {lo:>14} {hi:>14}{nan}")
