"""Issue 24's structure figures never get worse (``ci/structure.py`` measures them from the source).

``CEILING`` is the figure each change must stay at or under; a change that improves one lowers its ceiling
here, so the next one cannot undo it. ``ci/structure.py -v`` lists what each figure counts, place by place."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ci"))

import structure

CEILING = {"import_cycles": 0, "raw_collectives": 0, "backend_coord_calls": 0, "backend_rank0_branches": 0,
           "backend_barriers": 0, "backend_core_modules": 3, "backend_core_names": 7, "core_importing_backend": 0,
           "commit_copies": 1, "largest_module": 463, "largest_class": 297, "top_level_modules": 11,
           "document_subscripts": 0, "embedded_programs": 0}

FIGURES = structure.figures()


@pytest.mark.parametrize("key", sorted(CEILING))
def test_structure_figure_does_not_grow(key):
    value = structure.count(FIGURES[key])
    detail = FIGURES[key] if isinstance(FIGURES[key], list) else FIGURES.get(f"{key}_where", "")
    assert value <= CEILING[key], f"{key} grew to {value} (ceiling {CEILING[key]}): {detail}"


def test_every_target_has_a_ceiling():
    assert set(CEILING) == set(structure.TARGETS)


def test_every_package_is_in_the_wheel():
    """Every directory of ckptio/ and backends/ with an __init__.py is a package pyproject.toml lists: a package
    missing there is absent from a wheel (``pip install .``), while an editable install hides it."""
    import tomllib

    root = Path(__file__).resolve().parent.parent
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"ckptio.backends"} | {
        ".".join(init.parent.relative_to(root).parts) for init in (root / "ckptio").rglob("__init__.py")}
    assert found == listed, f"not listed: {sorted(found - listed)}, listed but absent: {sorted(listed - found)}"
