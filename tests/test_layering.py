"""Who may enter a collective (issue 24's layers): only the coordination package ``ckptio/coord/``.

A communicator collective, a point-to-point call or a communicator constructor anywhere else in ``ckptio/`` or
``backends/`` fails here (``ci/structure.py``'s ``raw_collectives`` finds them, with the AST). The one kind of
exception is named below with its reason and its owner; an exception that is no longer needed fails too, so
the list only shrinks. Every function of ``ckptio/coord/`` says which ranks call it ("Collective over X" or
"Local")."""

from __future__ import annotations

import ast
import re
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "ci"))

import structure  # noqa: E402

# "path: call" (no line number, so that edits above it do not matter) -> why it is still there
NOT_YET_IN_COORD: dict[str, str] = {}  # every collective goes through ckptio.coord now (the list is how a known
# exception would be named, with its reason; the test fails when an entry is no longer found)


def _without_line(found: str) -> str:
    path, _line, call = found.split(":", 2)
    return f"{path}:{call}"


def test_no_raw_collective_outside_coord():
    found = structure.raw_collectives()
    unexplained = [f for f in found if _without_line(f) not in NOT_YET_IN_COORD]
    assert not unexplained, ("communicator collectives outside ckptio/coord/ (go through ckptio.coord: agreement, "
                             "comms or exchange):\n" + "\n".join(unexplained))
    stale = sorted(set(NOT_YET_IN_COORD) - {_without_line(f) for f in found})
    assert not stale, f"no longer found, remove from NOT_YET_IN_COORD: {stale}"


def test_the_lint_sees_raw_collectives_and_spares_coord_and_file_collectives(tmp_path, monkeypatch):
    """The lint can fail: a raw broadcast, split, barrier or send in a core module is found; the same calls in
    ckptio/coord/ and a format library's file collectives are not."""
    (tmp_path / "ckptio" / "coord").mkdir(parents=True)
    (tmp_path / "backends").mkdir()
    (tmp_path / "ckptio" / "core.py").write_text(textwrap.dedent("""
        def f(comm, fh, buf):
            comm.bcast(1, root=0)
            sub = comm.Split(0, 0)
            sub.Barrier()
            comm.Isend(buf, 1)
            fh.Write_at_all(0, buf)
        """))
    (tmp_path / "ckptio" / "coord" / "agreement.py").write_text("def g(comm):\n    return comm.allreduce(1)\n")
    (tmp_path / "backends" / "fmt.py").write_text("def h(fh, buf):\n    fh.Read_at_all(0, buf)\n")
    monkeypatch.setattr(structure, "ROOT", tmp_path)
    found = [_without_line(f) for f in structure.raw_collectives()]
    assert found == ["ckptio/core.py: comm.bcast", "ckptio/core.py: comm.Split", "ckptio/core.py: sub.Barrier",
                     "ckptio/core.py: comm.Isend"]


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


@pytest.mark.parametrize("module", sorted(p.name for p in (REPO / "ckptio" / "coord").glob("*.py")))
def test_every_coord_function_says_which_ranks_call_it(module):
    path = REPO / "ckptio" / "coord" / module
    silent = []
    for fn in _functions(ast.parse(path.read_text())):
        doc = ast.get_docstring(fn) or ""
        if not re.search(r"Collective over|\bLocal\b", doc):
            silent.append(f"{module}:{fn.lineno} {fn.name}")
    assert not silent, "functions of ckptio/coord/ must say 'Collective over X' or 'Local': " + ", ".join(silent)


def test_coord_is_a_package_and_keeps_its_api():
    """``from ckptio import coord; coord.run(...)`` and ``from ckptio.coord import agree`` work as before the
    package (the write side and the backends rely on it)."""
    assert not (REPO / "ckptio" / "coord.py").exists()
    import ckptio.coord as coord
    from ckptio.coord import agreement, comms, held_signals

    for name in ("agree", "run", "count_ranks", "gather_and_plan", "bcast_from_root", "scatter_from_root"):
        assert getattr(coord, name) is getattr(agreement, name), name
    for name in ("collective_section", "deliver_held_signals"):  # (their own module since the watchdog fix)
        assert getattr(coord, name) is getattr(held_signals, name), name
    assert coord.node_leader is comms.node_leader


