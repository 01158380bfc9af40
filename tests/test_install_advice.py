"""Issue 27, item 5: the install advice a newcomer meets names the command that works.

* ``CapabilityError`` / ``ckptio.backends.MISSING`` for a missing h5py-with-MPI or pnetcdf-python name
  ``ckptio-install-parallel`` and the exact Debian setting (``HDF5_PKGCONFIG_NAME=hdf5-openmpi``), never a raw pip
  command (pnetcdf-python's fails on Open MPI).
* ``ckptio-install-parallel hdf5`` with neither HDF5_DIR nor HDF5_PKGCONFIG_NAME detects Debian's layout
  (``/usr/lib/<triplet>/hdf5/{openmpi,mpich}``) for MPICC's MPI, or says exactly what to set.

The layouts are built under ``tmp_path`` (``root=``) with fake compiler wrappers: no compiler, no pip, no MPI.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ckptio.backends import install_hints
from mpi_helpers import REPO, mpi_env

from ckptio.tools.install_parallel import InstallError, debian_hdf5, hdf5_steps, mpi_flavour


def wrapper(tmp_path, name: str, target: str) -> str:
    """An executable ``bin/name`` resolving (symlink) to ``target``, as Debian's alternatives do."""
    real = tmp_path / "real" / target
    real.parent.mkdir(parents=True, exist_ok=True)
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    link = tmp_path / "bin" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(real)
    return str(link)


def layout(root, *flavours: str) -> None:
    for f in flavours:
        (root / "usr/lib/x86_64-linux-gnu/hdf5" / f / "include").mkdir(parents=True)


def test_flavour_comes_from_the_file_the_wrapper_resolves_to(tmp_path):
    assert mpi_flavour(wrapper(tmp_path, "mpicc", "opal_wrapper")) == "openmpi"
    assert mpi_flavour(wrapper(tmp_path, "mpicc.mpich", "mpicc.mpich")) == "mpich"
    assert mpi_flavour(wrapper(tmp_path, "cc", "craycc")) is None
    assert mpi_flavour(str(tmp_path / "nonexistent")) is None


def test_debian_open_mpi_layout_gives_the_pkgconfig_name(tmp_path):
    layout(tmp_path, "openmpi", "mpich")
    assert debian_hdf5(wrapper(tmp_path, "mpicc", "opal_wrapper"), str(tmp_path)) == \
        {"HDF5_PKGCONFIG_NAME": "hdf5-openmpi"}


def test_debian_mpich_layout_gives_the_prefix(tmp_path):
    """The pkg-config name hdf5-mpich alone made h5py link Open MPI's HDF5: MPICH gets HDF5_DIR."""
    layout(tmp_path, "openmpi", "mpich")
    got = debian_hdf5(wrapper(tmp_path, "mpicc.mpich", "mpicc.mpich"), str(tmp_path))
    assert got == {"HDF5_DIR": str(tmp_path / "usr/lib/x86_64-linux-gnu/hdf5/mpich")}


def test_missing_layout_names_the_package_and_the_exact_setting(tmp_path):
    layout(tmp_path, "mpich")
    with pytest.raises(InstallError) as info:
        debian_hdf5(wrapper(tmp_path, "mpicc", "opal_wrapper"), str(tmp_path))
    message = str(info.value)
    assert "apt-get install libhdf5-openmpi-dev" in message, message
    assert "`HDF5_PKGCONFIG_NAME=hdf5-openmpi ckptio-install-parallel hdf5`" in message, message
    assert "set HDF5_DIR" in message, message


def test_unknown_wrapper_says_what_to_set(tmp_path):
    layout(tmp_path, "openmpi")
    with pytest.raises(InstallError, match=r"set HDF5_DIR .* or HDF5_PKGCONFIG_NAME; MPICC=.*cc is neither") as info:
        debian_hdf5(wrapper(tmp_path, "cc", "craycc"), str(tmp_path))
    assert "found openmpi: " in str(info.value)


def test_explicit_settings_win_over_detection(tmp_path, monkeypatch):
    monkeypatch.setenv("MPICC", wrapper(tmp_path, "mpicc", "opal_wrapper"))
    monkeypatch.setenv("HDF5_DIR", "/opt/phdf5")
    monkeypatch.setenv("HDF5_PKGCONFIG_NAME", "hdf5-custom")
    assert hdf5_steps(str(tmp_path))[1][0]["HDF5_DIR"] == "/opt/phdf5"  # no layout needed
    monkeypatch.delenv("HDF5_DIR")
    env = hdf5_steps(str(tmp_path))[1][0]
    assert env["HDF5_PKGCONFIG_NAME"] == "hdf5-custom" and "HDF5_DIR" not in env


@pytest.mark.parametrize("hint, command", [(install_hints.HDF5, "`ckptio-install-parallel hdf5`"),
                                           (install_hints.PNETCDF, "`ckptio-install-parallel pnetcdf`")])
def test_hints_name_the_command(hint, command):
    assert command in hint and "make install" in hint
    assert "pip install --no" not in hint  # no raw pip command (pnetcdf-python's fails on Open MPI)


def test_missing_lists_the_advice_for_a_blocked_library():
    """What ``ckptio.backends.MISSING`` says when h5py and pnetcdf-python cannot be imported (fresh interpreter)."""
    code = ("import sys, json\nsys.modules['h5py'] = None\nsys.modules['pnetcdf'] = None\n"
            "from ckptio.backends import MISSING\nprint(json.dumps(MISSING))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=mpi_env(),
                          cwd=REPO, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    missing = json.loads(proc.stdout.splitlines()[-1])
    assert "`HDF5_PKGCONFIG_NAME=hdf5-openmpi ckptio-install-parallel hdf5`" in missing["hdf5"], missing
    assert "`ckptio-install-parallel pnetcdf`" in missing["pnetcdf"], missing
