"""Sphinx configuration of the ckptio documentation: `make docs` (sphinx-build -W -n: warnings, broken internal
cross-references included, are errors). No extension fetches anything from the network (no intersphinx, no
linkcheck): external links are not checked in CI, internal ones are (MyST cross-references, and
ci/check_links.py for the Markdown files outside docs/)."""

import os
import re
import sys
from pathlib import Path

sys.path.insert(0, os.path.abspath(".."))  # the source tree's ckptio, for autodoc (an editable install works too)

project = "ckptio"
author = "the ckptio developers"
copyright = "the ckptio developers, BSD-3-Clause"
from ckptio import __version__ as release  # noqa: E402

version = release

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
root_doc = "index"

myst_heading_anchors = 3          # [text](page.md#a-heading) links, checked like every cross-reference
myst_enable_extensions = ["colon_fence"]
suppress_warnings = ["myst.header"]  # the included benchmarks history starts its sections at level 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_mock_imports = ["h5py", "pnetcdf", "netCDF4", "xarray", "matplotlib", "yt"]
nitpicky = True
# Types from other projects (no intersphinx: the build never touches the network) and private helpers that the
# signatures mention.
nitpick_ignore_regex = [
    ("py:class", r"(numpy|np|mpi4py|MPI|collections|typing|os|pathlib|threading|concurrent)\..*"),
    ("py:class", r"(ndarray|Comm|Intracomm|Info|DTypeLike|ArrayLike|PathLike|Path|Any|Mapping|Sequence|"
                 r"Iterable|Iterator|Callable|Self|T|optional|callable|array-like)"),
    ("py:class", r"ckptio\..*\._.*"),
    # internal modules and helpers the public docstrings mention; they are not part of the API reference
    ("py:(class|obj|func|meth|attr|mod)",
     r"(ckptio\.(staging|staged_reader|plan|extent_table|units|memsel|lazy|hints|async_io)(\..*)?|"
     r"ckptio\.(tiers|model|coord|engine)(\..*)?|"  # the layers (issue 24): internal, not in the API reference
     r"ckptio\.backends\.base\.(ExtentReader|WriteSession)|detect_backend|collective_error_class|"
     r"VariablePlan\.total_blocks|ExtentTable)"),
]

html_theme = "alabaster"
html_static_path = []
html_title = f"ckptio {release}"


# Markdown files outside docs/ are included into pages here (README snippets, the bindings' and the example's
# READMEs, the benchmarks, CONTRIBUTING, CHANGELOG). Their links are written for GitHub, relative to where each file
# lives; when one is included, its links to another included file or to a docs/ page are rewritten to that page,
# so they are checked as cross-references like every other link (-W: a broken one fails the build).
REPO = Path(__file__).resolve().parent.parent
PAGE_OF = {"README.md": "index.md", "CHANGELOG.md": "changelog.md", "CONTRIBUTING.md": "contributing.md",
           "benchmarks/README.md": "benchmarks.md", "benchmarks/HISTORY.md": "benchmarks-history.md",
           "fortran_bindings/README.md": "fortran.md", "examples/flash_like/README.md": "examples.md"}
MD_LINK = re.compile(r"\]\(([^)#\s:]+\.md)(#[^)\s]*)?\)")


def _rewrite_included_links(app, relative_path, parent_docname, content):
    included = (Path(app.srcdir) / relative_path).resolve()

    def page(match):
        target = (included.parent / match.group(1)).resolve()
        rel = target.relative_to(REPO).as_posix() if target.is_relative_to(REPO) else None
        if rel in PAGE_OF:
            new = PAGE_OF[rel]
        elif rel is not None and rel.startswith("docs/"):
            new = rel[len("docs/"):]
        else:
            return match.group(0)
        return f"]({new}{match.group(2) or ''})"  # the including pages sit at the root of docs/

    content[0] = MD_LINK.sub(page, content[0])


def setup(app):
    app.connect("include-read", _rewrite_included_links)
