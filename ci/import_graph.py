"""The import graph of ckptio and its cycles (issue 24's "import circles" figure).

Every ``import`` counts, at module level or inside a function (a function-level import hides a circle, it does
not remove it); imports under ``if TYPE_CHECKING:`` do not (they never run). ``backends/`` is read as
``ckptio.backends`` (its installed name). Prints each cycle (a strongly connected component of more than one
module) with the edges inside it, and exits 1 if there is any.

    python ci/import_graph.py            # from the repository root
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ((ROOT / "ckptio", "ckptio"), (ROOT / "backends", "ckptio.backends"))


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for base, package in PACKAGES:
        for path in sorted(base.rglob("*.py")):
            parts = [p for p in path.relative_to(base).with_suffix("").parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skipped.update(id(n) for n in ast.walk(child))
    return skipped


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            package = package[:len(package) - (node.level - 1)]
            base = ".".join(package + ([node.module] if node.module else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    out = []
    for name in names:
        while name not in known and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in known and name != module:
            out.append(name)
    return out


def graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports."""
    known = modules()
    edges: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skipped:
                edges[module].update(_targets(module, path, node, known))
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(edges)))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def main() -> int:
    edges = graph()
    found = cycles(edges)
    for component in found:
        print(f"cycle of {len(component)}: {' '.join(component)}")
        for m in component:
            print(f"    {m} -> {', '.join(sorted(edges[m] & set(component)))}")
    print(f"{len(found)} import cycle(s) among {len(edges)} modules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
