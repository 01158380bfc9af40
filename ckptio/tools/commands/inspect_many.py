"""``ckptio inspect PATH...``: several checkpoints in one call, and each variable's min/max under ``--verify``.

The single-checkpoint report and its printing stay in :mod:`ckptio.tools.cli` (``inspect_report``, ``_print_inspect``);
this module runs them for every path, adds the ranges and combines the exit statuses (the largest). One process.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from ckptio.errors import CheckpointError
from ckptio.tools.commands.ranges import variable_ranges


def inspect_paths(args: argparse.Namespace, report_of: Callable[[str, bool], tuple[int, dict[str, Any]]],
                  print_report: Callable[[dict[str, Any], bool], None]) -> int:
    """Inspect every ``args.path``; JSON: one document for one path, a list of them for several."""
    code, reports = 0, []
    for i, path in enumerate(args.path):
        status, report = report_of(path, args.verify)
        if args.verify and status == 0 and not _has_ranges(report):  # (inspect_report's verification found them)
            try:
                ranges = variable_ranges(path)
            except CheckpointError as exc:  # verified a moment ago: only a file changing meanwhile gets here
                status = 1
                report.update(status="corrupt", error=f"reading the values for min/max: {exc}")
                ranges = {}
            for name, r in ranges.items():
                report["variables"][name].update(r)
        code = max(code, status)
        if args.json:
            if not args.stats:
                report.pop("stats", None)
            reports.append(report)
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


def _has_ranges(report: dict[str, Any]) -> bool:
    """Whether every integer and float variable has its min/max already (from the verification's own pass)."""
    import numpy as np

    return all("min" in v for v in report.get("variables", {}).values() if np.dtype(v["dtype"]).kind in "iuf")


def _print_ranges(report: dict[str, Any]) -> None:
    variables = {n: v for n, v in report.get("variables", {}).items() if "min" in v}
    if not variables:
        return
    width = max(len(n) for n in variables)
    print(f"values      {'name':<{width}}  {'min':>14} {'max':>14}")
    for name, v in variables.items():
        lo = "-" if v["min"] is None else f"{v['min']:.7g}"
        hi = "-" if v["max"] is None else f"{v['max']:.7g}"
        nan = f"  ({v['nan_count']} NaN)" if v["nan_count"] else ""
        print(f"            {name:<{width}}  {lo:>14} {hi:>14}{nan}")
