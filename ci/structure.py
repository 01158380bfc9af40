"""Issue 24's structure figures, measured on the tree (the "Done means" table of the structural step).

    python ci/structure.py           # the table, from the repository root
    python ci/structure.py --json    # the same figures as JSON (tests/test_structure.py reads them)

Every figure is computed from the source with :mod:`ast` (no imports of ckptio, no MPI), so it is the same on
every machine. What each one counts:

* ``import_cycles``: cycles of the module import graph, function-level imports counted (``ci/import_graph.py``).
* ``raw_collectives``: calls of communicator collectives or communicator constructors (``allreduce``, ``Bcast``,
  ``Barrier``, ``Split``, ``Dup``, ...) and point-to-point calls (``Isend``, ``Irecv``, ...) outside
  ``ckptio/coord/``. File collectives of a format library (``Write_all``, ``Read_all``, ``File.Open``) are a
  backend's own data transfer and do not count.
* ``backend_coord_calls`` / ``backend_rank0_branches`` / ``backend_barriers``: in ``backends/``, uses of
  ``ckptio.coord``, comparisons of a rank with 0 (``Get_rank() == 0``, ``rank == 0``) and ``Barrier`` calls.
* ``backend_core_modules`` / ``backend_core_names``: the most ``ckptio`` modules (outside ``backends/``) and
  imported names of any one backend module.
* ``core_importing_backend``: modules of ``ckptio/`` that import a specific backend module (anything in
  ``backends/`` but the package itself and ``base``).
* ``commit_copies``: definitions of a commit sequence: functions named ``commit`` that write a completion mark.
* ``largest_module`` / ``largest_class``: lines of the longest module and class of ``ckptio/`` and ``backends/``.
* ``top_level_modules``: modules directly in ``ckptio/`` (the rest live in the layer subpackages).
* ``document_subscripts``: subscripts with a string key that is a metadata-document key (``meta["variables"]``,
  ``var["dtype"]``...) outside ``ckptio/model/``; not those of an ``.attrs`` (HDF5/netCDF attributes, user
  attributes), whose keys are never the document's.
* ``report_subscripts`` (no target): the same subscripts in the modules that build a tool's own JSON report
  (``REPORT_MODULES``), whose dicts are those reports, not the document.
* ``embedded_programs``: string literals in ``tests/`` that hold an MPI program (they import ``mpi4py`` or
  ``ckptio`` and span several lines); docstrings, which describe programs, are not programs.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ci"))

import import_graph  # noqa: E402

COLLECTIVES = {
    "allreduce", "Allreduce", "bcast", "Bcast", "gather", "Gather", "Gatherv", "allgather", "Allgather",
    "Allgatherv", "scatter", "Scatter", "Scatterv", "alltoall", "Alltoall", "Alltoallv", "Alltoallw", "Barrier",
    "barrier", "reduce", "Reduce", "scan", "Scan", "exscan", "Exscan", "Split", "Split_type", "Dup", "Create_group",
    "Isend", "Irecv", "Send", "Recv", "send", "recv", "isend", "irecv", "Sendrecv", "sendrecv", "Ibarrier",
    "Iallreduce", "Ibcast",
}
# Keys of the metadata document (ckptio.model.meta's schema): a string subscript with one of these is the document
# read as a dict.
DOCUMENT_KEYS = {
    "schema", "ckptio_version", "backend", "backend_format_version", "created", "nprocs", "byteorder", "checksum",
    "attrs", "layout", "hints", "stats", "variables", "variable_blocks", "series", "dtype", "shape", "kind",
    "blocks", "dims", "storage", "nblocks", "file_offset", "file_dtype", "stripe_count", "stripe_unit", "fs",
    "requested", "effective", "io_component", "write", "seconds", "bytes", "placement", "stored_nbytes", "codec",
    "plain_skipped", "offset", "rank",
}
# Modules that build and print a tool's own JSON report (``ckptio plan --json``: :func:`ckptio.tools.simulate.simulate`;
# the scale harness's result: ckptio/tools/scale.py). Their dicts are those reports ("scenario", "write", "bytes",
# "seconds" are report fields that happen to share a name with document keys); the document reaches them typed
# (``metamod.loads``). Their keyed subscripts are counted apart, as ``report_subscripts``, not as the document's.
REPORT_MODULES = {"ckptio/tools/simulate.py", "ckptio/tools/scale.py"}
SPECIFIC_BACKENDS = {"mpiio", "hdf5", "pnetcdf", "rawio", "h5lite"}


def _python_files(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py"))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _call_name(node: ast.Call) -> str | None:
    return node.func.attr if isinstance(node.func, ast.Attribute) else None


def raw_collectives() -> list[str]:
    found = []
    for path in _python_files("ckptio", "backends"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("ckptio/coord/"):
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Call) and _call_name(node) in COLLECTIVES:
                receiver = ast.unparse(node.func.value)  # type: ignore[attr-defined]
                if receiver in ("MPI.File", "os", "subprocess", "re", "json", "self.fh", "fh", "catalog") or (
                        "info" in receiver.lower() or receiver.startswith(("np.", "numpy.", "functools"))):
                    # MPI.Info.Dup, catalog.scan, np.lcm.reduce: no communicator
                    continue
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node.func)}")
    return found


def _is_rank0_compare(node: ast.Compare) -> bool:
    text = ast.unparse(node)
    return len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq | ast.NotEq) and (
        "Get_rank()" in text or "rank" in text.split("==")[0].split("!=")[0]) and (
        isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value == 0)


# mpi4py's MPI module, taken from its one import in ckptio (issue 24 item 5): a third-party module, not ckptio's
# own logic, so not counted among the core modules a backend depends on
MPI_ACCESSOR = "ckptio.coord.mpi"
# The storage contract. It re-exports the core's vocabulary a backend needs (model types of its signatures, the
# errors); a backend importing a name from it depends on the contract, not on the module the name comes from, and
# the contract's own module-level imports are that vocabulary, not a dependency of a format.
CONTRACT = "backends/base.py"


def _module_path(dotted: str) -> Path:
    parts = dotted.split(".")
    if parts[:2] == ["ckptio", "backends"]:
        return ROOT.joinpath("backends", *parts[2:])
    return ROOT.joinpath(*parts)


def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module or package of this repository (``ckptio.model.meta``), not a name in one."""
    path = _module_path(dotted)
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def backend_figures() -> dict[str, object]:
    coord_calls, rank0, barriers = [], [], []
    worst_modules, worst_names, worst_where = 0, 0, ""
    for path in _python_files("backends"):
        rel = path.relative_to(ROOT).as_posix()
        tree = _tree(path)
        if rel == CONTRACT:  # its imports are the vocabulary it hands every backend, counted in each that uses it
            tree = ast.Module(body=[n for n in tree.body if not isinstance(n, ast.ImportFrom | ast.Import)],
                              type_ignores=[])
        modules, names = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ckptio") and not node.level:
                if node.module.startswith("ckptio.backends") or node.module == MPI_ACCESSOR:
                    continue
                for a in node.names:  # "from ckptio.model import meta": the module ckptio.model.meta
                    sub = f"{node.module}.{a.name}"
                    modules.add(sub if _is_module(sub) else node.module)
                    names.add(sub)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("ckptio") and not a.name.startswith("ckptio.backends"):
                        modules.add(a.name)
                        names.add(a.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "coord":
                coord_calls.append(f"{rel}:{node.lineno}: coord.{node.attr}")
            elif isinstance(node, ast.Compare) and _is_rank0_compare(node):
                rank0.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.Call) and _call_name(node) == "Barrier":
                barriers.append(f"{rel}:{node.lineno}")
        if (len(modules), len(names)) > (worst_modules, worst_names):
            worst_where = f"{rel}: {', '.join(sorted(modules))}"
        worst_modules, worst_names = max(worst_modules, len(modules)), max(worst_names, len(names))
    return {"backend_coord_calls": coord_calls, "backend_rank0_branches": rank0, "backend_barriers": barriers,
            "backend_core_modules": worst_modules, "backend_core_names": worst_names,
            "backend_core_modules_where": worst_where}


