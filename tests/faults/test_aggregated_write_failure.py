"""A write that fails on ONE write aggregator in the middle of ckptio's own collective buffering (issue 29 item 1):
every rank raises the same CheckpointIOError, no rank hangs, and no file is left.

* ``test_a_failed_write_on_one_aggregator_fails_every_rank``: rank 1's byte-range writer fails (ENOSPC, injected
  by ``tests/programs/write_aggregation.py --fail-round``) at its second or fourth round, while the others go on
  writing: with the helper thread (the failure surfaces two rounds later, at the slot's reuse, or at the last
  writes), without it, and through MPI-IO (``MPI_File_write_at`` in the calling thread).
* ``test_a_failed_write_without_exchange_fails_every_rank``: the same on the file system's own layout, where every
  rank is the aggregator of its own region and nothing moves between ranks, so the aggregators write their rounds
  with no collective between them (checked first: the same write without the failure records ``exchanged``
  false): rank 2 fails at its second or fourth write while rank 3 goes on alone; the final agreement gives every
  rank the error.
* ``test_a_signal_in_the_middle_of_own_rounds_stops_the_writes``: the same path, rank 2 gets SIGTERM (its
  handler raises) at its second write: the signal is delivered before its next round (review of 6cc9381: with no
  agreement between rounds it waited for the last write, and a long write past ``CKPTIO_SIGNAL_GRACE`` would have
  ended the job without cleanup), so rank 2 stops within two rounds; every rank raises, naming rank 2 and the
  signal, and no file is left.
* ``test_a_full_file_system_mid_write_fails_every_rank``: a tmpfs too small for the checkpoint, space reservation
  disabled (as where ``fallocate`` is unsupported): the aggregators' ``pwritev`` run out of space in the middle of
  the rounds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import needs_root, tmpfs
from mpi_helpers import run_mpi

from ckptio.engine.space import NO_FALLOCATE_ENV

PROGRAM = str(Path(__file__).resolve().parent.parent / "programs" / "write_aggregation.py")
ROUNDS = {"CKPTIO_WRITE_BUFFER_BYTES": "16K"}  # one 16 KiB stripe unit per round: many rounds per aggregator
CYCLIC = ["--layout", "cyclic:4:16384:16384"]


def outcomes(out: str, nprocs: int) -> tuple[dict[int, str], dict[int, str]]:
    raised = {int(line.split()[1]): line for line in out.splitlines() if line.startswith("RAISED ")}
    left = {int(line.split()[1]): line.split(" ", 2)[2] for line in out.splitlines() if line.startswith("LEFT ")}
    assert sorted(left) == list(range(nprocs)), out
    return raised, left


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("io", "thread", "call"), [("posix", "1", 2), ("posix", "1", 4), ("posix", "0", 2),
                                                    ("mpiio", "1", 2)])
def test_a_failed_write_on_one_aggregator_fails_every_rank(io, thread, call, tmp_path):
    path = tmp_path / "chk_000001"
    env = {**ROUNDS, "CKPTIO_WRITE_IO": io, "CKPTIO_WRITE_THREAD": thread}
    out = run_mpi(4, [PROGRAM, "write", str(path), *CYCLIC, "--fail-round", str(call)], timeout=200, env=env).stdout
    assert_injected_failure_everywhere(out, path, failing_rank=1)


def assert_injected_failure_everywhere(out: str, path, failing_rank: int) -> None:
    """Every one of the 4 ranks raised the injected ENOSPC of ``failing_rank`` as a CheckpointIOError of the
    write's data phase naming the checkpoint, and no file is left in its directory."""
    raised, left = outcomes(out, 4)
    assert sorted(raised) == [0, 1, 2, 3], f"not every rank raised:\n{out}"
    for line in raised.values():
        kind, message = line.split(" | ", 1)
        assert "CheckpointIOError" in kind and "injected" in message and f"rank {failing_rank}" in message, line
        assert str(path) in message and "write data" in message, line
    assert all(names == "[]" for names in left.values()), f"files left behind: {left}"


# the file system's own layout (contiguous domains, an aggregator per rank) in 16 KiB rounds
OWN_ROUNDS = {"CKPTIO_WRITE_BUFFER_BYTES": "16K", "CKPTIO_HINTS": "striping_unit=16384"}


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("io", "thread", "call"), [("posix", "1", 2), ("posix", "1", 4), ("posix", "0", 2),
                                                    ("mpiio", "1", 2)])
def test_a_failed_write_without_exchange_fails_every_rank(io, thread, call, tmp_path):
    env = {**OWN_ROUNDS, "CKPTIO_WRITE_THREAD": thread, "CKPTIO_WRITE_IO": io}
    (tmp_path / "ok").mkdir()
    ok = run_mpi(4, [PROGRAM, "write", str(tmp_path / "ok" / "chk_000001")], timeout=200, env=env).stdout
    agg = json.loads(next(line[5:] for line in ok.splitlines() if line.startswith("JSON ")))["aggregation"]
    assert agg["aggregators"] == [0, 1, 2, 3] and agg["exchanged"] is False and agg["rounds"] >= 4, agg
    (tmp_path / "failed").mkdir()
    path = tmp_path / "failed" / "chk_000001"
    out = run_mpi(4, [PROGRAM, "write", str(path), "--fail-round", str(call), "--fail-rank", "2"], timeout=200,
                  env=env).stdout
    assert_injected_failure_everywhere(out, path, failing_rank=2)


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("thread", ["1", "0"])
def test_a_signal_in_the_middle_of_own_rounds_stops_the_writes(thread, tmp_path):
    env = {**OWN_ROUNDS, "CKPTIO_WRITE_THREAD": thread}
    path = tmp_path / "chk_000001"
    out = run_mpi(4, [PROGRAM, "write", str(path), "--signal-call", "2", "--fail-rank", "2"], timeout=200,
                  env=env).stdout
    raised, left = outcomes(out, 4)
    assert sorted(raised) == [0, 1, 2, 3], f"not every rank raised:\n{out}"
    for rank, line in raised.items():  # the handler's own RuntimeError comes back to rank 2 as it is
        if rank == 2:
            assert line.startswith("RAISED 2 RuntimeError | terminated by signal") and "SIGTERM" in line, line
        else:
            assert "rank 2" in line and "SIGTERM" in line and str(path) in line, line
    calls = {int(line.split()[1]): int(line.split()[2]) for line in out.splitlines() if line.startswith("CALLS ")}
    assert calls[3] >= 8, f"rank 3 should have written its many rounds: {calls}"  # the rounds exist
    assert calls[2] <= 4, f"rank 2 went on writing after its signal: {calls}"
    assert all(names == "[]" for names in left.values()), f"files left behind: {left}"


@needs_root
@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_a_full_file_system_mid_write_fails_every_rank(tmp_path):
    with tmpfs(tmp_path / "fs", "192k") as fs:
        path = fs / "chk_000001"
        env = {**ROUNDS, NO_FALLOCATE_ENV: "1"}
        out = run_mpi(4, [PROGRAM, "write", str(path), *CYCLIC, "--fail-round", "0"], timeout=200,
                      env=env, check=False).stdout
        raised = {int(line.split()[1]): line for line in out.splitlines() if line.startswith("RAISED ")}
        assert sorted(raised) == [0, 1, 2, 3], f"not every rank raised:\n{out}"
        for line in raised.values():
            kind, message = line.split(" | ", 1)
            assert "CheckpointIOError" in kind and "No space left" in message and str(path) in message, line
        assert sorted(p.name for p in fs.iterdir()) == [], "the temporary file was left behind"
