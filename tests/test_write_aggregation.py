"""ckptio's own collective buffering of the native write (issue 29 item 1), under mpirun: checkpoints written
through the write aggregators (contiguous domains on this file system, stripe-cyclic ones over a simulated striped
layout; pwritev in a helper thread or MPI_File_write_at on the aggregators' communicator; one round or many; all
ranks aggregators or fewer; async and staged drains) restart bit-identically on other rank counts (every block's
checksum verified by the restart), and the document records how the data was written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mpi_helpers import OVERSUBSCRIBED, run_mpi

PROGRAM = str(Path(__file__).resolve().parent / "programs" / "write_aggregation.py")
# rounds of two 64 KiB cells: several rounds per aggregator (the pipeline and its helper thread)
SMALL_ROUNDS = {"CKPTIO_WRITE_BUFFER_BYTES": "128K", "CKPTIO_HINTS": "striping_unit=65536"}


def write(nprocs: int, path: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    out = run_mpi(nprocs, [PROGRAM, "write", str(path), *args], timeout=300, env=env).stdout
    lines = [line[5:] for line in out.splitlines() if line.startswith("JSON ")]
    assert len(lines) == 1, out
    return json.loads(lines[0])


def restarts(path: Path, readers: tuple[int, ...]) -> None:
    for m in readers:
        out = run_mpi(m, [PROGRAM, "read", str(path)], timeout=300).stdout
        assert f"READ OK {m}" in out, out


CASES = {
    # writers, program arguments, environment, expected (domain kind, aggregator ranks or their number, threaded)
    "1-rank": (1, [], {}, ("contiguous", [0], False)),
    "2-ranks": (2, [], SMALL_ROUNDS, ("contiguous", [0, 1], True)),
    "4-ranks-each-writes-its-own": (4, [], {}, ("contiguous", [0, 1, 2, 3], False)),
    "4-ranks-2-aggregators-many-rounds": (4, [], {**SMALL_ROUNDS, "CKPTIO_WRITE_AGGREGATORS": "2"},
                                          ("contiguous", 2, True)),
    "oversubscribed": (8, [], {"CKPTIO_WRITE_AGGREGATORS": "3"}, ("contiguous", 3, None)),
    "4-ranks-mpiio": (4, [], {**SMALL_ROUNDS, "CKPTIO_WRITE_IO": "mpiio", "CKPTIO_WRITE_AGGREGATORS": "2"},
                      ("contiguous", 2, False)),
    "4-ranks-cyclic-a-eq-s": (4, ["--layout", "cyclic:4:65536:262144"], SMALL_ROUNDS,
                              ("cyclic", [0, 1, 2, 3], True)),
    "3-ranks-cyclic-a-lt-s": (3, ["--layout", "cyclic:6:65536:65536"], SMALL_ROUNDS, ("cyclic", [0, 1, 2], True)),
    "8-ranks-cyclic-a-multiple-of-s": (8, ["--layout", "cyclic:2:65536:262144"],
                                       {**SMALL_ROUNDS, "CKPTIO_WRITE_AGGREGATORS": "4"},
                                       ("cyclic", [0, 1, 2, 3], None)),
    "4-ranks-cyclic-mpiio-compressed": (4, ["--layout", "cyclic:4:65536:65536", "--compression", "zstd:1"],
                                        {**SMALL_ROUNDS, "CKPTIO_WRITE_IO": "mpiio"}, ("cyclic", [0, 1, 2, 3], False)),
    "4-ranks-no-thread": (4, [], {**SMALL_ROUNDS, "CKPTIO_WRITE_THREAD": "0", "CKPTIO_WRITE_AGGREGATORS": "1"},
                          ("contiguous", [0], False)),
}


@pytest.mark.mpi
@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", CASES)
def test_aggregated_write_restarts_bit_identically(case, tmp_path):
    writers, args, env, (kind, aggregators, threaded) = CASES[case]
    writers = min(writers, OVERSUBSCRIBED)
    path = tmp_path / "chk_000001"
    got = write(writers, path, *args, env=env)
    agg = got["aggregation"]
    assert agg["io"] == env.get("CKPTIO_WRITE_IO", "posix") and agg["kind"] == kind, agg
    if isinstance(aggregators, int):
        assert len(agg["aggregators"]) == aggregators, agg
    else:
        assert agg["aggregators"] == aggregators, agg
    assert agg["aggregators"][0] == 0
    if threaded is not None:
        assert agg["threaded"] is threaded, agg
    if "CKPTIO_WRITE_BUFFER_BYTES" in env and "--compression" not in args:  # (compressed: a few bytes)
        assert agg["rounds"] >= 2 and agg["round_bytes"] == 128 << 10, agg
    if len(agg["aggregators"]) == writers and kind == "contiguous":
        assert agg["bytes_sent"] == 0 and agg["messages"] == 0, "every rank writes its own region: no exchange"
        assert agg["exchanged"] is False, "nothing moves between ranks: the rounds are the aggregators' own"
    else:
        assert agg["bytes_sent"] > 0 and agg["exchanged"] is True
    assert agg["file_bytes"] >= agg["own_bytes"] + agg["bytes_sent"]
    restarts(path, tuple(sorted({1, 3, writers})))


@pytest.mark.mpi
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["async", "staged"])
def test_background_drains_go_through_the_write_aggregators(mode, tmp_path):
    path = tmp_path / "chk_000001"
    args = ["--mode", mode] + (["--stage", str(tmp_path / "stage")] if mode == "staged" else [])
    got = write(4, path, *args, "--layout", "cyclic:2:65536:65536",
                env={**SMALL_ROUNDS, "CKPTIO_WRITE_AGGREGATORS": "2"})
    assert got["aggregation"]["kind"] == "cyclic" and got["aggregation"]["aggregators"] == [0, 1]
    restarts(path, (2, 3))


@pytest.mark.mpi
@pytest.mark.timeout(600)
def test_write_all_keeps_the_single_collective_write(tmp_path):
    path = tmp_path / "chk_000001"
    got = write(4, path, env={"CKPTIO_WRITE_IO": "write_all"})
    assert got["aggregation"] is None
    restarts(path, (3,))
