"""The MPI programs the fault tests run (``mpirun -n P python fault_job.py COMMAND ...``).

Commands (every rank runs the same one; outcomes are printed by EVERY rank, one line each, so a test can
check that an error reached every rank)::

    corpus DIR                                         DIR/<backend>/chk_000010 for every backend (+ mpiio+zstd)
    write DIR STEP BACKEND [--mode M] [--big BYTES]   write DIR/chk_STEP (exit 0, or a fault kills it)
    restart DIR...                                     latest(DIR) -> open -> read everything, check values
    readall PATH...                                    open + read every variable of each file
    fill DIR STEP BACKEND BYTES                        write a checkpoint of BYTES that may not fit
    access BACKEND --write PATH... --read PATH...      write to / read from awkward paths
    declare DIR BACKEND                                the bad-declaration and bad-request cases
    bigendian DIR BACKEND                              '>f8' / '>i4' round trip

Outcomes: one JSON object per rank and case with ``case``, ``rank``, ``ok`` and, on failure, ``cls`` (exception
class), ``bases`` (the names of its classes, MRO order) and ``msg``; appended to ``$FAULT_RESULTS/rank<R>.jsonl``
(stdout lines of several ranks can interleave) and printed as ``OUTCOME {json}``. The expected values of every
variable are defined here once (``expected``), as functions of the step, so a restart proves which checkpoint it
read.
"""

from __future__ import annotations

import json
import math
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

SHAPES = {"dens": (24, 16, 16), "tile": (10, 12)}
DTYPES = {"dens": "<f8", "tile": "<i4", "particles": "<f8"}
TILES = [(r0, c0, rn, cn) for r0, rn in ((0, 4), (4, 6)) for c0, cn in ((0, 5), (5, 7))]  # 2x2 uneven tiles


def expected(name: str, step: int) -> np.ndarray:
    """The global array of an N-d variable at ``step`` (independent of the rank count)."""
    shape = SHAPES[name]
    base = np.arange(math.prod(shape), dtype=np.int64)
    values = base * 0.25 + step * 1000.0 if name == "dens" else (base * 7 + step) % 100003
    return values.astype(DTYPES[name]).reshape(shape)


def segment(rank: int, step: int) -> np.ndarray:
    """Writer ``rank``'s 1-D per-rank segment of "particles"."""
    return np.arange((rank * 3) % 5 + 1, dtype=np.float64) + 100.0 * rank + step


