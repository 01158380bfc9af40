"""Run tests/faults/leave_job.py under mpirun (with a hard time limit) and index what its ranks reported."""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/ (mpi_helpers)

from mpi_helpers import run_mpi  # noqa: E402

JOB = HERE / "leave_job.py"
# the phases before which leave_job.py sends SIGINT to one rank (suffixes of ckptio.coord phase names; a
# trailing space: a prefix)
# the engine's phases (ckptio/engine/write.py, commit.py), in order; "write data" and the document and mark writes
# are the backend's steps, run through coord.count_ranks (ckptio/engine/steps.py)
WRITE_PHASES = ("declare (arguments)", ": declare", "create file", "reserve space", "write data", "build index",
                "write the metadata document", ": close", "check and rename")
READ_PHASES = ("open ", "requests", "allocate", "open file on aggregators", "round 1 of 1", "close ")


@dataclass
class LeaveRun:
    nprocs: int
    outcomes: dict[str, dict[int, dict]]  # case -> rank -> outcome
    files: dict[str, list[str]]  # case -> the directory's listing after it
    order: list[str]  # cases in the order they ran
    log: str

    def new_files(self, case: str) -> set[str]:
        """Names that appeared in the directory during ``case``."""
        i = self.order.index(case)
        before = set(self.files[self.order[i - 1]]) if i else set()
        return set(self.files[case]) - before


def run_leave_job(group: str, workdir: Path, backend: str, nprocs: int, timeout: float = 300,
                  env: dict[str, str] | None = None) -> LeaveRun:
    """``mpirun -n nprocs python leave_job.py GROUP workdir backend``; a hang fails the test (timeout). Ranks
    that end with sys.exit(code) make mpirun's own status non-zero, so the status is not checked here: every
    rank must instead have reported every case and reached the end of the program."""
    results = Path(tempfile.mkdtemp(prefix="leave-records-", dir=workdir.parent))
    proc = run_mpi(nprocs, [str(JOB), group, str(workdir), backend], timeout=timeout, check=False,
                   env={**(env or {}), "LEAVE_JOB_RESULTS": str(results)})
    outcomes: dict[str, dict[int, dict]] = {}
    files: dict[str, list[str]] = {}
    order: list[str] = []
    done = set()
    records = [line for path in sorted(results.glob("rank*.records")) for line in path.read_text().splitlines()]
    for line in records:
        kind, _, payload = line.partition(" ")
        if kind == "OUTCOME":
            o = json.loads(payload)
            outcomes.setdefault(o["case"], {})[o["rank"]] = o
        elif kind == "FILES":
            o = json.loads(payload)
            files[o["case"]] = o["files"]
            order.append(o["case"])
        elif kind == "DONE":
            done.add(json.loads(payload)["rank"])
    log = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-6000:]}\nstderr:\n{proc.stderr[-6000:]}"
    assert done == set(range(nprocs)), f"not every rank reached the end of the job\n{log}"
    return LeaveRun(nprocs, outcomes, files, order, log)
