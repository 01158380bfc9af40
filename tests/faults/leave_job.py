"""MPI program of tests/faults/test_rank_leaves.py and tests/test_collective_safety.py: one group of cases per run.

    mpirun -n P python leave_job.py GROUP DIRECTORY BACKEND

Every case runs on every rank; each rank prints one ``OUTCOME {json}`` line per case (ok, exception class,
its bases, message, exit code), and rank 0 one ``FILES {json}`` line listing the directory after the case.
The program catches everything a case raises (also SystemExit and KeyboardInterrupt) and goes on with the
next case, so that one job checks many; a case that hangs makes the whole job outlive the test's timeout.

Groups:
``leave``     one rank leaves: sys.exit(3), KeyboardInterrupt or a user exception inside ``with``, and SIGINT
              delivered to one rank just before a chosen phase of ``close()`` or of a read (the signal is sent
              by the rank to itself from a wrapper around the ``ckptio.coord`` function of that phase, so it
              lands at a known point: in old code, between two collectives), or from a thread while the rank
              waits inside an MPI collective
``args``      different create()/open() arguments on one rank, use after close, bad read arguments, sizes,
              attribute values (NaN, backend limits)
``exchange``  a read whose exchange is split because it moves more than ``MAX_MESSAGE_BYTES`` (lowered here)
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

import ckptio
from ckptio import coord

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from leave_outcomes import READ_PHASES, WRITE_PHASES

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
last = size - 1
N = 8 * size  # rows of the test array, 8 per rank


def emit(kind: str, payload: dict[str, Any]) -> None:
    """One ``KIND {json}`` record: on stdout (for the log) and, with LEAVE_JOB_RESULTS, appended to this rank's own
    file there, which is what the tests read (mpirun may split long lines of several ranks into each other)."""
    line = f"{kind} {json.dumps(payload)}\n"
    results = os.environ.get("LEAVE_JOB_RESULTS")
    if results:
        with open(os.path.join(results, f"rank{rank}.records"), "a") as f:
            f.write(line)
    sys.stdout.write(line)
    sys.stdout.flush()


def outcome(fn: Callable[[], Any]) -> dict[str, Any]:
    try:
        value = fn()
        return {"ok": True, "value": value}
    except BaseException as exc:  # the job records every outcome, SystemExit and KeyboardInterrupt included
        return {"ok": False, "cls": type(exc).__name__, "bases": [c.__name__ for c in type(exc).__mro__],
                "msg": str(exc), "code": exc.code if isinstance(exc, SystemExit) else None}


def run_case(name: str, fn: Callable[[], Any], directory: str) -> None:
    result = outcome(fn)
    emit("OUTCOME", {"case": name, "rank": rank, **result})
    comm.Barrier()
    if rank == 0:
        emit("FILES", {"case": name, "files": sorted(os.listdir(directory))})
    comm.Barrier()


def local_block() -> np.ndarray:
    return np.arange(8 * 4, dtype=np.float64).reshape(8, 4) + 1000 * rank


def write(path: str, backend: str, body: Callable[[Any], None] | None = None, **kw) -> str:
    with ckptio.create(path, comm, backend=backend, **kw) as ck:
        ck.write("dens", local_block(), offset=(8 * rank, 0), global_shape=(N, 4))
        if body is not None:
            body(ck)
    return "written"


def write_staged(path: str, backend: str, stage: str) -> str:
    """A staged checkpoint (its pieces kept in ``stage``), drained before returning."""
    w = ckptio.create(path, comm, backend=backend, stage_dir=stage)
    with w:
        w.write("dens", local_block(), offset=(8 * rank, 0), global_shape=(N, 4))
    w.wait()
    return "written"


def signal_after(owner: Any, name: str, target: int) -> Callable[[], None]:
    """Wrap method ``name`` of ``owner`` so that rank ``target`` sends itself SIGINT right after it returned (the
    last step of an open, inside its collective section); returns the function that undoes the wrapping."""
    original = getattr(owner, name)

    def then_signalled(*args, **kw):
        result = original(*args, **kw)
        if rank == target:
            os.kill(os.getpid(), signal.SIGINT)
        return result

    setattr(owner, name, then_signalled)
    return lambda: setattr(owner, name, original)


class SigintAt:
    """Wrap the ckptio.coord functions so that ``target`` sends itself SIGINT just before the (first) phase
    whose name ends with ``suffix`` (a prefix for the open phase): a signal at a known point of the protocol."""

    NAMES = ("run", "agree", "count_ranks", "gather_and_plan", "bcast_from_root")

    def __init__(self, suffix: str, target: int):
        self.suffix, self.target, self.fired = suffix, target, False
        self.saved = {n: getattr(coord, n) for n in self.NAMES}

    def __enter__(self) -> SigintAt:
        for name in self.NAMES:
            setattr(coord, name, self._wrap(self.saved[name]))
        return self

    def __exit__(self, *exc) -> None:
        for name, fn in self.saved.items():
            setattr(coord, name, fn)

    def _matches(self, phase: str) -> bool:
        return (phase.endswith(self.suffix) or (self.suffix.endswith(" ") and phase.startswith(self.suffix))
                or f"{self.suffix} (" in phase)  # "write data (cut the pieces ...)": the aggregated write's phases

    def _wrap(self, fn):
        def wrapper(comm_, phase, *args, **kw):
            if rank == self.target and not self.fired and self._matches(phase):
                self.fired = True
                os.kill(os.getpid(), signal.SIGINT)
            return fn(comm_, phase, *args, **kw)
        return wrapper


# ------------------------------------------------------------------------------------------------ leave


def leave_cases(directory: str, backend: str) -> dict[str, Callable[[], Any]]:
    cases: dict[str, Callable[[], Any]] = {}
    counter = iter(range(10**6))

    def fresh() -> str:
        return os.path.join(directory, f"chk_{next(counter):04d}")

    def exit_in_with() -> Any:
        return write(fresh(), backend, lambda ck: sys.exit(3) if rank == last else None)

    def interrupt_in_with() -> Any:
        def body(ck):
            if rank == last:
                raise KeyboardInterrupt
        return write(fresh(), backend, body)

    def user_error_in_with() -> Any:
        def body(ck):
            if rank == last:
                raise RuntimeError("the simulation diverged on this rank")
        return write(fresh(), backend, body)

    cases["sys_exit_in_with"] = exit_in_with
    cases["keyboard_interrupt_in_with"] = interrupt_in_with
    cases["user_exception_in_with"] = user_error_in_with
    for target in sorted({0, last}):
        for phase in WRITE_PHASES:
            def sigint_write(phase=phase, target=target) -> Any:
                with SigintAt(phase, target) as s:
                    result = write(fresh(), backend)
                assert s.fired or rank != target, f"the SIGINT for {phase!r} was never sent"
                return result
            cases[f"sigint_close:{phase.strip(': ')}:{target}"] = sigint_write

    # reads: one good checkpoint, then SIGINT before each phase of open/read/close
    good = os.path.join(directory, "good")

    def read_once() -> Any:
        with ckptio.open(good, comm) as r:
            return float(r.read("dens", offset=(8 * rank, 0), shape=(8, 4)).sum())

    for phase in READ_PHASES:
        def sigint_read(phase=phase) -> Any:
            with SigintAt(phase, last) as s:
                result = read_once()
            assert s.fired or rank != last, f"the SIGINT for {phase!r} was never sent"
            return result
        cases[f"sigint_read:{phase.strip()}:{last}"] = sigint_read

    def sigint_after_open() -> Any:
        # the last rank's SIGINT arrives after the open's last collective, inside its collective section: it is
        # delivered when the section ends, on that rank alone, while the others go on into their first read
        import ckptio.reader as reader_module

        undo = signal_after(reader_module, "Restart", last)
        try:
            return read_once()
        finally:
            undo()
    cases["sigint_after_open"] = sigint_after_open

    def sigint_after_staged_open() -> Any:
        from ckptio.tiers.staged_reader import StagedReader

        undo = signal_after(StagedReader, "_directory_blocks", last)  # the staged open's last step
        try:
            with ckptio.open(os.path.join(directory, "good_staged"), comm,
                             stage_dir=os.path.join(directory, "stage")) as r:
                assert isinstance(r, StagedReader), type(r)
                return float(r.read("dens", offset=(8 * rank, 0), shape=(8, 4)).sum())
        finally:
            undo()
    cases["sigint_after_staged_open"] = sigint_after_staged_open

    def exit_in_read_with() -> Any:
        with ckptio.open(good, comm) as r:
            if rank == last:
                sys.exit(4)
            return float(r.read("dens").sum())  # the others read on; the leaving rank is in close()
    cases["sys_exit_in_reader_with"] = exit_in_read_with

    def sigint_from_thread() -> Any:
        # rank 0 enters close() late; meanwhile the last rank waits in a collective and gets SIGINT there
        if rank == last:
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        if rank == 0:
            time.sleep(1.0)
        return write(fresh(), backend)
    cases["sigint_from_thread"] = sigint_from_thread

    class Preempted(Exception):
        """What a batch script's SIGUSR1 handler raises to stop its time loop."""

    def handler_raises_in_close() -> Any:
        # as sigint_from_thread, with the program's own handler raising its own exception (outside trial,
        # 2026-12-06: it came back as the CollectiveError on its own rank too)
        def preempted(signum, frame):
            raise Preempted(f"preempted: rank {rank}'s SIGUSR1 handler")

        before = signal.signal(signal.SIGUSR1, preempted)
        try:
            if rank == last:
                threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1)).start()
            if rank == 0:
                time.sleep(1.0)
            return write(fresh(), backend)
        finally:
            signal.signal(signal.SIGUSR1, before)
    cases["handler_raises_in_close"] = handler_raises_in_close
    return cases


