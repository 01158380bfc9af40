"""The real single-host CephFS of ci/cephfs.sh for the striping tests (issue 26). Not part of ``make test``
(every test module here is marked ``cephfs``); ``make test-cephfs`` runs them. The session fixture brings the file
system up (idempotent: a running one is reused) and skips, with the reason, where it cannot run: not root,
no /dev/fuse. A bring-up that fails for any other reason fails the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
REPO = HERE.parent.parent
SCRIPT = REPO / "ci" / "cephfs.sh"


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the CephFS of ci/cephfs.sh needs root (daemons, ceph-fuse mount)"
    if not os.path.exists("/dev/fuse"):
        return "FUSE is unavailable (/dev/fuse missing): ceph-fuse cannot mount CephFS here"
    return None


@pytest.fixture(scope="session")
def ceph_env() -> dict[str, str]:
    """``ci/cephfs.sh up``, then its ``env`` (CKPTIO_CEPHFS, CEPH_CONF, CKPTIO_CEPH_DATA_POOL, the keyring)."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    up = subprocess.run(["bash", str(SCRIPT), "up"], capture_output=True, text=True, timeout=900,
                        stdin=subprocess.DEVNULL)
    if up.returncode != 0:
        pytest.fail(f"ci/cephfs.sh up failed ({up.returncode}):\n{up.stderr[-3000:]}")
    out = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.split())


@pytest.fixture
def cephdir(ceph_env):
    """A fresh directory on the CephFS, removed after the test."""
    d = Path(ceph_env["CKPTIO_CEPHFS"]) / "tests" / uuid.uuid4().hex[:10]
    d.mkdir(parents=True)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def ceph(ceph_env):
    """``ceph("rados", "-p", pool, "ls")``: run ``ceph`` or ``rados`` against the test cluster; its stdout."""
    def run(tool: str, *args: str) -> str:
        cmd = [tool, "-c", ceph_env["CEPH_CONF"], "-n", "client.admin", "-k", ceph_env["CKPTIO_CEPH_KEYRING"], *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120).stdout
    return run
