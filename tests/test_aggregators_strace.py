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
