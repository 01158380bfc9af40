"""PEP 517 build backend of ckptio: setuptools' (``setuptools.build_meta``), with the wheel and the sdist built from
a temporary copy of the source tree.

Why: setuptools builds in the current directory, so ``pip install /path/to/ckptio`` left ``build/`` and
``ckptio.egg-info`` in the user's source tree (issue 27, item 7). Here ``build_wheel`` and ``build_sdist`` copy the
sources (without VCS data, venvs, caches and build products) into a temporary directory, build there and
return the artifact in the directory pip asked for; the source tree is only read. Editable installs
(``pip install -e .``, what ``ci/install.sh`` does) are setuptools' own: they must point at the source tree.

Standard library and setuptools only (it runs inside pip's isolated build environment).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - every hook not overridden below is setuptools' own

NOT_SOURCES = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                     ".ruff_cache", ".hypothesis", "bench_results", "_build")


def _in_a_copy(hook: Callable[..., Any], *args: Any) -> Any:
    """Run ``hook(*args)`` with a temporary copy of the source tree as the current directory (paths in ``args``
    must be absolute)."""
    source = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="ckptio-build-") as tmp:
        copy = os.path.join(tmp, "src")
        shutil.copytree(source, copy, ignore=NOT_SOURCES, symlinks=True)
        os.chdir(copy)
        try:
            return hook(*args)
        finally:
            os.chdir(source)


# setuptools answers these by running `egg_info`, which writes ckptio.egg-info into the current directory
def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
    return _in_a_copy(_setuptools.get_requires_for_build_wheel, config_settings)


def get_requires_for_build_sdist(config_settings: dict | None = None) -> list[str]:
    return _in_a_copy(_setuptools.get_requires_for_build_sdist, config_settings)


def build_wheel(wheel_directory: str, config_settings: dict | None = None,
                metadata_directory: str | None = None) -> str:
    return _in_a_copy(_setuptools.build_wheel, os.path.abspath(wheel_directory), config_settings,
                      os.path.abspath(metadata_directory) if metadata_directory else None)


def build_sdist(sdist_directory: str, config_settings: dict | None = None) -> str:
    return _in_a_copy(_setuptools.build_sdist, os.path.abspath(sdist_directory), config_settings)


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: dict | None = None) -> str:
    return _in_a_copy(_setuptools.prepare_metadata_for_build_wheel, os.path.abspath(metadata_directory),
                      config_settings)
