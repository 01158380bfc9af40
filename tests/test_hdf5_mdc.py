"""``backends.hdf5_mdc``: the ctypes mirror of ``H5AC_cache_config_t`` has the C struct's layout, and a struct that
does not look like one HDF5 filled is never written back. That the setting takes in a real parallel file is
checked by ``tests/faults/test_one_client_write_error.py`` (the checkpoint records ``rank 0``)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
from ckptio.backends.hdf5_mdc import DISTRIBUTED, PROCESS_0_ONLY, CacheConfig, plausible
from mpi_helpers import mpi_flavour


def probe_source() -> str:
    """A C program printing the size of ``H5AC_cache_config_t``, then the offset and size of each field the ctypes
    struct declares, in its order."""
    fields = "".join(f'    printf(" %zu %zu", offsetof(T, {name}), sizeof(((T *)0)->{name}));\n'
                     for name, _ in CacheConfig._fields_)
    return ("#include <stdio.h>\n#include <stddef.h>\n#include <hdf5.h>\ntypedef H5AC_cache_config_t T;\n"
            f'int main(void) {{\n    printf("%zu", sizeof(T));\n{fields}    printf("\\n");\n    return 0;\n}}\n')


def test_the_struct_has_the_layout_the_hdf5_headers_give(tmp_path):
    include = Path("/usr/include/hdf5") / mpi_flavour()  # Debian's parallel HDF5 of this venv's MPI
    compiler = shutil.which("mpicc")
    if not (include / "H5ACpublic.h").exists() or compiler is None:
        pytest.skip(f"no parallel HDF5 headers in {include} or no mpicc")
    (tmp_path / "probe.c").write_text(probe_source())
    subprocess.run([compiler, f"-I{include}", "probe.c", "-o", "probe"], cwd=tmp_path, check=True, timeout=120)
    got = subprocess.run([str(tmp_path / "probe")], capture_output=True, text=True, check=True, timeout=60).stdout
    want = [ctypes.sizeof(CacheConfig)]
    for name, kind in CacheConfig._fields_:
        want += [getattr(CacheConfig, name).offset, ctypes.sizeof(kind)]
    assert [int(x) for x in got.split()] == want


def test_only_a_struct_that_looks_filled_by_hdf5_is_taken():
    filled = CacheConfig(version=1, min_clean_fraction=0.3, dirty_bytes_threshold=256 * 1024,
                         metadata_write_strategy=DISTRIBUTED)
    assert plausible(filled)
    assert plausible(CacheConfig(version=1, min_clean_fraction=0.3, dirty_bytes_threshold=256 * 1024,
                                 metadata_write_strategy=PROCESS_0_ONLY))
    assert not plausible(CacheConfig())  # nothing filled in (a call that wrote elsewhere)
    assert not plausible(CacheConfig(version=1, min_clean_fraction=0.3, dirty_bytes_threshold=256 * 1024,
                                     metadata_write_strategy=7))  # a field read from the wrong place
    assert not plausible(CacheConfig(version=1, min_clean_fraction=0.3, dirty_bytes_threshold=3,
                                     metadata_write_strategy=DISTRIBUTED))


def test_an_hdf5_whose_struct_is_not_declared_here_is_left_alone():
    from types import SimpleNamespace

    from ckptio.backends import hdf5_mdc

    newer = SimpleNamespace(version=SimpleNamespace(hdf5_version_tuple=(2, 0, 0)))
    assert hdf5_mdc.metadata_from_rank_0(newer, 1) is False  # (never reaches the library: no h5f module here)
