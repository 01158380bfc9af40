"""Issue 23: ckptio's warnings point at the caller's line, not at ckptio's own (``stacklevel``). Every
``warnings.warn`` in ckptio goes through ``ckptio._warn.warn``, which attributes the warning to the first frame
outside ckptio, whatever the path through ckptio (a direct call, a ``with`` block, a ``Series``). Serial, in
this process (one rank)."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import numpy as np
from mpi4py import MPI

import ckptio

REPO = Path(__file__).resolve().parent.parent


def _caught(fn, text: str) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    found = [w for w in caught if text in str(w.message)]
    assert found, [str(w.message) for w in caught]
    return found


def test_empty_checkpoint_warning_points_at_the_with_statement(tmp_path: Path) -> None:
    def write_nothing() -> None:
        with ckptio.create(tmp_path / "chk_000001", MPI.COMM_SELF):  # the warning's line: the end of this with block
            pass

    (w,) = _caught(write_nothing, "holds no variables")
    assert w.filename == __file__, (w.filename, w.lineno)


def test_skipped_checkpoint_warning_points_at_the_latest_call(tmp_path: Path) -> None:
    with ckptio.create(tmp_path / "chk_000001", MPI.COMM_SELF) as ck:
        ck.write("x", np.arange(4.0), offset=(0,), global_shape=(4,))
    (tmp_path / "chk_000002").write_bytes(b"\0" * 8192)  # looks like a checkpoint whose header was zeroed
    for call in (lambda: ckptio.latest(tmp_path), lambda: ckptio.Series(tmp_path, MPI.COMM_SELF).latest()):
        found = _caught(call, "skipping")
        assert all(w.filename == __file__ for w in found), [(w.filename, w.lineno) for w in found]


def test_every_warning_in_ckptio_goes_through_the_caller_locating_helper() -> None:
    """No ``warnings.warn`` with a fixed stacklevel left in ckptio's code (a warning of the background drain thread
    has no user frame; it points at the thread's entry)."""
    offenders = []
    for path in [*sorted((REPO / "ckptio").rglob("*.py")), *sorted((REPO / "backends").glob("*.py"))]:
        if path.name == "_warn.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "warn"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "warnings"):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not offenders, offenders


def test_a_series_warns_when_a_run_creates_a_step_again_or_an_older_one(tmp_path: Path) -> None:
    """An outside trial created step 2 twice, then step 1, in one run: the second step 2 replaced the first
    without a word. Now each such create() warns, at the caller's line; growing steps do not."""
    series = ckptio.Series(tmp_path, MPI.COMM_SELF, keep=3)

    def write(step: int) -> None:
        with series.create(step) as ck:
            ck.write("x", np.full(4, float(step)), offset=(0,), global_shape=(4,))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write(1)
        write(2)
    (w,) = _caught(lambda: write(2), "create(2) after create(2)")
    assert "it replaces" in str(w.message) and w.filename == __file__
    (w,) = _caught(lambda: write(1), "create(1) after create(2)")
    assert "older than step 2" in str(w.message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write(3)
