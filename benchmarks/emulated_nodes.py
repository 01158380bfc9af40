"""The command line of the benchmarks that run on emulated nodes (staged_blocked, multilevel): ``--nodes 2,2``
starts the job itself on emulated nodes (tests/multinode.py), which runs the module again with ``--run`` under
mpirun; rank 0's ``RESULT`` line comes back as one JSON line with the layout and the caveat that emulated nodes
share this machine's cores and disk."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from ckptio.tools.simulate import parse_size

Measure = Callable[[int, str, str, int], "dict | None"]  # (bytes, outdir, stage, repeats) -> rank 0's result


def main(module: str, measure: Measure, description: str, *, size: str, stage: str, nodes_example: str,
         argv: list[str] | None = None) -> int:
    """Parse the shared options; be the MPI program (``--run``) or start it on emulated nodes (``--nodes``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--size", default=size, help="checkpoint size (all ranks), e.g. 256M, 1G")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--outdir", required=True, help="the parallel file system (here: a disk directory)")
    parser.add_argument("--stage", default=stage, help="stage_dir (node-local tmpfs)")
    parser.add_argument("--nodes", help=f"emulated nodes, ranks per node: e.g. {nodes_example} (starts the job itself)")
    parser.add_argument("--run", action="store_true", help="be the MPI program (under mpirun)")
    args = parser.parse_args(argv)
    if args.run:
        out = measure(parse_size(args.size), args.outdir, args.stage, args.repeats)
        if out is not None:
            print("RESULT " + json.dumps(out), flush=True)
        return 0
    if not args.nodes:
        parser.error("give --nodes (emulated) or run under mpirun with --run")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import multinode

    layout = tuple(int(n) for n in args.nodes.split(","))
    root = Path(args.outdir) / "nodes-root"
    os.makedirs(args.outdir, exist_ok=True)
    try:
        proc = multinode.run_nodes(layout, [sys.executable, "-m", module, "--run", "--size", args.size,
                                            "--repeats", str(args.repeats), "--outdir", args.outdir,
                                            "--stage", args.stage], root, timeout=1800)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = {**json.loads(line[7:]), "nodes": list(layout),
                      "note": "emulated nodes share this machine's cores and disk"}
            print(json.dumps(result))
    return 0
