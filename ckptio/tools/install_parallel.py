"""``ckptio-install-parallel {hdf5,pnetcdf}``: build the parallel Python bindings ckptio's HDF5 and PnetCDF
backends write with, into the running Python (a venv), against the site's MPI and libraries.

Why a command and not a pip extra: ``pip install ckptio[hdf5]`` can only install the serial h5py wheel from PyPI
(parallel h5py must be compiled with ``HDF5_MPI=ON`` against a parallel HDF5, which no extra can ask for), and
pnetcdf-python 1.0.0 does not compile against Open MPI (it declares MPI handles as C ``int``, MPICH's ABI:
``invalid operands to binary <<``). This command runs the exact pip commands (printed first; ``--dry-run``
prints only) and, for pnetcdf, applies :func:`patch_pnetcdf` to the sdist (MPI handle types taken from mpi4py,
correct for every MPI), then checks the result imports (h5py: with MPI).

Environment: ``MPICC`` (default ``mpicc``; Cray: ``cc``), ``HDF5_DIR`` (a parallel HDF5 prefix) or
``HDF5_PKGCONFIG_NAME`` for hdf5 (neither set: the distribution's parallel HDF5 for MPICC's MPI, Debian's
``/usr/lib/<triplet>/hdf5/openmpi`` as ``HDF5_PKGCONFIG_NAME=hdf5-openmpi`` or ``.../hdf5/mpich`` as ``HDF5_DIR``),
``PNETCDF_DIR`` (a PnetCDF >= 1.12.3 prefix; default: ``pnetcdf-config`` on ``PATH``) for pnetcdf. Build
prerequisites (Cython, setuptools, wheel, pkgconfig, numpy, mpi4py) are installed first: both builds need
``--no-build-isolation`` (h5py's isolated build compiles its own mpi4py and needs ~18 GB of memory). mpi4py itself
is not rebuilt: on a cluster install it first with ``MPICC=mpicc pip install --no-binary=mpi4py mpi4py``
(docs/installation.md, "Installing on a cluster").

Standard library only (no ckptio import), so ``ci/install.sh`` can run it by path before ckptio is installed.
Local: one process, never inside an MPI job.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

H5PY_VERSION = "3.16.0"
PNETCDF_VERSION = "1.0.0"  # patch_pnetcdf is written against this sdist
# setuptools 77: PEP 639 license strings, which h5py 3.16's pyproject uses (65, a new venv's, fails)
PREREQUISITES = ["Cython>=3", "setuptools>=77", "wheel", "pkgconfig", "numpy", "mpi4py>=3.1"]
PNETCDF_MPI_NAMES = ["MPI_DATATYPE_NULL", "MPI_CHAR", "MPI_BYTE", "MPI_UNSIGNED_CHAR", "MPI_SHORT",
                     "MPI_UNSIGNED_SHORT", "MPI_INT", "MPI_UNSIGNED", "MPI_LONG_LONG", "MPI_UNSIGNED_LONG_LONG",
                     "MPI_FLOAT", "MPI_DOUBLE"]


class InstallError(RuntimeError):
    """A prerequisite is missing or a step failed; the message says what to set or run."""


def patch_pnetcdf(root: Path) -> None:
    """Patch the unpacked pnetcdf-python 1.0.0 sdist at ``root`` to take the MPI handle types and constants from
    ``mpi4py.libmpi`` instead of declaring them as C ``int`` (which only MPICH's ABI satisfies), so it compiles
    against Open MPI too and stays right for MPICH. Raises InstallError if the sources are not the expected ones
    (nothing half-patched is built: every check runs before any file is written)."""
    pxi, utils, variable = (root / "include/PnetCDF.pxi", root / "src/pnetcdf/_utils.pyx",
                            root / "src/pnetcdf/_Variable.pyx")
    try:
        s = pxi.read_text()
        for t in ("MPI_Comm", "MPI_Info", "MPI_Offset", "MPI_Datatype"):
            if f"    ctypedef int {t}\n" not in s:
                raise InstallError(f"{pxi}: no 'ctypedef int {t}' (not pnetcdf-python {PNETCDF_VERSION}?)")
            s = s.replace(f"    ctypedef int {t}\n", "")
        for n in PNETCDF_MPI_NAMES:
            s, k = re.subn(rf"^[ \t]+{n}[ \t]*\n", "", s, flags=re.M)
            if k != 1:
                raise InstallError(f"{pxi}: {n} declared {k} times, expected once")
        hdr = 'cdef extern from "pnetcdf.h":'
        if hdr not in s:
            raise InstallError(f"{pxi}: no {hdr!r}")
        s = s.replace(hdr, "from mpi4py.libmpi cimport MPI_Comm, MPI_Info, MPI_Offset, MPI_Datatype, "
                      + ", ".join(PNETCDF_MPI_NAMES) + "\n\n" + hdr, 1)
        u = utils.read_text()
        a = u.index("_nptompitype = {'S1' : MPI_CHAR,")
        b = u.index("}", a) + 1
        u = u[:a] + re.sub(r": MPI_(\w+)", r": MPI.\1", u[a:b]) + u[b:]  # mpi4py objects, not C ints
        v = variable.read_text()
        if "bufftype = buftype.ob_mpi" not in v:
            raise InstallError(f"{variable}: no 'bufftype = buftype.ob_mpi'")
        v = v.replace("bufftype = buftype.ob_mpi", "bufftype = (<Datatype?>buftype).ob_mpi")
    except (OSError, ValueError) as exc:
        raise InstallError(f"{root} is not the pnetcdf-python {PNETCDF_VERSION} source: {exc}") from None
    pxi.write_text(s)
    utils.write_text(u)
    variable.write_text(v)


def _pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]


def _show(env: dict[str, str], cmd: list[str]) -> str:
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), *map(shlex.quote, cmd)])


def _mpicc() -> str:
    mpicc = os.environ.get("MPICC", "mpicc")
    if shutil.which(mpicc) is None:
        raise InstallError(f"MPICC={mpicc} is not on PATH: load your MPI module or set MPICC to the site MPI's C "
                           "compiler wrapper (Cray: MPICC=cc)")
    return mpicc


# Debian/Ubuntu install each MPI flavour's parallel HDF5 under /usr/lib/<triplet>/hdf5/<flavour> (libhdf5-openmpi-dev,
# libhdf5-mpich-dev) with a pkg-config name hdf5-<flavour>. For Open MPI the pkg-config name is what h5py needs;
# for MPICH it is not enough (h5py then linked Open MPI's HDF5, checked with ldd by ci/install.sh): the prefix is.
DEBIAN_HDF5 = "/usr/lib/*/hdf5/{flavour}"
APT_HDF5 = {"openmpi": "libhdf5-openmpi-dev", "mpich": "libhdf5-mpich-dev"}


def mpi_flavour(mpicc: str) -> str | None:
    """"openmpi", "mpich" or None (unknown) for the MPI C compiler wrapper ``mpicc``, from the file it resolves to
    (Debian: /usr/bin/mpicc -> mpicc.openmpi -> opal_wrapper, or mpicc.mpich): no compiler run."""
    path = shutil.which(mpicc)
    if path is None:
        return None
    names = " ".join([os.path.basename(path), os.path.basename(os.path.realpath(path))]).lower()
    if "openmpi" in names or "opal_wrapper" in names:
        return "openmpi"
    if "mpich" in names:
        return "mpich"
    return None


def debian_hdf5(mpicc: str, root: str = "/") -> dict[str, str]:
    """The setting (``HDF5_PKGCONFIG_NAME`` or ``HDF5_DIR``) of the distribution's parallel HDF5 matching ``mpicc``
    when HDF5_DIR and HDF5_PKGCONFIG_NAME are both unset. Raises InstallError saying exactly what to set (or
    which package to install) when it cannot tell. ``root``: where /usr is (tests)."""
    flavour = mpi_flavour(mpicc)
    found = {f: sorted(glob.glob(os.path.join(root, DEBIAN_HDF5.format(flavour=f).lstrip("/"))))
             for f in APT_HDF5}
    found = {f: [d for d in dirs if os.path.isdir(os.path.join(d, "include"))] for f, dirs in found.items()}
    generic = ("set HDF5_DIR to a parallel HDF5 prefix (after `module load` of your parallel HDF5: often $HDF5_DIR "
               "already; Cray: $HDF5_DIR of cray-hdf5-parallel) or HDF5_PKGCONFIG_NAME")
    if flavour is None:
        layouts = ", ".join(f"{f}: {found[f][0]}" for f in APT_HDF5 if found[f])
        raise InstallError(f"{generic}; MPICC={mpicc} is neither Debian's Open MPI nor its MPICH wrapper, so "
                           "the distribution's parallel HDF5 cannot be chosen for it"
                           + (f" (found {layouts})" if layouts else ""))
    if not found[flavour]:
        raise InstallError(f"{generic}. MPICC={mpicc} is {flavour} and no {DEBIAN_HDF5.format(flavour=flavour)} "
                           f"exists: on Debian/Ubuntu `apt-get install {APT_HDF5[flavour]}` first, then "
                           + ("`HDF5_PKGCONFIG_NAME=hdf5-openmpi ckptio-install-parallel hdf5`" if flavour == "openmpi"
                              else "`HDF5_DIR=/usr/lib/<triplet>/hdf5/mpich ckptio-install-parallel hdf5`"))
    if flavour == "openmpi":
        return {"HDF5_PKGCONFIG_NAME": "hdf5-openmpi"}
    return {"HDF5_DIR": found[flavour][0]}


def hdf5_steps(root: str = "/") -> list[tuple[dict[str, str], list[str]]]:
    """(extra environment, command) of each step installing parallel h5py. HDF5_DIR, else HDF5_PKGCONFIG_NAME,
    else the distribution's layout (:func:`debian_hdf5`; the default pkg-config name, ``hdf5``, is a serial HDF5
    on most systems, so it is never assumed); InstallError naming what to set when none applies."""
    mpicc = _mpicc()
    env = {"HDF5_MPI": "ON", "CC": mpicc}
    if os.environ.get("HDF5_DIR"):
        env["HDF5_DIR"] = os.environ["HDF5_DIR"]
    elif os.environ.get("HDF5_PKGCONFIG_NAME"):
        env["HDF5_PKGCONFIG_NAME"] = os.environ["HDF5_PKGCONFIG_NAME"]
    else:
        env.update(debian_hdf5(mpicc, root))
    return [({}, _pip("install", *PREREQUISITES)),
            (env, _pip("install", "--no-binary=h5py", "--no-build-isolation", "--no-cache-dir", "--force-reinstall",
                       "--no-deps", f"h5py=={H5PY_VERSION}"))]


def pnetcdf_steps(workdir: str) -> list[tuple[dict[str, str], list[str] | str]]:
    """(extra environment, command or the marker "patch") of each step installing patched pnetcdf-python."""
    env = {"CC": _mpicc()}
    prefix = os.environ.get("PNETCDF_DIR")
    if prefix:
        if not os.access(os.path.join(prefix, "bin", "pnetcdf-config"), os.X_OK):
            raise InstallError(f"no {prefix}/bin/pnetcdf-config: PNETCDF_DIR must be a PnetCDF install prefix")
        env["PNETCDF_DIR"] = prefix
        env["LDFLAGS"] = f"{os.environ.get('LDFLAGS', '')} -Wl,-rpath,{prefix}/lib".strip()  # found at run time
    elif shutil.which("pnetcdf-config") is None:
        raise InstallError("no pnetcdf-config on PATH: load your PnetCDF module or set PNETCDF_DIR to a PnetCDF "
                           ">= 1.12.3 prefix (Debian: apt-get install libpnetcdf-dev pnetcdf-bin)")
    src = os.path.join(workdir, f"pnetcdf-{PNETCDF_VERSION}")
    return [({}, _pip("install", *PREREQUISITES)),
            ({}, _pip("download", "--no-deps", "--no-binary=:all:", "--no-build-isolation", "-d", workdir,
                      f"pnetcdf=={PNETCDF_VERSION}")),
            ({}, "patch"),
            (env, _pip("install", "--no-build-isolation", "--no-cache-dir", "--force-reinstall", "--no-deps", src))]


CHECKS = {"hdf5": "import h5py; assert h5py.get_config().mpi, 'h5py was built without MPI'",
          "pnetcdf": "import pnetcdf"}


def install(what: str, dry_run: bool = False, out=sys.stdout) -> None:
    """Run (or with ``dry_run`` only print) the steps installing ``what`` ("hdf5" or "pnetcdf"), then check it.
    Raises InstallError."""
    with tempfile.TemporaryDirectory(prefix="ckptio-install-") as workdir:
        steps = hdf5_steps() if what == "hdf5" else pnetcdf_steps(workdir)
        for env, cmd in steps:
            if cmd == "patch":
                print(f"# patch pnetcdf-python {PNETCDF_VERSION} (MPI handle types from mpi4py.libmpi): "
                      f"tar xzf {workdir}/pnetcdf-{PNETCDF_VERSION}.tar.gz; "
                      "ckptio.tools.install_parallel.patch_pnetcdf",
                      file=out, flush=True)
                if not dry_run:
                    with tarfile.open(os.path.join(workdir, f"pnetcdf-{PNETCDF_VERSION}.tar.gz")) as tar:
                        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # 3.10.12+
                        tar.extractall(workdir, **safe)
                    patch_pnetcdf(Path(workdir) / f"pnetcdf-{PNETCDF_VERSION}")
                continue
            print(_show(env, cmd), file=out, flush=True)
            if not dry_run and subprocess.run(cmd, env={**os.environ, **env}).returncode != 0:
                raise InstallError(f"this step failed (its output is above): {_show(env, cmd)}")
        check = [sys.executable, "-c", CHECKS[what]]
        print(_show({}, check), file=out, flush=True)
        if not dry_run:
            env = {**os.environ, "MPI4PY_RC_INITIALIZE": "false"}  # import checks only: no MPI_Init
            if subprocess.run(check, env=env).returncode != 0:
                raise InstallError(f"{what}: the installed module does not pass {CHECKS[what]!r}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ckptio-install-parallel", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["hdf5", "pnetcdf"], help="hdf5: parallel h5py; pnetcdf: pnetcdf-python")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument("--patch-only", metavar="SOURCE_DIR",
                   help="pnetcdf: only patch the unpacked pnetcdf-python sdist in SOURCE_DIR (for build scripts "
                        "that download and build it themselves, like ci/install.sh)")
    args = p.parse_args(argv)
    try:
        if args.patch_only:
            if args.what != "pnetcdf":
                raise InstallError("--patch-only applies to pnetcdf only")
            patch_pnetcdf(Path(args.patch_only))
            print(f"ckptio-install-parallel: patched {args.patch_only}")
            return 0
        install(args.what, args.dry_run)
    except InstallError as exc:
        print(f"ckptio-install-parallel: error: {exc}", file=sys.stderr)
        return 2
    if not args.dry_run:
        print(f"ckptio-install-parallel: {args.what} installed and checked in {sys.prefix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
