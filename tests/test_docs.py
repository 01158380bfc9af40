"""The documentation's own checks that need no Sphinx (issue 27, item 1; the Sphinx build with warnings as errors
is `make docs`, a part of .ci/run):

* every relative link of the repository's Markdown files resolves (ci/check_links.py), and the checker does fail
  on a broken file link and on a broken heading anchor;
* the user guide's pages are found by a glob (other branches add docs/guide/*.md without touching an index);
* the README stays a quick start: two screens of prose around its two drivers, the two commands exactly.
"""

from __future__ import annotations

import re
import subprocess
import sys

from mpi_helpers import REPO

CHECK = [sys.executable, str(REPO / "ci" / "check_links.py")]


def test_every_relative_link_of_the_markdown_files_resolves():
    proc = subprocess.run(CHECK, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "relative links of" in proc.stdout


def test_the_link_checker_finds_broken_files_and_anchors(tmp_path):
    page = REPO / "docs" / "guide" / "_check_links_probe.md"  # inside the tree: links are relative to it
    try:
        page.write_text("# Probe\n\n[ok](cli.md#ls-diff-dump-convert) [file](nowhere.md) [anchor](cli.md#no-such)\n"
                        "```\n[in a code block](ignored.md)\n```\n`[inline code](ignored.md)`\n")
        proc = subprocess.run([*CHECK, str(page)], capture_output=True, text=True, timeout=120, cwd=REPO)
    finally:
        page.unlink()
    assert proc.returncode == 1, proc.stdout
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, lines
    assert "[nowhere.md]: no such file" in lines[0] and "no heading '#no-such' in docs/guide/cli.md" in lines[1]


def test_the_guide_is_a_glob_toctree():
    index = (REPO / "docs" / "guide" / "index.md").read_text()
    assert re.search(r"```\{toctree\}\n(:[^\n]*\n)*:glob:\n", index), index
    assert "\n*\n" in index


def test_readme_is_a_quick_start():
    text = (REPO / "README.md").read_text()
    assert "make demo    #" in text and "make test    #" in text
    prose = re.sub(r"<!-- snippet:driver-[\w-]+ -->.*?<!-- /snippet -->", "", text, flags=re.S)
    # about a screen (60 lines), plus the short "Multi-level checkpoints" section issue 28 asks the README for
    assert len(prose.splitlines()) <= 68, "the README's text around the drivers must fit on about a screen"
    for target in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (REPO / target).exists(), target
