"""ci/cephfs.sh itself: ``up`` brings back a cluster whose processes were lost while its state stayed (a killed job,
a machine that runs CI again): the ceph-fuse mount left in the mount table answers nothing, the MDS is dead and a
freshly started monitor still reports it active for its beacon grace. CI's run of 2026-11-27 failed exactly so
("probably no MDS server is up?"): ``up`` trusted that stale report and mounted too early. Here the test kills the
client and the MDS and leaves a pid file that names a live process that is not the MDS (a reused pid)."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.cephfs
SCRIPT = Path(__file__).resolve().parents[2] / "ci" / "cephfs.sh"


def _pids(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_up_recovers_from_a_lost_client_and_mds_and_keeps_the_data(ceph_env):
    mnt = Path(ceph_env["CKPTIO_CEPHFS"])
    keep = mnt / "tests" / f"bringup-{uuid.uuid4().hex[:8]}"
    keep.mkdir(parents=True)
    with open(keep / "data", "wb") as f:  # made durable as ckptio makes a checkpoint durable: fsync file and dir
        f.write(b"x" * 4096)
        os.fsync(f.fileno())
    for d in (keep, keep.parent):
        fd = os.open(d, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    state = Path(os.environ.get("CKPTIO_CEPH_DIR", "/var/lib/ckptio-ceph"))
    fuse = _pids(f"ceph-fuse .* {mnt}$")
    mds = _pids("ceph-mds -c .* -i a")
    assert fuse and mds, "the session's cluster has a ceph-fuse client and an MDS"
    for pid in fuse + mds:
        os.kill(pid, signal.SIGKILL)
    (state / "run" / "mds.a.pid").write_text(f"{os.getpid()}\n")  # a live process that is not the MDS
    up = subprocess.run(["bash", str(SCRIPT), "up"], capture_output=True, text=True, timeout=600,
                        stdin=subprocess.DEVNULL)
    assert up.returncode == 0, up.stderr[-3000:]
    assert "does not answer" in up.stderr  # the stale mount was seen and replaced
    assert _pids("ceph-mds -c .* -i a"), "up started the MDS although its pid file named a live process"
    assert (keep / "data").read_bytes() == b"x" * 4096
    (keep / "data").unlink()
    keep.rmdir()
