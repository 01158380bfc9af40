"""Only the aggregator ranks touch the checkpoint file on restart: checked independently with strace (every
openat/read syscall of every process) and from ckptio's own statistics, for every backend."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from mpi_helpers import BACKENDS, PROGRAMS, REPO, mpi_env, run_mpi

PROGRAM = str(PROGRAMS / "aggregators_strace.py")  # the MPI programs of this test


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is installed by ci/install.sh")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nprocs", [4, 8])
def test_only_aggregators_open_and_read_the_file(backend, nprocs, tmp_path):
    path = tmp_path / "chk_000001"
    run_mpi(4, [PROGRAM, "write", str(path), backend])
    prefix = tmp_path / "trace"
    cmd = ["strace", "-f", "-qq", "-e", "trace=openat,open,read,pread64,preadv,preadv2", "-ff", "-o", str(prefix),
           "mpirun", "-n", str(nprocs), sys.executable, PROGRAM, "read", str(path)]
    proc = subprocess.run(cmd, cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    import json

    infos = [json.loads((tmp_path / f"info.{r}.json").read_text()) for r in range(nprocs)]
    assert len(infos) == nprocs
    aggregators = {i["rank"] for i in infos if i["aggregator"]}
    assert len(aggregators) == 2
    name = re.escape(str(path))
    touched = {}
    for info in infos:
        trace = (tmp_path / f"trace.{info['pid']}").read_text()
        fds = set(re.findall(rf'open(?:at)?\(.*"{name}", [^)]*\) = (\d+)', trace))
        reads = [m for fd in fds for m in re.findall(rf"^p?readv?2?\({fd}, .*\) = (\d+)", trace, re.M)]
        touched[info["rank"]] = (len(fds), sum(int(x) for x in reads))
    for info in infos:
        opens, nbytes = touched[info["rank"]]
        st = info["stats"]
        if info["rank"] in aggregators:
            assert st["opened_file"] and st["file_bytes"] > 0, info
            assert opens >= 1 and nbytes > 0, (info["rank"], touched)
        else:
            assert opens == 0 and nbytes == 0, f"non-aggregator rank {info['rank']} touched the file: {touched}"
            assert not st["opened_file"] and st["file_bytes"] == 0 and st["bytes_received"] > 0, info
    total = sum(i["stats"]["file_bytes"] for i in infos)
    assert total >= 50 * 4 * 100 * 8  # the whole array was read once, by the aggregators


# ---------------------------------------------------------------------------------------------- the write side
WRITE_PROGRAM = REPO / "tests" / "programs" / "write_aggregation.py"
_CLONE = re.compile(r"^clone3?\(.*CLONE_THREAD.*\) = (\d+)$", re.M)


def thread_groups(prefix) -> dict[int, int]:
    """tid -> the pid of its process, from the ``clone``/``clone3`` calls with CLONE_THREAD in the traces of
    ``strace -ff`` (one file per thread, named by its tid)."""
    parent: dict[int, int] = {}
    tids = []
    for trace in prefix.parent.glob(f"{prefix.name}.*"):
        tid = int(trace.name.rsplit(".", 1)[1])
        tids.append(tid)
        for child in _CLONE.findall(trace.read_text()):
            parent[int(child)] = tid
    group = {}
    for tid in tids:
        leader = tid
        while leader in parent:
            leader = parent[leader]
        group[tid] = leader
    return group


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is installed by ci/install.sh")
@pytest.mark.parametrize(("nprocs", "io", "layout", "aggregators"), [
    (4, "posix", "fs", 2), (8, "posix", "cyclic:4:65536:65536", 4), (4, "mpiio", "fs", 2)])
def test_only_write_aggregators_open_and_write_the_file(nprocs, io, layout, aggregators, tmp_path):
    """ckptio's own collective buffering of the native write (issue 29): strace every process (every thread), and
    only the write aggregators' processes open the checkpoint and write to it; with pwritev the writes come from
    their helper thread (one round behind the exchange)."""
    path = tmp_path / "chk_000001"
    info = tmp_path / "info"
    info.mkdir()
    prefix = tmp_path / "trace"
    env = mpi_env({"CKPTIO_WRITE_IO": io, "CKPTIO_WRITE_BUFFER_BYTES": "128K", "CKPTIO_HINTS": "striping_unit=65536",
                   **({"CKPTIO_WRITE_AGGREGATORS": str(aggregators)} if layout == "fs" else {})})
    cmd = ["strace", "-f", "-qq", "-e", "trace=openat,open,creat,pwrite64,pwritev,pwritev2,clone,clone3", "-ff",
           "-o", str(prefix), "mpirun", "-n", str(nprocs), sys.executable, str(WRITE_PROGRAM), "write", str(path),
           "--layout", layout, "--info", str(info)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    import json

    infos = [json.loads((info / f"info.{r}.json").read_text()) for r in range(nprocs)]
    chosen = {i["rank"] for i in infos if i["aggregator"]}
    assert len(chosen) == aggregators and 0 in chosen, infos[0]["aggregation"]
    group = thread_groups(prefix)
    name = re.escape(str(path.parent))
    opened = re.compile(rf'open(?:at)?\(.*"{name}/(?:\.chk_000001\.ckptio-tmp-[0-9a-f]{{12}}|chk_000001)", '
                        r'[^)]*\) = (\d+)')
    by_pid: dict[int, dict] = {}
    for trace in prefix.parent.glob(f"{prefix.name}.*"):
        tid = int(trace.name.rsplit(".", 1)[1])
        text = trace.read_text()
        mine = by_pid.setdefault(group[tid], {"fds": set(), "writes": []})
        mine["fds"] |= set(opened.findall(text))
        mine["writes"] += [(tid, fd, int(n)) for fd, n in re.findall(r"^pwrite(?:64|v2?)\((\d+), .*\) = (\d+)$",
                                                                      text, re.M)]
    total = 0
    for i in infos:
        seen = by_pid.get(i["pid"], {"fds": set(), "writes": []})
        written = [(tid, n) for tid, fd, n in seen["writes"] if fd in seen["fds"]]
        total += sum(n for _, n in written)
        if i["rank"] in chosen:
            assert seen["fds"] and sum(n for _, n in written) > 0, (i["rank"], seen["fds"], written[:5])
            if io == "posix" and i["aggregation"]["threaded"]:
                assert any(tid != i["pid"] for tid, _ in written), "pwritev did not come from the helper thread"
        else:
            assert not seen["fds"], f"non-aggregator rank {i['rank']} opened the checkpoint"
            assert not written, f"non-aggregator rank {i['rank']} wrote to the checkpoint"
    record = infos[0]["aggregation"]  # every piece of data written once, by the aggregators (+ index and trailer)
    assert record["file_bytes"] == record["own_bytes"] + record["bytes_sent"] and total > record["file_bytes"]
