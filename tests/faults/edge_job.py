"""The MPI program of issue 23's minor cases (``mpirun -n P python edge_job.py edges DIR BACKEND``).

Every rank runs every case in turn and records one outcome per case (``fault_job.outcome``: printed and appended
to ``$FAULT_RESULTS/rank<R>.jsonl``), so a test checks that an error reached EVERY rank, and one hang fails the
whole job by its time limit. Most cases go wrong on one rank only (the last), the hard case for a collective
library. The cases (``edge_cases``):

* ``trailing_slash`` / ``trailing_slash_last_rank``: ``ckptio.create("DIR/chk_000010/")``;
* ``name_too_long`` (240 characters), ``name_longest`` (the longest name the limits allow: must work) and
  ``name_one_too_long`` (one more character: refused);
* ``stride0_out``: ``read(..., out=<stride-0 writable view>)`` on the last rank;
* ``missing_file``: ``ckptio.open("DIR/missing")``;
* ``stage_dir_is_a_file`` / ``stage_dir_under_a_file``: ``ckptio.create(..., stage_dir=<a regular file>)``;
* ``open_symlink_loop`` / ``open_dangling_symlink``, ``create_in_symlink_loop_dir`` /
  ``create_in_dangling_symlink_dir``, ``create_over_dangling_symlink``;
* ``*:files``: what each failed case left in DIR (rank 0; must be nothing but the case's own fixtures).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from fault_job import outcome

N = 6  # elements of "x" per rank


def _write(comm, path: str, backend: str, **kwargs: Any) -> str:
    import ckptio

    rank, size = comm.Get_rank(), comm.Get_size()
    with ckptio.create(path, comm, backend=backend, **kwargs) as ck:
        ck.write("x", np.arange(N, dtype=np.float64) + N * rank, offset=(N * rank,), global_shape=(N * size,))
    ck.wait()
    return os.path.basename(path)


def _read_all(comm, path: str) -> list[float]:
    import ckptio

    with ckptio.open(path, comm) as ck:
        return ck.read("x").tolist()


def edge_cases(comm, directory: str, backend: str) -> dict[str, Callable[[], Any]]:
    """name -> a collective function (see the module docstring for what each must do)."""
    import ckptio

    rank, size = comm.Get_rank(), comm.Get_size()
    last = size - 1
    good = os.path.join(directory, "good")
    if rank == 0:
        _fixtures(directory)
    comm.Barrier()
    longest = _longest_name(directory, size)

    def stride0_read() -> Any:
        with ckptio.open(good, comm) as ck:
            n = N * size
            out = np.zeros(n)
            if rank == last:  # every element is the same 8 bytes: a writable stride-0 view
                out = np.lib.stride_tricks.as_strided(np.zeros(1), shape=(n,), strides=(0,), writeable=True)
            ck.read("x", out=out)
            return out.tolist()

    def still_reads() -> Any:
        with ckptio.open(good, comm) as ck:
            out = ckptio.empty(N * size)
            ck.read("x", out=out)
            return out.tolist() == list(range(N * size))

    return {
        "trailing_slash": lambda: _write(comm, os.path.join(directory, "chk_000010") + "/", backend),
        "trailing_slash_last_rank": lambda: _write(comm, os.path.join(directory, "chk_000011")
                                                   + ("/" if rank == last else ""), backend),
        "name_too_long": lambda: _write(comm, os.path.join(directory, "c" * 240), backend),
        "name_longest": lambda: _write(comm, os.path.join(directory, "L" * longest), backend),
        "name_one_too_long": lambda: _write(comm, os.path.join(directory, "M" * (longest + 1)), backend),
        "stride0_out": stride0_read,
        "still_reads_after_bad_out": still_reads,
        "missing_file": lambda: _read_all(comm, os.path.join(directory, "missing")),
        "stage_dir_is_a_file": lambda: _write(comm, os.path.join(directory, "chk_000012"), backend,
                                              stage_dir=os.path.join(directory, "plainfile")),
        "stage_dir_under_a_file": lambda: _write(comm, os.path.join(directory, "chk_000013"), backend,
                                                 stage_dir=os.path.join(directory, "plainfile", "stage")),
        "open_symlink_loop": lambda: _read_all(comm, os.path.join(directory, "loop")),
        "open_dangling_symlink": lambda: _read_all(comm, os.path.join(directory, "dangling")),
        "create_in_symlink_loop_dir": lambda: _write(comm, os.path.join(directory, "loop", "chk_000014"), backend),
        "create_in_dangling_symlink_dir": lambda: _write(comm, os.path.join(directory, "dangling", "chk_000015"),
                                                         backend),
    }


def _longest_name(directory: str, nprocs: int) -> int:
    """The longest checkpoint name ckptio can write in ``directory``: its temporary name (25 bytes more) within
    NAME_MAX and, under Open MPI's OMPIO, its temporary path within ``ckptio.writer.ompio_path_limit``."""
    from ckptio.writer import ompio_path_limit

    longest = os.pathconf(directory, "PC_NAME_MAX") - 25
    limit = ompio_path_limit(nprocs)
    if limit is not None:
        longest = min(longest, limit - len(os.path.abspath(directory)) - 1 - 25)
    return longest


def _fixtures(directory: str) -> None:
    """Rank 0: a regular file, a symlink loop and a dangling symlink in ``directory``."""
    with open(os.path.join(directory, "plainfile"), "w") as f:
        f.write("not a directory\n")
    os.symlink("loop", os.path.join(directory, "loop"))
    os.symlink("nowhere", os.path.join(directory, "dangling"))


FIXTURES = {"good", "plainfile", "loop", "dangling", "results"}


def cmd_edges(comm, args: list[str]) -> int:
    directory, backend = args[0], args[1]
    rank = comm.Get_rank()
    cases = None
    if rank == 0:
        os.makedirs(directory, exist_ok=True)
    comm.Barrier()
    _write(comm, os.path.join(directory, "good"), backend)
    cases = edge_cases(comm, directory, backend)
    for name, fn in cases.items():
        outcome(name, rank, fn)
        comm.Barrier()
        if rank == 0:  # a failed checkpoint leaves neither a final name nor a temporary file
            outcome(f"{name}:files", rank, lambda: sorted(set(os.listdir(directory)) - FIXTURES))
        comm.Barrier()
    return 0


COMMANDS = {"edges": cmd_edges}


def main(argv: list[str]) -> int:
    from mpi4py import MPI

    return COMMANDS[argv[0]](MPI.COMM_WORLD, argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
