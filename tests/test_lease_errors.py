"""A series' lease that cannot be written (a full file system, a file size limit on rank 0: found by an outside
trial, where it read ``series X: read the timeline failed ... OSError: [Errno 27] File too large``, naming no
file) is a CheckpointIOError naming the lease file and why."""

from __future__ import annotations

import resource

import pytest

from ckptio.errors import CheckpointIOError
from ckptio.tiers import lease


def test_a_lease_in_a_directory_that_is_gone_names_the_lease_file(tmp_path):
    path = str(tmp_path / "gone" / "chk.lease")
    with pytest.raises(CheckpointIOError, match=r"gone/chk\.lease: cannot write the series' lease: No such file"):
        lease.acquire(path, lease.Lease.mine("run1"))


def test_a_lease_past_the_file_size_limit_names_the_lease_file_and_leaves_no_temporary(tmp_path):
    path = str(tmp_path / "chk.lease")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1, hard))  # (Python ignores SIGXFSZ: the write fails with EFBIG)
    try:
        with pytest.raises(CheckpointIOError, match=r"chk\.lease: cannot write the series' lease: File too large"):
            lease.acquire(path, lease.Lease.mine("run1"))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert [p.name for p in tmp_path.iterdir()] == []