def core_importing_backend() -> list[str]:
    graph = import_graph.graph()
    out = []
    for module, targets in sorted(graph.items()):
        if module.startswith("ckptio.backends"):
            continue
        specific = sorted(t for t in targets
                          if t.startswith("ckptio.backends.") and t.split(".")[-1] in SPECIFIC_BACKENDS)
        if specific:
            out.append(f"{module} -> {', '.join(specific)}")
    return out


def commit_copies() -> list[str]:
    out = []
    for path in _python_files("ckptio", "backends"):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.FunctionDef) and node.name == "commit":
                body = [n for n in node.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
                if not body or all(isinstance(n, ast.Pass) for n in body):
                    continue  # an abstract declaration
                text = ast.unparse(node)
                if "complet" in text.lower() or "trailer" in text.lower() or "mark" in text.lower():
                    out.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}")
    return out


def sizes() -> dict[str, object]:
    module, klass = ("", 0), ("", 0)
    for path in _python_files("ckptio", "backends"):
        text = path.read_text()
        lines = len(text.splitlines())
        rel = path.relative_to(ROOT).as_posix()
        if lines > module[1]:
            module = (rel, lines)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > klass[1]:
                    klass = (f"{rel}:{node.name}", n)
    return {"largest_module": module[1], "largest_module_where": module[0], "largest_class": klass[1],
            "largest_class_where": klass[0]}