def cuts(n: int, parts: int, shift: int = 0) -> list[int]:
    """Bounds of ``parts`` uneven pieces of ``n`` (``shift`` moves the cuts)."""
    weights = [(i + shift) % 3 + 1 for i in range(parts)]
    acc = [0]
    for w in weights:
        acc.append(acc[-1] + w)
    return [a * n // acc[-1] for a in acc]


def create_kwargs(mode: str, directory: str) -> dict[str, Any]:
    """ckptio.create keyword arguments of a write mode (sync, async, staged)."""
    if mode == "sync":
        return {}
    if mode == "async":
        return {"mode": "async"}
    if mode == "staged":
        return {"stage_dir": os.path.join(directory, "stage")}
    raise ValueError(f"unknown mode {mode!r}")


def write_checkpoint(comm, path: str, step: int, backend: str, mode: str = "sync", big: int = 0,
                     compression: str | None = None) -> None:
    import ckptio

    rank, size = comm.Get_rank(), comm.Get_size()
    b = cuts(SHAPES["dens"][0], size)
    dens = np.ascontiguousarray(expected("dens", step)[b[rank]:b[rank + 1]])
    tile = expected("tile", step)
    with ckptio.create(path, comm, backend=backend, attrs={"step": step}, compression=compression,
                       **create_kwargs(mode, os.path.dirname(path))) as ck:
        ck.write("dens", dens, offset=(b[rank], 0, 0), global_shape=SHAPES["dens"])
        for t, (r0, c0, rn, cn) in enumerate(TILES):
            if t % size == rank:
                ck.write("tile", np.ascontiguousarray(tile[r0:r0 + rn, c0:c0 + cn]), offset=(r0, c0),
                         global_shape=SHAPES["tile"])
        ck.write("particles", segment(rank, step))
        if big:
            n = big // 8 // size
            ck.write("big", np.full(n, float(rank)), offset=(n * rank,), global_shape=(n * size,))
    if mode != "sync":
        ck.wait()


def check_restart(comm, path: str) -> int:
    """Read everything of ``path`` with another decomposition; compare with ``expected``; return the step."""
    import ckptio

    rank, size = comm.Get_rank(), comm.Get_size()
    with ckptio.open(path, comm) as ck:
        step = int(ck.attrs["step"])
        b = cuts(SHAPES["dens"][1], size, shift=1)  # readers split axis 1, writers split axis 0
        got = ck.read("dens", offset=(0, b[rank], 0), shape=(SHAPES["dens"][0], b[rank + 1] - b[rank], 16))
        np.testing.assert_array_equal(got, expected("dens", step)[:, b[rank]:b[rank + 1]])
        np.testing.assert_array_equal(ck.read("tile"), expected("tile", step))
        writers = ck.meta["nprocs"]
        whole = ck.read("particles", offset=(0,), shape=ck.variables["particles"].shape)
        np.testing.assert_array_equal(whole, np.concatenate([segment(r, step) for r in range(writers)]))
    return step


def describe(exc: BaseException) -> dict[str, Any]:
    return {"ok": False, "cls": type(exc).__name__, "bases": [c.__name__ for c in type(exc).__mro__],
            "msg": str(exc)}


def outcome(case: str, rank: int, fn: Callable[[], Any]) -> dict[str, Any]:
    """Run ``fn``; print and return this rank's OUTCOME line."""
    try:
        value = fn()
        result = {"ok": True, "value": value}
    except Exception as exc:
        result = describe(exc)
        if os.environ.get("CKPTIO_TEST_TRACEBACK"):
            traceback.print_exc()
    result = {"case": case, "rank": rank, **result}
    line = json.dumps(result, default=str)
    if os.environ.get("FAULT_RESULTS"):
        with open(os.path.join(os.environ["FAULT_RESULTS"], f"rank{rank}.jsonl"), "a") as f:
            f.write(line + "\n")
    print("OUTCOME " + line, flush=True)
    return result


# ------------------------------------------------------------------------------------------ commands
def cmd_write(comm, args: list[str]) -> int:
    directory, step, backend = args[0], int(args[1]), args[2]
    mode = args[args.index("--mode") + 1] if "--mode" in args else "sync"
    big = int(args[args.index("--big") + 1]) if "--big" in args else 0
    write_checkpoint(comm, os.path.join(directory, f"chk_{step:06d}"), step, backend, mode, big)
    if comm.Get_rank() == 0:
        print(f"WROTE chk_{step:06d}", flush=True)
    return 0


def cmd_corpus(comm, args: list[str]) -> int:
    """DIR/<corpus>/chk_000010 for every available backend, and a compressed native one (mpiio+zstd)."""
    from ckptio.backends import available_backends

    directory = args[0]
    for name in [*available_backends(), "mpiio+zstd"]:
        backend, _, codec = name.partition("+")
        sub = os.path.join(directory, name)
        if comm.Get_rank() == 0:
            os.makedirs(sub, exist_ok=True)
        comm.Barrier()
        write_checkpoint(comm, os.path.join(sub, "chk_000010"), 10, backend, compression=codec or None)
    return 0


def cmd_restart(comm, args: list[str]) -> int:
    """For each DIR: latest(DIR) on every rank (collective), open it, read and check everything."""
    import ckptio

    for directory in args:
        found = ckptio.latest(directory, comm=comm)
        outcome(directory, comm.Get_rank(), lambda f=found: [f, check_restart(comm, f)])
    return 0


def cmd_readall(comm, args: list[str]) -> int:
    import ckptio

    def read_everything(path: str) -> list[str]:
        with ckptio.open(path, comm) as ck:
            for name in sorted(ck.variables):
                ck.read(name, offset=(0,) * len(ck.variables[name].shape), shape=ck.variables[name].shape)
            return sorted(ck.variables)

    for path in args:
        outcome(path, comm.Get_rank(), lambda p=path: read_everything(p))
    return 0


def cmd_fill(comm, args: list[str]) -> int:
    directory, step, backend, nbytes = args[0], int(args[1]), args[2], int(args[3])
    path = os.path.join(directory, f"chk_{step:06d}")
    outcome("fill", comm.Get_rank(), lambda: write_checkpoint(comm, path, step, backend, big=nbytes))
    return 0


def cmd_access(comm, args: list[str]) -> int:
    """BACKEND --write PATH... --read PATH...: write a checkpoint to / read every variable from each path."""
    backend, rank = args[0], comm.Get_rank()
    writes = args[args.index("--write") + 1:args.index("--read")]
    reads = args[args.index("--read") + 1:]
    for path in writes:
        outcome(f"write {path}", rank, lambda p=path: write_checkpoint(comm, p, 30, backend))
    for path in reads:
        outcome(f"read {path}", rank, lambda p=path: check_restart(comm, p))
    return 0


def declaration_cases(comm, directory: str, backend: str) -> dict[str, Callable[[], Any]]:
    """name -> a collective function that must raise a CheckpointError on every rank."""
    import ckptio

    rank, size = comm.Get_rank(), comm.Get_size()
    last = size - 1
    path = os.path.join(directory, f"bad_{backend}")

    def checkpoint(declare: Callable[[Any], None], attrs: dict | None = None) -> None:
        with ckptio.create(path, comm, backend=backend, attrs=attrs) as ck:
            declare(ck)

    def rows(ck, name: str, n: int = 2, dtype: str = "<f8", gshape: tuple | None = None, start: int | None = None):
        ck.write(name, np.zeros(n, dtype), offset=(n * rank if start is None else start,),
                 global_shape=gshape or (n * size,))

    cases: dict[str, Callable[[], Any]] = {
        # mismatches between ranks (found by rank 0 when it validates the gathered declarations)
        "shape_mismatch": lambda: checkpoint(lambda ck: rows(ck, "shp", gshape=(2 * size + (rank == last),))),
        "dtype_mismatch": lambda: checkpoint(lambda ck: rows(ck, "dtp", dtype="<f4" if rank == last else "<f8")),
        "ndim_mismatch": lambda: checkpoint(lambda ck: ck.write(
            "ndm", np.zeros((2, 1)) if rank == last else np.zeros(2),
            offset=(2 * rank, 0) if rank == last else (2 * rank,),
            global_shape=(2 * size, 1) if rank == last else (2 * size,))),
        "kind_mismatch": lambda: checkpoint(lambda ck: ck.write("knd", np.zeros(2)) if rank == last
                                            else rows(ck, "knd")),
        "overlap": lambda: checkpoint(lambda ck: rows(ck, "ovl", n=3, gshape=(2 * size + 1,), start=2 * rank)),
        "uncovered": lambda: checkpoint(lambda ck: rows(ck, "hole", n=1, gshape=(2 * size,), start=2 * rank)),
        "outside": lambda: checkpoint(lambda ck: rows(ck, "outs", start=2 * rank + (rank == last))),
        "negative_offset": lambda: checkpoint(lambda ck: rows(ck, "negoff", start=2 * rank - (rank == last) * 99)),
        "negative_global_shape": lambda: checkpoint(lambda ck: rows(ck, "neggs", gshape=(-1,) if rank == last
                                                                    else None)),
        # issue 23: a global shape or offset the formats cannot hold (a zero-size variable of shape (0, 2**64) was
        # written and then failed the read-back, an offset of 2**64 a raw OverflowError) or a float (was accepted)
        "global_shape_huge": lambda: checkpoint(lambda ck: ck.write("huge", np.zeros((0, 2)), offset=(0, 0),
                                                                    global_shape=(0, 2**64))),  # before: committed
        "offset_huge": lambda: checkpoint(lambda ck: rows(ck, "hugeoff", start=2**64 if rank == last else None)),
        "global_shape_float": lambda: checkpoint(lambda ck: rows(ck, "flt", gshape=(2.0 * size,) if rank == last
                                                                 else None)),
        "offset_rank_mismatch": lambda: checkpoint(lambda ck: ck.write(
            "offr", np.zeros(2), offset=(2 * rank, 0) if rank == last else (2 * rank,), global_shape=(2 * size,))),
        "two_segments_one_rank": lambda: checkpoint(lambda ck: [ck.write("seg2", np.zeros(1))
                                                                for _ in range(2 if rank == last else 1)]),
        # local problems of one rank's array or name (that rank raises in write(); the others in close())
        # (strided and negative-stride views are accepted: memory selections, tests/test_memory_selections.py)
        "object_dtype": lambda: checkpoint(lambda ck: rows(ck, "objs", dtype=object if rank == last else "<f8")),
        "string_dtype": lambda: checkpoint(lambda ck: ck.write("strs", np.array(["ab", "cd"]), offset=(2 * rank,),
                                                               global_shape=(2 * size,))),
        "structured_dtype": lambda: checkpoint(lambda ck: ck.write(
            "recs", np.zeros(2, dtype=[("a", "<f8"), ("b", "<i4")]), offset=(2 * rank,), global_shape=(2 * size,))),
        "not_an_array": lambda: checkpoint(lambda ck: ck.write("lst", [1.0, 2.0] if rank == last else np.zeros(2),
                                                               offset=(2 * rank,), global_shape=(2 * size,))),
        # was "ValueError: cannot reshape array of size 1 into shape (8,)" (an outside trial)
        "masked_elements": lambda: checkpoint(lambda ck: ck.write(
            "msk", np.ma.masked_array(np.zeros(2), mask=[rank == last, False]), offset=(2 * rank,),
            global_shape=(2 * size,))),
        "name_empty": lambda: checkpoint(lambda ck: rows(ck, "" if rank == last else "named")),
        "name_too_long": lambda: checkpoint(lambda ck: rows(ck, "x" * 300 if rank == last else "x")),
        "name_with_slash": lambda: checkpoint(lambda ck: rows(ck, "a/b" if rank == last else "a_b")),
        "name_reserved": lambda: checkpoint(lambda ck: rows(ck, "ckptio_blocks")),
        "name_not_str": lambda: checkpoint(lambda ck: rows(ck, 42 if rank == last else "n42")),
        # attributes
        "attrs_not_json_all_ranks": lambda: checkpoint(lambda ck: rows(ck, "a1"), attrs={"obj": object()}),
        "attrs_not_json_one_rank": lambda: checkpoint(lambda ck: rows(ck, "a2"),
                                                      attrs={"obj": object() if rank == last else 1}),
        "attrs_differ_between_ranks": lambda: checkpoint(lambda ck: rows(ck, "a3"), attrs={"step": rank}),
        "set_attr_not_json_one_rank": lambda: checkpoint(lambda ck: (ck.set_attr("when", {1, 2} if rank == last
                                                                                  else 1), rows(ck, "a4"))),
        "attr_name_with_slash": lambda: checkpoint(lambda ck: rows(ck, "a5"), attrs={"a/b": 1}),
        "user_exception_one_rank": lambda: checkpoint(lambda ck: (rows(ck, "u1"), _raise_if(rank == last))),
    }
    return cases


def _raise_if(condition: bool) -> None:
    if condition:
        raise RuntimeError("the simulation failed on this rank inside the with block")


def read_cases(comm, directory: str, backend: str) -> dict[str, Callable[[], Any]]:
    """Bad read requests against a good checkpoint (written here first)."""
    import ckptio

    rank, size = comm.Get_rank(), comm.Get_size()
    last = size - 1
    path = os.path.join(directory, f"good_{backend}")
    write_checkpoint(comm, path, 5, backend)

    def with_reader(fn: Callable[[Any], Any]) -> Callable[[], Any]:
        def run():
            with ckptio.open(path, comm) as ck:
                return fn(ck)
        return run

    whole = SHAPES["dens"]
    return {
        "unknown_variable": with_reader(lambda ck: ck.read("nope" if rank == last else "dens")),
        "unknown_variable_all_ranks": with_reader(lambda ck: ck.read("nope")),
        "hyperslab_outside": with_reader(lambda ck: ck.read("dens", offset=(0, 0, 0),
                                                            shape=(whole[0] + (rank == last), 16, 16))),
        "hyperslab_negative_offset": with_reader(lambda ck: ck.read("dens", offset=(-1 if rank == last else 0, 0, 0),
                                                                    shape=(1, 16, 16))),
        "hyperslab_wrong_ndim": with_reader(lambda ck: ck.read("dens", offset=(0, 0) if rank == last else (0, 0, 0),
                                                               shape=(1, 1) if rank == last else (1, 1, 1))),
        "hyperslab_negative_shape": with_reader(lambda ck: ck.read("dens", offset=(2, 0, 0),
                                                                   shape=(-1 if rank == last else 1, 16, 16))),
        "still_usable_after_errors": with_reader(lambda ck: _after_errors(ck, rank, last)),
    }


def _after_errors(ck, rank: int, last: int) -> str:
    import ckptio

    try:
        ck.read("nope" if rank == last else "dens")
    except ckptio.ReadRequestError:
        pass
    np.testing.assert_array_equal(ck.read("tile"), expected("tile", 5))
    return "usable"


def cmd_declare(comm, args: list[str]) -> int:
    directory, backend = args[0], args[1]
    rank = comm.Get_rank()
    for name, fn in declaration_cases(comm, directory, backend).items():
        outcome(name, rank, fn)
        comm.Barrier()
        if rank == 0:  # a failed checkpoint leaves neither its final name nor a temporary file
            outcome(f"{name}:files", rank, lambda: sorted(n for n in os.listdir(directory)
                                                          if "ckptio-tmp" in n or n.startswith("bad_")))
        comm.Barrier()
    for name, fn in read_cases(comm, directory, backend).items():
        outcome(name, rank, fn)
    return 0


def cmd_bigendian(comm, args: list[str]) -> int:
    import ckptio

    directory, backend = args[0], args[1]
    rank, size = comm.Get_rank(), comm.Get_size()
    path = os.path.join(directory, f"be_{backend}")
    shape = (8 * size, 3)
    glob_f = (np.arange(math.prod(shape)) * 1.5 - 7).reshape(shape)
    glob_i = (np.arange(math.prod(shape)) * 1001 - 5000).reshape(shape)

    def write():
        with ckptio.create(path, comm, backend=backend) as ck:
            rows = slice(8 * rank, 8 * rank + 8)
            ck.write("bef8", np.ascontiguousarray(glob_f[rows], dtype=">f8"), offset=(8 * rank, 0),
                     global_shape=shape)
            ck.write("bei4", np.ascontiguousarray(glob_i[rows], dtype=">i4"), offset=(8 * rank, 0),
                     global_shape=shape)
            ck.write("lef8", np.ascontiguousarray(glob_f[rows], dtype="<f8"), offset=(8 * rank, 0),
                     global_shape=shape)

    def read():
        with ckptio.open(path, comm) as ck:
            out = {}
            for name, want in (("bef8", glob_f), ("bei4", glob_i), ("lef8", glob_f)):
                got = ck.read(name, offset=(rank, 0), shape=(shape[0] - size, 3))  # a shifted decomposition
                np.testing.assert_array_equal(got, want[rank:rank + shape[0] - size])
                out[name] = {"declared": ck.meta["variables"][name]["dtype"], "read": got.dtype.str}
            return out

    outcome("write", rank, write)
    outcome("read", rank, read)
    return 0


COMMANDS = {"access": cmd_access, "corpus": cmd_corpus, "write": cmd_write, "restart": cmd_restart,
            "readall": cmd_readall, "fill": cmd_fill, "declare": cmd_declare, "bigendian": cmd_bigendian}


def main(argv: list[str]) -> int:
    from mpi4py import MPI

    return COMMANDS[argv[0]](MPI.COMM_WORLD, argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
