"""``mpirun -n N python -m ckptio.verify [--json] PATH...``: ``ckptio inspect --verify`` on N ranks.

The ``ckptio`` command line stays one process (``ckptio inspect --verify`` verifies serially and says how to run
this); this is its parallel form. For each path, collective over ``MPI.COMM_WORLD``: rank 0 reads and checks the
metadata document exactly as ``ckptio inspect`` does (:func:`ckptio.tools.cli.inspect_report`, broadcast to every rank),
then :func:`ckptio.verify.verify_parallel` verifies every block, each restart aggregator its own file domains, with
each variable's min and max from the same pass. Rank 0 prints what ``ckptio inspect --verify`` prints (or the
same JSON document, with ``verified_on``: the ranks and aggregators); every rank returns the same status (0
valid, 1 corrupt, incomplete or of a newer version, 2 usage error or not a checkpoint; several paths: the
highest).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ckptio.errors import CheckpointError, CorruptCheckpointError, IncompleteCheckpointError
from ckptio.model.inspection import InspectReport
from ckptio.model.units import argparse_count


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ckptio.verify",
                                description="Verify checkpoints in parallel: run under mpirun; each restart "
                                            "aggregator reads and checks its own file domains.")
    p.add_argument("path", nargs="+", help="one or more checkpoint files")
    p.add_argument("--json", action="store_true", help="print one JSON document (a list for several paths)")
    p.add_argument("--aggregators", type=argparse_count("--aggregators"), default=None,
                   help="ranks that read (default: as a restart chooses them, at most the file's stripe count)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Collective over ``MPI.COMM_WORLD`` (see the module docstring); the exit status, the same on every rank."""
    from ckptio.coord.mpi import MPI

    try:
        args = parse_args(argv)
    except SystemExit as exc:  # the same on every rank: every rank parses the same arguments
        return 2 if exc.code not in (0, None) else 0
    comm = MPI.COMM_WORLD
    code, reports = 0, []
    for i, path in enumerate(args.path):
        status, report = verify_one(comm, path, args.aggregators)
        code = max(code, status)
        if comm.Get_rank() != 0:
            continue
        if args.json:
            reports.append(report.to_json())
            continue
        if i:
            print()
        print_report(report)
    if comm.Get_rank() == 0 and args.json:
        json.dump(reports[0] if len(reports) == 1 else reports, sys.stdout, indent=2, sort_keys=True, default=str)
        print()
    sys.stdout.flush()
    return code


def verify_one(comm, path: str, aggregators: int | None) -> tuple[int, InspectReport]:
    """Collective over ``comm``: ``(exit status, inspect report)`` of one path, the same on every rank."""
    from ckptio import coord
    from ckptio.tools.cli import EXIT_BAD, EXIT_USAGE, inspect_checkpoint
    from ckptio.verify import verify_parallel

    status, report = coord.bcast_from_root(comm, f"inspect {path}", lambda: inspect_checkpoint(path, False))
    if report.document is not None:
        report.document.show_stats = False
    if status != 0:
        return status, report
    try:
        checked = verify_parallel(path, comm, aggregators, ranges=True)
    except CorruptCheckpointError as exc:  # (agreed: the same on every rank, as every error below)
        report.set_status("corrupt", str(exc))
        report.verified, report.problems = True, [{"message": str(exc)}]
        return EXIT_BAD, report
    except IncompleteCheckpointError as exc:
        report.set_status("incomplete", str(exc))
        return EXIT_BAD, report
    except CheckpointError as exc:  # the file went away, could not be read, or is no longer a checkpoint
        report.set_status("unreadable", str(exc))
        return EXIT_USAGE, report
    report.verified, report.problems = True, [p.to_json() for p in checked.problems]
    report.verified_on = {"ranks": comm.Get_size(), "aggregators": checked.aggregators}
    if checked.problems:
        report.set_status("corrupt", f"{len(checked.problems)} block(s) failed verification: "
                                     f"{checked.problems[0]}")
        return EXIT_BAD, report
    report.add_ranges(checked.ranges)
    return 0, report


def print_report(report: InspectReport) -> None:
    """Rank 0: the text ``ckptio inspect --verify`` prints for ``report``."""
    from ckptio.tools.cli import _print_inspect
    from ckptio.tools.commands.inspect_many import _print_ranges

    _print_inspect(report, False)
    if report.status == "complete":
        _print_ranges(report)