def top_level_modules() -> list[str]:
    return sorted(p.name for p in (ROOT / "ckptio").glob("*.py"))


def _attribute_manager(node: ast.expr) -> bool:
    """``x.attrs``: an HDF5/netCDF object's attributes or a record's user attributes (``group.attrs["ckptio_version"]``
    writes an HDF5 attribute): a key there is never one of the document's."""
    return isinstance(node, ast.Attribute) and node.attr == "attrs"


def document_subscripts(reports: bool = False) -> list[str]:
    """Document-key subscripts outside ``ckptio/model/``; with ``reports``, those of :data:`REPORT_MODULES` only."""
    found = []
    for path in _python_files("ckptio", "backends"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("ckptio/model/") or (rel in REPORT_MODULES) != reports:
            continue
        for node in ast.walk(_tree(path)):
            if (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                    and node.slice.value in DOCUMENT_KEYS and not _attribute_manager(node.value)):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring nodes of a module and of its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def embedded_programs() -> list[str]:
    found = []
    for path in _python_files("tests"):
        rel = path.relative_to(ROOT).as_posix()
        tree = _tree(path)
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if id(node) in docstrings:
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.count("\n") >= 3:
                text = node.value
                if ("import ckptio" in text or "from ckptio" in text or "mpi4py" in text) and (
                        "COMM_WORLD" in text or "MPI." in text or "comm" in text):
                    found.append(f"{rel}:{node.lineno}")
    return found


def figures() -> dict[str, object]:
    out: dict[str, object] = {"import_cycles": import_graph.cycles(import_graph.graph()),
                              "raw_collectives": raw_collectives()}
    out.update(backend_figures())
    out["core_importing_backend"] = core_importing_backend()
    out["commit_copies"] = commit_copies()
    out.update(sizes())
    out["top_level_modules"] = top_level_modules()
    out["document_subscripts"] = document_subscripts()
    out["report_subscripts"] = document_subscripts(reports=True)  # shown, no target: see REPORT_MODULES
    out["embedded_programs"] = embedded_programs()
    return out


TARGETS = {"import_cycles": 0, "raw_collectives": 0, "backend_coord_calls": 0, "backend_rank0_branches": 0,
           "backend_barriers": 0, "backend_core_modules": 3, "backend_core_names": 12, "core_importing_backend": 0,
           "commit_copies": 1, "largest_module": 500, "largest_class": 300, "top_level_modules": 12,
           "document_subscripts": 0, "embedded_programs": 0}


def count(value: object) -> int:
    return len(value) if isinstance(value, list) else int(value)  # type: ignore[arg-type]


def main(argv: list[str]) -> int:
    found = figures()
    if "--json" in argv:
        print(json.dumps(found, indent=1))
        return 0
    verbose = "-v" in argv
    for key, target in TARGETS.items():
        value = found[key]
        where = found.get(f"{key}_where", "")
        mark = "ok " if count(value) <= target else "   "
        print(f"{mark} {key:24} {count(value):6}  (target <= {target}) {where}")
        if verbose and isinstance(value, list):
            for item in value:
                print(f"        {item}")
    reports = found["report_subscripts"]
    print(f"    report_subscripts        {len(reports):6}  (no target: a tool's own report, see REPORT_MODULES)")
    if verbose:
        for item in reports:
            print(f"        {item}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