# ------------------------------------------------------------------------------------------------- args
def args_cases(directory: str, backend: str) -> dict[str, Callable[[], Any]]:
    cases: dict[str, Callable[[], Any]] = {}
    other_backend = "hdf5" if backend != "hdf5" else "mpiio"
    stage = os.path.join(directory, "stage")  # made by main(), before the first listing
    good = os.path.join(directory, "good")

    # 16: create() arguments that differ between ranks
    cases["backend_differs"] = lambda: write(os.path.join(directory, "a1"), other_backend if rank == last else backend)
    cases["mode_differs"] = lambda: write(os.path.join(directory, "a2"), backend,
                                          mode="async" if rank == last else "sync")
    cases["path_differs"] = lambda: write(os.path.join(directory, "a3x" if rank == last else "a3"), backend)
    cases["stage_dir_differs"] = lambda: write(os.path.join(directory, "a4"), backend,
                                               stage_dir=stage if rank == last else None)
    if backend == "mpiio":
        cases["compression_differs"] = lambda: write(os.path.join(directory, "a5"), backend,
                                                     compression="zstd" if rank == last else None)
    # the MPI-IO library takes rank 0's or mixes them; PnetCDF swapped the caller's arrays on some ranks only
    cases["hints_differ"] = lambda: write(os.path.join(directory, "a6"), backend,
                                          hints={"nc_in_place_swap": "disable"} if rank == last else None)
    cases["hint_value_bad_one_rank"] = lambda: write(os.path.join(directory, "a7"), backend,  # was ignored
                                                     hints={"nc_in_place_swap": "false"} if rank == last else None)

    # a declaration that differs on the last rank: the message names every value with its ranks, and the block
    # before a hole (outside trial, 2026-12-06)
    cases["shape_differs_last_rank"] = lambda: write(os.path.join(directory, "a8"), backend, lambda ck: ck.write(
        "pres", local_block(), offset=(8 * rank, 0), global_shape=(N + (1 if rank == last else 0), 4)))
    cases["short_block_one_rank"] = lambda: write(os.path.join(directory, "a9"), backend, lambda ck: ck.write(
        "pres", local_block()[:7] if rank == 0 else local_block(), offset=(8 * rank, 0), global_shape=(N, 4)))

    # 17: use after close
    def write_after_close() -> Any:
        ck = ckptio.create(os.path.join(directory, "b1"), comm, backend=backend)
        ck.write("dens", local_block(), offset=(8 * rank, 0), global_shape=(N, 4))
        ck.close()
        ck.write("late", local_block(), offset=(8 * rank, 0), global_shape=(N, 4))
    cases["write_after_close"] = write_after_close

    def set_attr_after_close() -> Any:
        ck = ckptio.create(os.path.join(directory, "b2"), comm, backend=backend)
        ck.write("dens", local_block(), offset=(8 * rank, 0), global_shape=(N, 4))
        ck.close()
        ck.set_attr("late", 1)
    cases["set_attr_after_close"] = set_attr_after_close

    def reader_after_close(what: str) -> Callable[[], Any]:
        def case() -> Any:
            r = ckptio.open(good, comm)
            r.close()
            if what == "read":
                return r.read("dens")
            if what == "read_many":
                return r.read_many([("dens", None, None)])
            return dict(r.attrs)
        return case
    for what in ("read", "read_many", "attrs"):
        cases[f"{what}_after_close"] = reader_after_close(what)

    # 18: read arguments (wrong on the last rank only)
    bad_reads = {
        "offset_shape_lengths_differ": ((0, 0), (2,)), "float_offset": ((0.9, 0), (2, 4)),
        "bool_offset": ((True, 0), (2, 4)), "negative_offset": ((-1, 0), (2, 4)),
        "float_shape": ((0, 0), (2.0, 4)), "string_shape": ((0, 0), "24"), "offset_not_sequence": (3, (2, 4)),
    }
    for case_name, (offset, shape) in bad_reads.items():
        def bad_read(offset=offset, shape=shape) -> Any:
            with ckptio.open(good, comm) as r:
                try:
                    r.read("dens", offset=offset if rank == last else (0, 0), shape=shape if rank == last else (2, 4))
                finally:
                    ok = r.read("dens", offset=(8 * rank, 0), shape=(8, 4))  # still usable afterwards
                    assert np.array_equal(ok, local_block())
        cases[f"read_{case_name}"] = bad_read

    # 19: sizes
    def read_with(env: dict[str, str] | None = None, **kw) -> Callable[[], Any]:
        def case() -> Any:
            saved = {k: os.environ.get(k) for k in (env or {})}
            os.environ.update(env or {})
            try:
                with ckptio.open(good, comm, **kw) as r:
                    data = r.read("dens", offset=(8 * rank, 0), shape=(8, 4))
                    assert np.array_equal(data, local_block())
                    return r.buffer_bytes
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        return case
    cases["env_buffer_64M"] = read_with({"CKPTIO_BUFFER_BYTES": "64M"})
    cases["env_buffer_1MiB"] = read_with({"CKPTIO_BUFFER_BYTES": "1MiB"})
    cases["arg_buffer_2G"] = read_with(buffer_bytes="2G")
    cases["env_buffer_negative_one_rank"] = read_with({"CKPTIO_BUFFER_BYTES": "-1"} if rank == last else None)
    cases["env_buffer_garbage"] = read_with({"CKPTIO_BUFFER_BYTES": "lots"})
    cases["arg_buffer_zero_one_rank"] = read_with(buffer_bytes=0 if rank == last else None)
    cases["arg_buffer_differs"] = read_with(buffer_bytes="1M" if rank == last else "2M")
    cases["arg_verify_differs"] = read_with(verify=rank != last)  # an aggregator's choice serves other ranks
    cases["arg_verify_string_one_rank"] = read_with(verify="no" if rank == last else True)  # "no" was truthy
    cases["open_hints_differ"] = read_with(hints={"cb_buffer_size": "1048576"} if rank == last else None)
    cases["env_aggregators_garbage_one_rank"] = read_with({"CKPTIO_AGGREGATORS": "two"} if rank == last else None)

    def open_path_differs() -> Any:  # outside trial: an aggregator read another checkpoint -> false "corrupt"
        other = os.path.join(directory, "good_other")  # written by main() with "good"
        with ckptio.open(other if rank == last else good, comm) as r:
            return r.read("dens", offset=(8 * rank, 0), shape=(8, 4))
    cases["open_path_differs"] = open_path_differs
    cases["arg_aggregators_zero"] = read_with(aggregators=0)

    # 20: attributes
    nan = float("nan")

    def attrs_roundtrip(attrs: dict[str, Any], name: str) -> Callable[[], Any]:
        def case() -> Any:
            path = os.path.join(directory, name)
            write(path, backend, attrs=attrs)
            with ckptio.open(path, comm) as r:
                return json.dumps(r.attrs, allow_nan=True, sort_keys=True)
        return case
    cases["attr_nan"] = attrs_roundtrip({"dt": nan, "v": [1.0, nan], "nested": [[nan, 1], "x"]}, "c1")
    cases["attr_int_vs_float_differ"] = lambda: write(os.path.join(directory, "c2"), backend,
                                                      attrs={"step": 1.0 if rank == last else 1})
    cases["attr_nan_vs_number_differ"] = lambda: write(os.path.join(directory, "c3"), backend,
                                                       attrs={"dt": 0.5 if rank == last else nan})
    cases["attr_nul_string"] = lambda: write(os.path.join(directory, "c4"), backend, attrs={"label": "a\x00b"})
    cases["set_attr_nul_string"] = lambda: write(os.path.join(directory, "c5"), backend,
                                                 lambda ck: ck.set_attr("label", "a\x00b"))
    cases["attr_long_int_list"] = lambda: write(os.path.join(directory, "c6"), backend,
                                                attrs={"ids": list(range(9000))})
    cases["attr_surrogate"] = lambda: write(os.path.join(directory, "c7"), backend, attrs={"name": "a\ud800b"})
    return cases


