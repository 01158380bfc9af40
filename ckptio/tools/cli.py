"""``ckptio`` command line: ``inspect`` checkpoints, ``plan`` a hypothetical job's I/O, and the serial tools of
:mod:`ckptio.tools.commands` (``ls``, ``diff``, ``dump``, ``convert``). Every command runs as one process, no mpirun.

Exit status of ``inspect``: 0 valid, 1 corrupt, incomplete or of a newer format version than this ckptio
(the message names the variable and block, or both versions), 2 usage error or file not found / status "not a
ckptio checkpoint" (a plain HDF5 or netCDF file, a file of another program, a FIFO or other non-regular file:
never opened for reading, so it cannot block). With several paths, each is reported and the status is the
highest of theirs. A closed standard output (``ckptio inspect --json ... | head -1``) ends any command quietly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ckptio.model.inspection import DocumentSummary, InspectReport
from ckptio.model.records import LayoutRecord
from ckptio.model.units import argparse_count, argparse_size, format_bytes

EXIT_OK, EXIT_BAD, EXIT_USAGE = 0, 1, 2
# The status of any file ckptio did not write (a plain HDF5 or netCDF file, a FIFO, anything else): the same words
# in inspect (exit 2: it cannot be inspected) and ls (listed when its name has a step; never "corrupt", exit 1).
NOT_CKPTIO = "not a ckptio checkpoint"
EXIT_CLOSED_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a command its pipe reader left
EXIT_CODES = """exit status (every command, like h5diff):
  0  success: valid / identical (within --rtol/--atol) / printed / converted and checked
  1  differences (diff), or a checkpoint is corrupt, incomplete, of a newer format version or rewritten by
     another tool (h5repack, a netCDF header grown; inspect, ls, dump, the SRC of convert)
  2  error: usage, missing file, not a checkpoint, unknown variable, bad slice, DST exists, a damaged
     checkpoint given to diff (it cannot be compared)
  141  the reader of standard output left (`| head`): output stopped quietly, as on SIGPIPE"""


def inspect_report(path: str, verify: bool) -> tuple[int, dict[str, Any]]:
    """Build the inspect document (the same fields for every backend, see :mod:`ckptio.model.inspection`) and the
    exit status."""
    code, report = inspect_checkpoint(path, verify)
    return code, report.to_json()


def inspect_checkpoint(path: str, verify: bool) -> tuple[int, InspectReport]:
    """:func:`inspect_report`, typed: the exit status and the :class:`~ckptio.model.inspection.InspectReport`."""
    from ckptio.backends import detect_backend
    from ckptio.errors import (
        CapabilityError,
        CheckpointError,
        CorruptCheckpointError,
        FormatVersionError,
        IncompleteCheckpointError,
        RewrittenCheckpointError,
        UnknownFormatError,
    )
    from ckptio.verify import verify_checkpoint

    report = InspectReport(path)
    if not os.path.lexists(path):
        report.set_status("missing", f"{path}: no such file")
        return EXIT_USAGE, report
    try:
        backend = detect_backend(path, thorough=True)
    except CorruptCheckpointError as exc:  # no signature, but a damaged checkpoint of the format it names
        report.format = getattr(exc, "backend", None)
        report.set_status("corrupt", str(exc))
        return EXIT_BAD, report
    except UnknownFormatError as exc:  # incl. FIFOs, sockets, devices (never opened for reading)
        report.set_status(NOT_CKPTIO, str(exc))
        return EXIT_USAGE, report
    except OSError as exc:  # e.g. no permission to read it
        report.set_status("unreadable", str(exc))
        return EXIT_USAGE, report
    report.format = backend.name
    try:
        meta = backend.read_document(path)
    except UnknownFormatError as exc:  # the format's container, but not written by ckptio (plain HDF5, netCDF)
        report.set_status(NOT_CKPTIO, str(exc))  # format: the container's (hdf5, pnetcdf)
        return EXIT_USAGE, report
    except CapabilityError as exc:  # a valid structure the built-in reader does not implement: not damage
        report.set_status("unreadable here", str(exc))
        return EXIT_USAGE, report
    except IncompleteCheckpointError as exc:
        report.set_status("incomplete", str(exc))
        return EXIT_BAD, report
    except FormatVersionError as exc:
        report.set_status("unsupported version", str(exc))
        return EXIT_BAD, report
    except RewrittenCheckpointError as exc:  # h5repack'd, a netCDF header grown by an added attribute: not damage
        report.set_status("rewritten", str(exc))
        return EXIT_BAD, report
    except CheckpointError as exc:
        report.set_status("corrupt", str(exc))
        return EXIT_BAD, report
    report.document = DocumentSummary.of(meta)
    report.set_status("complete")
    from ckptio.engine.damage_marks import mark_of

    mark = mark_of(path)
    if mark is not None and not verify:  # what ckptio.latest and ckptio ls go by (outside trial 15)
        report.set_status("corrupt", mark.describe())
        return EXIT_BAD, report
    if verify:
        try:  # each variable's min and max come from the same pass (printed by inspect --verify)
            checked = verify_checkpoint(backend, path, meta, ranges=True)
            problems, ranges = checked.problems, checked.ranges
        except CorruptCheckpointError as exc:
            problems, ranges = [exc], {}
        except IncompleteCheckpointError as exc:
            report.set_status("incomplete", str(exc))
            return EXIT_BAD, report
        if not problems:
            report.add_ranges(ranges)
        report.verified = True
        report.problems = [p.to_json() if hasattr(p, "to_json") else {"message": str(p)} for p in problems]
        if problems:
            report.set_status("corrupt", f"{len(problems)} block(s) failed verification: {problems[0]}")
            return EXIT_BAD, report
        if mark is not None:
            report.set_status("complete", f"verified now, but {mark.describe()}")
    return EXIT_OK, report


def _print_inspect(report: InspectReport, show_stats: bool) -> None:
    out = sys.stdout
    print(f"checkpoint  {report.path}", file=out)
    if report.format is None or report.status in ("missing", NOT_CKPTIO, "unreadable", "unreadable here"):
        print(f"status      {report.status}: {report.error}", file=out)
        return
    doc = report.document
    if doc is None:  # (never "complete" without its document)
        print(f"format      {report.format}", file=out)
        print(f"status      {report.status.upper()}: {report.error}", file=out)
        return
    print(f"format      {report.format} (format version {doc.format_version}, metadata schema "
          f"{doc.schema}), written by ckptio {doc.ckptio_version} on {doc.nprocs} ranks at "
          f"{doc.created}, byte order {doc.byteorder}", file=out)
    status = report.status
    if report.verified and status == "complete":
        status += f" and verified ({doc.checksum} of every block)"
    print(f"status      {status}" + (f": {report.error}" if report.error else ""), file=out)
    if report.verified and report.verified_on is None:  # (the parallel form says how many ranks it used)
        from ckptio.verify import PARALLEL_HINT

        print(f"            in parallel (each restart aggregator its file domains): "
              f"{PARALLEL_HINT.replace('PATH', report.path)}", file=out)
    elif report.verified:
        print(f"            verified on {report.verified_on.get('ranks')} ranks, "
              f"{report.verified_on.get('aggregators')} of them reading", file=out)
    for p in report.problems[:20]:
        print(f"  PROBLEM   {p.get('variable', '')} block {p.get('block')} (rank {p.get('rank')}): "
              f"{p.get('message')}", file=out)
    print("attributes  " + (", ".join(f"{k}={v!r}" for k, v in doc.attrs.items()) or "(none)"), file=out)
    print(f"variables   {len(doc.variables)}", file=out)
    width = max((len(n) for n in doc.variables), default=4)
    print(f"  {'name':<{width}}  {'dtype':<6} {'kind':<8} {'global shape':<22} {'blocks':>6} {'bytes':>12}  stored",
          file=out)
    for name, v in doc.variables.items():
        stored = ("" if v.codec is None else
                  f"{format_bytes(v.stored_nbytes)} ({v.codec}, ratio {v.compression_ratio:.2f})")
        print(f"  {name:<{width}}  {v.dtype:<6} {v.kind:<8} {tuple(v.shape)!s:<22} {v.nblocks:>6} "
              f"{format_bytes(v.nbytes):>12}  {stored}", file=out)
    _print_dims_and_attrs(doc, out)
    layout = doc.layout or LayoutRecord()
    print(f"layout      stripe count {layout.stripe_count}, stripe unit {layout.stripe_unit}", file=out)
    if layout.fs is not None:  # older files: no record (ckptio.engine.fslayout)
        from ckptio.engine.fslayout import show

        print(f"layout got  {show(layout.fs.to_json())}", file=out)
    hints = doc.hints
    print(f"io          {'?' if hints is None else hints.io_component}", file=out)
    requested = {} if hints is None else hints.requested
    effective = {} if hints is None else hints.effective
    print("hints asked " + " ".join(f"{k}={v}" for k, v in sorted(requested.items())), file=out)
    print("hints got   " + (" ".join(f"{k}={v}" for k, v in sorted(effective.items())) or "(none)"), file=out)
    if show_stats:
        from ckptio.tools.commands.stats_view import print_stats

        print_stats({} if doc.stats is None else doc.stats.to_json(), format_bytes, out)


def _print_dims_and_attrs(doc: DocumentSummary, out: Any) -> None:
    """The declared dimensions (name = length) and the dims and attributes of every variable that declared
    either, as ``ncdump -h`` lists them. Variables without them use the default names ``<name>_d0``, ... (one
    summary line instead of one line each; ``--json`` has every variable's ``dims``)."""
    described = {n: v for n, v in doc.variables.items() if v.dims_declared or v.attrs}
    declared: dict[str, int] = {}
    for v in described.values():
        if v.dims_declared:
            for dim, length in zip(v.dims, v.shape, strict=True):
                declared.setdefault(dim, int(length))
    plain = len(doc.variables) - sum(v.dims_declared for v in doc.variables.values())
    note = f"{plain} variable(s) with the default dimension names <name>_d0, <name>_d1, ..." if plain else ""
    parts = [", ".join(f"{k} = {n}" for k, n in declared.items()), note]
    print("dimensions  " + (", ".join(p for p in parts if p) or "(none)"), file=out)
    for name, v in described.items():
        attrs = "  " + ", ".join(f"{k}={a!r}" for k, a in v.attrs.items()) if v.attrs else ""
        print(f"  {name}({', '.join(v.dims)}){attrs}", file=out)


def cmd_inspect(args: argparse.Namespace) -> int:
    """Every path in turn (text: one report after the other; ``--json``: one document, or a list of them for
    several paths), with each variable's min/max under ``--verify``; the exit status is the highest of the paths'.
    A closed stdout is handled by :func:`main`."""
    from ckptio.tools.commands.inspect_many import inspect_paths

    return inspect_paths(args, inspect_checkpoint, _print_inspect)


def _silence_stdout() -> None:
    """The reader of our stdout left (``| head``): send what is still buffered to /dev/null, so neither this
    command nor the interpreter's exit prints a BrokenPipeError traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


OPEN_MAX_RANKS = 250_000  # schema 2: rank 0 opens 100,000 ranks (2.4 M blocks) in ~5 s and < 1 GiB here


MAX_MODEL_PIECES = 1 << 27  # ~134 million stripe-size pieces: 128 TiB at 1 MiB stripes, a few GB of model


def cmd_plan(args: argparse.Namespace) -> int:
    from ckptio.tools.simulate import PlanScenario, format_comparison, parse_size, simulate

    if args.directory:  # the real layout of the directory where ckptio would not set its own (ckptio.engine.fslayout)
        from ckptio.engine.fslayout import planned_layout

        count, unit, source = planned_layout(args.directory, args.stripe_count or min(args.ranks, 80),
                                             parse_size(args.stripe_size or "1M"))
        args.stripe_count, args.stripe_size = args.stripe_count or count, args.stripe_size or unit
        print(f"ckptio plan: stripe count {args.stripe_count}, stripe size {args.stripe_size}: {source}",
              file=sys.stderr)
    args.stripe_size = args.stripe_size or "1M"
    scenario = PlanScenario.from_args(args)
    pieces = scenario.nbytes // scenario.stripe_size
    if pieces > MAX_MODEL_PIECES:  # the OST model handles every stripe-size piece of the file (1P: 10^9 of them)
        print(f"ckptio plan: error: --bytes / --stripe-size is {pieces:,} stripe-size pieces; the model handles at "
              f"most {MAX_MODEL_PIECES:,} (raise --stripe-size or lower --bytes)", file=sys.stderr)
        return 2
    control = None
    if not args.no_control_plane:  # first: rank 0's open is measured by the RSS it adds to a fresh process
        from ckptio.tools.scale import restart_control_plane

        control = restart_control_plane(scenario.ranks, scenario.nbytes, scenario.variables,
                                        scenario.ranks_per_node or 1, scenario.stripe_count, scenario.buffer_bytes,
                                        open_max_ranks=args.open_max_ranks, aggregators=scenario.aggregators)
    result = simulate(scenario)
    if control is not None:
        result["control_plane"] = control
    if args.json:
        json.dump(result, sys.stdout, indent=2, sort_keys=True)
        print()
    else:
        print(format_comparison(result))
        if control is not None:
            from ckptio.tools.scale import format_report

            print()
            print(format_report(control))
    if args.plot:
        from ckptio.tools.simulate import plot_ost_load

        plot_ost_load(result, args.plot)
        if not args.json:
            print(f"per-OST load plot written to {args.plot}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    from ckptio.model.meta import __version__
    from ckptio.tools.commands import COMMANDS

    parser = argparse.ArgumentParser(prog="ckptio", description="Inspect, list, compare, dump and convert ckptio "
                                     "checkpoints, and plan their I/O. One process, no mpirun needed.",
                                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"ckptio {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="list and verify checkpoints (any backend, one or more paths)")
    p.add_argument("path", nargs="+", help="one or more checkpoint files")
    p.add_argument("--verify", action="store_true",
                   help="read every block and check every checksum; also show each variable's min and max")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--stats", action="store_true", help="show the write statistics stored in the checkpoint")
    p.set_defaults(func=cmd_inspect)
    q = sub.add_parser("plan", help="run the I/O planner for a hypothetical job (no MPI, no data)")
    q.add_argument("--ranks", type=argparse_count("--ranks"), required=True, help="number of MPI ranks")
    q.add_argument("--bytes", type=argparse_size("--bytes"), required=True, help="checkpoint size, e.g. 189G, 500M")
    q.add_argument("--stripe-count", type=argparse_count("--stripe-count"), default=None,
                   help="Lustre stripe count (default min(ranks, 80))")
    q.add_argument("--stripe-size", default=None, type=argparse_size("--stripe-size"),
                   help="Lustre stripe size (default 1M)")
    q.add_argument("--directory", metavar="DIR", default=None,
                   help="model the layout a checkpoint written in DIR gets: the directory's own (CephFS, Lustre) "
                        "where ckptio does not set one itself; --stripe-count/--stripe-size still win")
    q.add_argument("--variables", type=argparse_count("--variables"), default=24,
                   help="variables per block (FLASH: ~24 unknowns)")
    q.add_argument("--readers", type=argparse_count("--readers"), default=None,
                   help="restart rank count (default: --ranks)")
    q.add_argument("--decomposition", choices=("blocks", "shifted"), default="shifted",
                   help="restart decomposition: 'blocks' = same as the writer's, 'shifted' = an uneven other one")
    q.add_argument("--aggregators", type=argparse_count("--aggregators"), default=None,
                   help="override the aggregator count")
    q.add_argument("--buffer", default="64M", type=argparse_size("--buffer"),
                   help="aggregator buffer per round, e.g. 64M, 64MiB, 1G or bytes (default 64M)")
    q.add_argument("--ranks-per-node", type=argparse_count("--ranks-per-node"), default=None, metavar="N",
                   help="ranks per node (filled node by node): also report aggregators per node and per OST")
    q.add_argument("--no-control-plane", action="store_true",
                   help="skip the scale harness (the measured per-rank restart control-plane cost)")
    q.add_argument("--open-max-ranks", type=argparse_count("--open-max-ranks"), default=OPEN_MAX_RANKS, metavar="N",
                   help="above N ranks, rank 0's parse of the metadata document is measured at N ranks and scaled "
                        f"linearly (default {OPEN_MAX_RANKS:,}: a cheaper run for very large jobs)")
    q.add_argument("--json", action="store_true")
    q.add_argument("--plot", metavar="FILE.png", help="write a per-OST load picture")
    q.set_defaults(func=cmd_plan)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code not in (0, None) else EXIT_OK
    try:
        return int(args.func(args))
    except BrokenPipeError:  # stdout closed early (any command): end quietly, with the shell's status for a
        _silence_stdout()    # process ended by SIGPIPE, never 1 or 2 ("corrupt"/"different", "error")
        return EXIT_CLOSED_PIPE


if __name__ == "__main__":
    sys.exit(main())
