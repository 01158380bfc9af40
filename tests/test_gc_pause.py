"""The cyclic garbage collector is paused inside a collective write, a restart's open and its read on the main
thread, restored after (also after a failure), and left alone in a helper thread (a background checkpoint's I/O
thread: the simulation goes on meanwhile). ``ckptio.engine.gc_pause``; one process, ``MPI.COMM_SELF``."""

from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest

import ckptio
from ckptio.engine import commit as commitmod
from ckptio.engine import restart as restart_engine
from ckptio.engine.gc_pause import gc_paused
from ckptio.model import readplan


@pytest.fixture
def seen(monkeypatch) -> dict[str, list[bool]]:
    """Whether the collector ran, recorded inside the write's commit (the abort, for a failed write), the
    restart's open plan and a read's request records: outside the short phases that pause it themselves."""
    seen: dict[str, list[bool]] = {"write": [], "open": [], "read": []}
    for module, name, key in ((commitmod, "commit", "write"), (commitmod, "abort", "write"),
                              (restart_engine, "plan_open", "open"), (readplan, "records_of", "read")):
        monkeypatch.setattr(module, name, _recording(getattr(module, name), seen[key]))
    return seen


def _recording(fn, into: list[bool]):
    """``fn``, appending whether the collector runs to ``into`` on every call."""

    def recorded(*args, **kwargs):
        into.append(gc.isenabled())
        return fn(*args, **kwargs)

    return recorded


def _write(path: str) -> None:
    from ckptio.coord.mpi import MPI

    with ckptio.create(path, MPI.COMM_SELF) as ck:
        ck.write("u", np.arange(16.0), offset=(0,), global_shape=(16,))


def test_paused_inside_a_write_and_an_open_and_restored_after(tmp_path, seen):
    from ckptio.coord.mpi import MPI

    assert gc.isenabled()
    path = str(tmp_path / "chk")
    _write(path)
    assert seen["write"] == [False] and gc.isenabled()
    with ckptio.open(path, MPI.COMM_SELF) as ck:
        assert seen["open"] == [False] and gc.isenabled()
        assert np.array_equal(ck.read("u", (0,), (16,)), np.arange(16.0))
        assert seen["read"] == [False] and gc.isenabled()
    assert gc.isenabled()


def test_restored_after_a_failed_write(tmp_path):
    from ckptio.coord.mpi import MPI

    ck = ckptio.create(str(tmp_path / "chk"), MPI.COMM_SELF)
    ck.write("u", np.zeros(4), offset=(0,), global_shape=(4,))
    ck.write("v", np.zeros(4), offset=(0,), global_shape=(5,))  # one element of v written by no rank
    with pytest.raises(ckptio.DeclarationError):
        ck.close()
    assert gc.isenabled()
    assert os.listdir(tmp_path) == []


def test_left_alone_in_a_helper_thread(tmp_path, seen):
    errors: list[BaseException] = []

    def run() -> None:
        try:
            _write(str(tmp_path / "chk"))
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert not errors
    assert seen["write"] == [True] and gc.isenabled()


def test_pauses_are_counted_across_threads():
    """A helper thread's pause that ends while the main thread is inside its own leaves the collector paused
    until the main thread's ends; a collector the caller disabled before stays disabled."""
    inside, release = threading.Event(), threading.Event()

    def helper() -> None:
        with gc_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=helper)
    thread.start()
    assert inside.wait(10)
    with gc_paused():
        release.set()
        thread.join()
        assert not gc.isenabled()  # (the helper's pause ended first)
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
