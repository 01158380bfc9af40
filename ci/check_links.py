#!/usr/bin/env python3
"""Check the relative links of the repository's Markdown files: every ``[text](path)`` and ``[text](path#anchor)``
that is not a URL must name an existing file or directory, and an ``#anchor`` into a Markdown file must match one
of its headings (GitHub's slugs). External links (``http:``, ``https:``, ``mailto:``) are never fetched: CI has no
network for them and their state is not this repository's.

Usage: ``python ci/check_links.py [FILE_OR_DIR ...]`` (default: README.md, CONTRIBUTING.md, CHANGELOG.md and every
``*.md`` under docs/, benchmarks/, fortran_bindings/, examples/, tests/). Exit 1 with one line per broken link.
Standard library only (``make docs`` runs it; ``tests/test_docs.py`` too).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md", "docs", "benchmarks", "fortran_bindings", "examples",
           "tests"]
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")   # [text](target), text may hold [x]
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
SKIP_DIRS = {".venv", ".venv-mpich", "_build", "build", "bench_results", ".git"}


def slug(heading: str) -> str:
    """GitHub's anchor of a heading (also what MyST's myst_heading_anchors produces for these headings)."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def anchors(path: Path) -> set[str]:
    """The heading anchors of ``path``, with those of the Markdown files it includes (MyST ``{include}``)."""
    found: set[str] = set()
    for inc in re.findall(r"^```\{include\}\s+(\S+\.md)\s*$", path.read_text(encoding="utf-8"), re.M):
        found |= anchors((path.parent / inc).resolve())
    counts: dict[str, int] = {}
    for _, line in prose_lines(path):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(2))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def check_file(path: Path) -> list[str]:
    problems = []
    for number, line in prose_lines(path):
        line = re.sub(r"`[^`]*`", "", line)  # links inside inline code are text
        for target in [*LINK.findall(line), *IMAGE.findall(line)]:
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:, ...
                continue
            name, _, anchor = target.partition("#")
            dest = (path.parent / name).resolve() if name else path
            where = f"{path.relative_to(ROOT)}:{number}: [{target}]"
            if not dest.exists():
                shown = dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest
                problems.append(f"{where}: no such file {shown}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where}: no heading '#{anchor}' in {dest.relative_to(ROOT)}")
    return problems


def markdown_files(args: list[str]) -> list[Path]:
    files = []
    for arg in args or DEFAULT:
        p = (ROOT / arg) if not Path(arg).is_absolute() else Path(arg)
        if p.is_dir():
            files += [f for f in sorted(p.rglob("*.md")) if not SKIP_DIRS & set(f.relative_to(ROOT).parts)]
        elif p.exists():
            files.append(p)
    return files


def main(argv: list[str]) -> int:
    files = markdown_files(argv)
    problems = [p for f in files for p in check_file(f)]
    for p in problems:
        print(p)
    if problems:
        print(f"check_links: {len(problems)} broken relative link(s) in {len(files)} Markdown files", file=sys.stderr)
        return 1
    print(f"check_links: the relative links of {len(files)} Markdown files resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
