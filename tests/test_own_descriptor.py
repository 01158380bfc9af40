"""``backends.writeback.OwnDescriptor``: how every rank syncs a file a library writes without the library's
collective ``MPI_File_sync`` (why: its docstring; the MPI cases: ``tests/faults/test_one_client_write_error.py``)."""

from __future__ import annotations

import os

import pytest
from ckptio.backends.writeback import OwnDescriptor

from ckptio.errors import CheckpointIOError


def test_the_descriptor_is_opened_at_the_first_sync_and_kept_until_the_close(tmp_path):
    path = tmp_path / "f"
    own = OwnDescriptor(str(path))  # before the file exists: nothing opened yet
    assert own.fd is None
    path.write_bytes(b"x" * 10)
    own.sync()
    fd = own.fd
    assert fd is not None and os.readlink(f"/proc/self/fd/{fd}") == str(path)
    own.sync()
    assert own.fd == fd  # the same descriptor: it reports every write-back error since the first sync
    own.close()
    own.close()  # idempotent
    assert own.fd is None


def test_a_file_that_cannot_be_opened_is_an_error_not_a_fallback(tmp_path):
    own = OwnDescriptor(str(tmp_path / "missing"))
    with pytest.raises(CheckpointIOError, match="missing: cannot open it to sync this rank's writes: No such file"):
        own.sync()


def test_after_syncs_what_the_library_close_wrote_and_closes_even_when_that_close_fails(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"")
    own = OwnDescriptor(str(path))
    own.sync()
    order = []
    own.after(lambda: order.append("library closed"))
    assert order == ["library closed"] and own.fd is None

    own = OwnDescriptor(str(path))
    own.sync()

    def failing_close() -> None:
        raise RuntimeError("the library's close failed")

    with pytest.raises(RuntimeError):
        own.after(failing_close)
    assert own.fd is None  # closed all the same