# --------------------------------------------------------------------------------------------- exchange
def exchange_cases(directory: str, backend: str) -> dict[str, Callable[[], Any]]:
    import ckptio.coord.exchange

    path = os.path.join(directory, "big")
    rows = 1024  # per rank, 4 float64 columns: 32 KiB per rank

    def setup() -> Any:
        with ckptio.create(path, comm, backend=backend) as ck:
            ck.write("dens", np.arange(rows * 4, dtype=np.float64).reshape(rows, 4) + 1e6 * rank,
                     offset=(rows * rank, 0), global_shape=(rows * size, 4))
        return "written"

    def whole_on_every_rank() -> Any:
        assert hasattr(ckptio.coord.exchange, "MAX_MESSAGE_BYTES"), "no message-size limit to lower"
        saved = ckptio.coord.exchange.MAX_MESSAGE_BYTES
        ckptio.coord.exchange.MAX_MESSAGE_BYTES = 4096  # every rank receives far more than this in the one round
        try:
            with ckptio.open(path, comm, aggregators=1, buffer_bytes="1G") as r:
                data = r.read("dens")
                expected = np.concatenate([np.arange(rows * 4, dtype=np.float64).reshape(rows, 4) + 1e6 * q
                                           for q in range(size)])
                assert np.array_equal(data, expected), "wrong data after a split exchange"
                return {"rounds": r.stats.rounds, "messages": r.stats.messages}
        finally:
            ckptio.coord.exchange.MAX_MESSAGE_BYTES = saved

    return {"setup": setup, "split_exchange": whole_on_every_rank}


def main() -> None:
    group, directory, backend = sys.argv[1:4]
    if os.environ.get("LEAVE_JOB_DUMP_AFTER"):  # diagnosing a hang: every rank prints its stack, then exits
        import faulthandler

        faulthandler.dump_traceback_later(float(os.environ["LEAVE_JOB_DUMP_AFTER"]), exit=True)
    os.makedirs(os.path.join(directory, "stage"), exist_ok=True)
    if group in ("leave", "args"):
        run_case("setup", lambda: write(os.path.join(directory, "good"), backend), directory)
        run_case("setup", lambda: write(os.path.join(directory, "good_other"), backend), directory)
    if group == "leave":  # a checkpoint whose pieces stay in the stage (read back by a StagedReader)
        run_case("setup", lambda: write_staged(os.path.join(directory, "good_staged"), backend,
                                               os.path.join(directory, "stage")), directory)
    cases = {"leave": leave_cases, "args": args_cases, "exchange": exchange_cases}[group](directory, backend)
    only = os.environ.get("LEAVE_JOB_CASES")
    for name, fn in cases.items():
        if only and name not in only.split(","):
            continue
        run_case(name, fn, directory)
    emit("DONE", {"rank": rank})


if __name__ == "__main__":
    main()