def test_mpi4py_mpi_is_imported_in_one_place():
    """``ckptio.coord.mpi`` is the one module that imports ``mpi4py.MPI`` (issue 24 item 5); every other module of
    ckptio/ and backends/ takes it from there, inside the function that needs it."""
    found = []
    for path in sorted([*(REPO / "ckptio").rglob("*.py"), *(REPO / "backends").rglob("*.py")]):
        if path == REPO / "ckptio" / "coord" / "mpi.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.ImportFrom) and node.module == "mpi4py" and any(
                    a.name == "MPI" for a in node.names)) or (isinstance(node, ast.Import) and any(
                    a.name == "mpi4py.MPI" for a in node.names)):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, f"mpi4py.MPI imported outside ckptio/coord/mpi.py: {found}"


# What a rank decides from its own environment or MPI state (``ckptio.coord.hints``): the engine asks, agrees and
# hands the answer over; a backend asking itself could answer differently on another rank
LOCAL_DECISIONS = frozenset({"collective_write_hazard", "uses_romio", "io_component"})


def backend_setting_reads(root: Path) -> list[str]:
    """Where a module of ``root/backends`` reads a setting or decides from its own rank's environment: imports of
    ``ckptio.settings``, ``CKPTIO_*`` names, ``os.environ``/``os.getenv``, the local decisions of
    ``ckptio.coord.hints``."""
    found = []
    for path in sorted((root / "backends").rglob("*.py")):
        where = path.relative_to(root)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in ("ckptio", "ckptio.settings") and (
                    node.module == "ckptio.settings" or any(a.name == "settings" for a in node.names)):
                found.append(f"{where}:{node.lineno}: imports ckptio.settings")
            elif isinstance(node, ast.Import) and any(a.name == "ckptio.settings" for a in node.names):
                found.append(f"{where}:{node.lineno}: imports ckptio.settings")
            elif isinstance(node, ast.ImportFrom) and node.module == "ckptio.coord.hints" and any(
                    a.name in LOCAL_DECISIONS for a in node.names):
                found.append(f"{where}:{node.lineno}: imports a local decision of ckptio.coord.hints")
            elif isinstance(node, ast.Attribute) and (node.attr in ("environ", "getenv") or (
                    node.attr in LOCAL_DECISIONS)):
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(
                    r"CKPTIO_[A-Z_]+", node.value):
                found.append(f"{where}:{node.lineno}: {node.value}")
    return found


def test_no_backend_reads_a_setting():
    """A backend reads no ``CKPTIO_*`` setting and decides nothing from its own rank's environment (neither
    ``ckptio.settings``, nor ``os.environ``, nor ``coord.hints``' local decisions): what must be the same on every
    rank (transfer mode, how restart aggregators open the file, hints) is the engine's agreed answer, handed over in
    ``CreateOptions`` and the ``open_extents`` call (issue 24: a setting read inside a backend was a choice one rank
    could make differently from another)."""
    found = backend_setting_reads(REPO)
    assert not found, f"settings read in backends/: {found}"


@pytest.mark.parametrize("line", [
    "from ckptio import settings", "import ckptio.settings", "from ckptio.settings import get",
    "from ckptio.coord.hints import collective_write_hazard", "from ckptio.coord.hints import uses_romio",
    "x = os.environ.get('OMPI_MCA_io')", "x = os.getenv('X')", "x = hints.uses_romio()", "x = 'CKPTIO_READ_IO'"])
def test_the_setting_lint_sees_each_kind_of_read(tmp_path, line):
    (tmp_path / "backends").mkdir()
    (tmp_path / "backends" / "fourth.py").write_text(f"import os\n{line}\n")
    assert backend_setting_reads(tmp_path), line
