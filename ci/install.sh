#!/usr/bin/env bash
# ci/install.sh -- build environment for ckptio: MPI, parallel HDF5 / netCDF / PnetCDF and their Python
# bindings in a venv, the test tools, ckptio itself (editable) and, when present, the Fortran/C bindings.
#
# Usage:   bash ci/install.sh                 (or: make install)
#          MPI=mpich bash ci/install.sh       (or: make install MPI=mpich): the second MPI stack, in .venv-mpich
#          VENV=/tmp/v bash ci/install.sh     (VENV defaults to .venv, .venv-mpich for MPI=mpich; a relative VENV is
#                                             taken from the repo root)
#
# Idempotent: a re-run with everything in place does no network access, prints one line and takes seconds.
# Any pinned version below that changes, a missing apt package, a changed pyproject.toml or a change of build
# mode (see below) makes exactly the affected steps run again, followed by a smoke check.
#
# Three modes:
#
#  * Workstation / CI mode (default, MPI=openmpi): Debian 12 (bookworm), root or sudo. Installs Debian's Open MPI 4.1 and the
#    libraries Debian builds against it (parallel HDF5 1.10, PnetCDF 1.12, netCDF-C 4.9 with parallel I/O) plus
#    the command line tools used by the tests (h5dump, ncdump, ncmpidump, strace), then builds the Python
#    bindings against them. PYTHON (default python3; a pyenv CPython 3.11 on the reference machine) makes the
#    venv. MPI4PY_FROM_SOURCE=1 compiles mpi4py (~3 min) instead of using the PyPI wheel (works with Open MPI;
#    it ships Open MPI and MPICH variants and picks one at run time). Changing MPI4PY_FROM_SOURCE does not replace
#    an mpi4py that already passes the checks: `$VENV/bin/pip uninstall -y mpi4py` first.
#
#  * MPICH mode (MPI=mpich; venv .venv-mpich by default): the same on Debian's MPICH 4.0 (ROMIO underneath MPI-IO,
#    like Cray MPICH, Intel MPI, MVAPICH). Installs mpich, libmpich-dev and libhdf5-mpich-dev; takes mpi4py's PyPI
#    wheel and points its MPICH variant at Debian's libmpich.so.12 (patchelf; MPI4PY_FROM_SOURCE=1 compiles it with
#    MPICC=mpicc.mpich instead), compiles h5py with HDF5_DIR=/usr/lib/x86_64-linux-gnu/hdf5/mpich (checked with ldd: h5py's
#    HDF5_PKGCONFIG_NAME=hdf5-mpich alone silently links Open MPI's HDF5), builds PnetCDF from Debian's source package
#    against MPICH into $VENV/pnetcdf (ci/build_pnetcdf.sh) and pnetcdf-python against it, installs the serial
#    netCDF4 wheel (Debian has no MPICH-flavoured netCDF; the tests only read with it), builds the Fortran/C
#    bindings with mpicc.mpich/mpifort.mpich in build/fortran-mpich, and links $VENV/bin/mpirun, mpiexec, mpicc,
#    mpicxx, mpifort, mpif90 to MPICH's, so whoever puts the venv first on PATH (the Makefile, tests/mpi_helpers.py) launches with
#    the matching mpiexec. Debian's update-alternatives for mpi/mpirun keep pointing at Open MPI (checked, and
#    set back if an install changed them). Measured by CI on 2026-11-25 (mpi4py still compiled then): PnetCDF 75 s,
#    venv and wheels 61 s, mpi4py 269 s (the wheel: seconds), h5py 272 s, pnetcdf-python 91 s, the rest 20 s.
#
#  * Cluster mode: set both of
#        MPICC=/path/to/mpicc          the site MPI's C compiler wrapper (mpi4py, h5py, pnetcdf are built with it;
#                                      Cray MPICH: MPICC=cc)
#        HDF5_DIR=/path/to/hdf5        a parallel HDF5 install prefix (include/, lib/)
#    and optionally
#        PNETCDF_DIR=/path/to/pnetcdf  a PnetCDF >= 1.12.3 prefix (pnetcdf-python runs $PNETCDF_DIR/bin/pnetcdf-config);
#                                      without it pnetcdf-python is not installed and ckptio reports the pnetcdf
#                                      backend unavailable ("No module named 'pnetcdf'"); everything else works
#        NETCDF4_DIR=/path/to/netcdf-c a netCDF-C prefix built with parallel I/O (uses its bin/nc-config if present);
#                                      without it the netCDF4 module is skipped with a warning (ckptio itself
#                                      does not need it; tests that cross-check with it should skip).
#    Cluster mode never calls apt-get: load your modules (MPI, HDF5, PnetCDF, cmake, a Python 3.10+ with
#    shared libpython for the Fortran bindings) first. mpi4py is always compiled from source against $MPICC,
#    without pip's wheel cache, so a wheel built for another MPI is never reused. The smoke check runs as an
#    MPI singleton (no launcher); set SMOKE_MPIEXEC="srun -n 2" (or similar) to have it run on 2 ranks.
#    Switching between modes or changing any of these prefixes rebuilds the MPI-dependent packages.
#
# Lessons kept from the verified recipe (shared/reference/install_hpc_stack.sh, INSTALL-FINDINGS.md):
#  - h5py must be built with --no-build-isolation: its isolated build compiles mpi4py 4.0.0, ~18 GB RAM, OOM.
#  - pnetcdf-python 1.0.0 declares MPI handles as C int (MPICH only): patched to take them from mpi4py.libmpi.
#  - netCDF4 against Debian's libnetcdf_mpi: a shim prefix (Debian renames the library and hides its headers),
#    CPPFLAGS (not CFLAGS) -DNC_HAS_BZ2=1 -DNC_HAS_BLOSC=1, and nc_rc_get/nc_rc_set gated on netCDF-C >= 4.9.1.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd -P)
MPI=${MPI:-openmpi}
case $MPI in openmpi) VENV=${VENV:-.venv} ;; mpich) VENV=${VENV:-.venv-mpich} ;;
             *) echo "ci/install.sh: ERROR: MPI=$MPI: expected openmpi or mpich" >&2; exit 2 ;; esac
case $VENV in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
PYTHON=${PYTHON:-python3}
MPI4PY_FROM_SOURCE=${MPI4PY_FROM_SOURCE:-0}

# ---- pinned versions. The two source patches below were written against these exact sdists.
# sphinx, myst-parser and the docutils/markdown-it they were checked with: `make docs` (docs/, warnings as errors).
# yt and its dependencies (tests/test_flash_layout.py loads `convert --to flash` output with yt.load): ~12 s of
# wheels on the reference machine.
MPI4PY_V=4.1.2; H5PY_V=3.16.0; NETCDF4_V=1.7.5.1.post1; PNETCDF_V=1.0.0
WHEELS="pip==26.3 setuptools==84.2.1 wheel==0.48.0
        numpy==2.4.6 zstandard==0.25.0 xxhash==4.1.0 adios2==2.12.1.1001 matplotlib==3.11.2
        pytest==9.2.0 pytest-timeout==2.4.0 hypothesis==6.170.15 ruff==0.17.6 xarray==2026.9.0 pandas==3.1.1
        cftime==1.6.6.1 certifi==2026.10.18 tqdm==4.70.1
        Cython==3.3.1 pkgconfig==1.6.0 packaging==26.3 setuptools-scm==10.3.4
        yt==4.4.3 unyt==3.2.0 sympy==1.14.0 mpmath==1.3.0 cmyt==2.0.4 ewah-bool-utils==1.3.2 more-itertools==11.2.1
        tomli-w==1.2.0 typing-extensions==4.16.0 h5netcdf==1.8.1
        sphinx==9.0.4 myst-parser==5.2.0 docutils==0.22.4 markdown-it-py==4.3.0 mdit-py-plugins==0.7.0"
APT_MPICH="mpich libmpich-dev libhdf5-mpich-dev dpkg-dev autoconf automake libtool patchelf"
APT_PKGS="openmpi-bin libopenmpi-dev gfortran libhdf5-openmpi-dev libpnetcdf-dev pnetcdf-bin libnetcdf-mpi-dev
          hdf5-tools netcdf-bin strace cmake make pkg-config perl"

T0=$SECONDS
CHANGED=0
say()  { echo "== [$((SECONDS - T0)) s] $*"; }
warn() { echo "ci/install.sh: WARNING: $*" >&2; }
die()  { echo "ci/install.sh: ERROR: $*" >&2; exit 1; }
BUILD=$(mktemp -d "${TMPDIR:-/tmp}/ckptio-build.XXXXXX")   # sdists, patches, netCDF shim: build time only
# CKPTIO_EXT_CFLAGS: compiler flags for the Python extensions built from source here (mpi4py from source, h5py,
# pnetcdf-python). Unset (the default), their builds get no CFLAGS from this script: setuptools 84 lets $CFLAGS
# REPLACE Python's own (-g -O3 -Wall here), which is also why netCDF4's flags go in CPPFLAGS below. .ci/run builds
# the MPICH venv, which only runs tests and is never benchmarked, with "-O0 -g0": h5py 122 s instead of 272 s,
# pnetcdf-python 25 s instead of 91 s (idle reference machine).
EXT_CFLAGS=${CKPTIO_EXT_CFLAGS:-}
ext() { if [ -n "$EXT_CFLAGS" ]; then CFLAGS="$EXT_CFLAGS" "$@"; else "$@"; fi; }   # ext pip_ install ...
trap 'rm -rf "$BUILD"' EXIT

# MPICH mode is cluster mode with Debian's MPICH as the "site" MPI, after apt-get (step 1) and PnetCDF (step 1b).
DEBIAN_MPICH=0
if [ "$MPI" = mpich ] && [ -z "${MPICC:-}" ]; then
  DEBIAN_MPICH=1
  MPICC=/usr/bin/mpicc.mpich HDF5_DIR=/usr/lib/x86_64-linux-gnu/hdf5/mpich PNETCDF_DIR="$VENV/pnetcdf"
  MPIFC=/usr/bin/mpifort.mpich
  unset NETCDF4_DIR
fi
if [ -n "${MPICC:-}" ] && [ -n "${HDF5_DIR:-}" ]; then
  CLUSTER=1
  if [ "$DEBIAN_MPICH" = 0 ]; then
    [ -x "$MPICC" ] || MPICC=$(command -v "$MPICC") || die "MPICC=$MPICC is not an executable"
    [ -d "$HDF5_DIR/include" ] || die "no $HDF5_DIR/include (HDF5_DIR)"
    [ -z "${PNETCDF_DIR:-}" ] || [ -x "$PNETCDF_DIR/bin/pnetcdf-config" ] ||
      die "no $PNETCDF_DIR/bin/pnetcdf-config (PNETCDF_DIR)"
    [ -n "${PNETCDF_DIR:-}" ] ||
      warn "PNETCDF_DIR not set: pnetcdf-python is not installed, ckptio's pnetcdf backend will be unavailable"
  fi
  export MPICC HDF5_DIR CC=$MPICC
  [ -z "${PNETCDF_DIR:-}" ] || export PNETCDF_DIR
  STACK_KEY="cluster mpicc=$MPICC hdf5=$HDF5_DIR pnetcdf=${PNETCDF_DIR:-none} netcdf=${NETCDF4_DIR:-none}"
  [ "$DEBIAN_MPICH" = 0 ] || STACK_KEY="debian-mpich"
else
  CLUSTER=0
  [ -z "${MPICC:-}${HDF5_DIR:-}${PNETCDF_DIR:-}" ] ||
    warn "cluster mode needs both MPICC and HDF5_DIR; using Debian packages instead"
  unset MPICC HDF5_DIR PNETCDF_DIR NETCDF4_DIR
  export CC=mpicc
  STACK_KEY="debian-openmpi"
  # mpirun as root, more ranks than cores, single node without ssh (same as the Makefile)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
         OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_plm=isolated
fi

# ---- 1. system packages (Debian modes only; only when something is missing)
if [ "$CLUSTER" = 0 ] || [ "$DEBIAN_MPICH" = 1 ]; then
  pkgs=$APT_PKGS
  [ "$DEBIAN_MPICH" = 0 ] || pkgs="$pkgs $APT_MPICH"
  if ! PYBIN=$(command -v "$PYTHON"); then
    PYTHON=/usr/bin/python3; pkgs="$pkgs python3 python3-venv python3-dev"
  elif [[ $(readlink -f "$PYBIN") == /usr/bin/* ]]; then
    pkgs="$pkgs python3-venv python3-dev"       # Debian's python needs these for venv + C extensions
  fi
  missing=""
  for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  if [ -n "$missing" ]; then
    say "apt-get install$missing"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    # one apt at a time (.ci/run runs the MPICH install beside other parts): a lock of ours around update,
    # dpkg's own lock timeout around install
    $SUDO flock -w 1800 /run/lock/ckptio-apt apt-get -o DPkg::Lock::Timeout=1800 update -qq
    $SUDO flock -w 1800 /run/lock/ckptio-apt apt-get -o DPkg::Lock::Timeout=1800 install -y -qq \
      --no-install-recommends $missing >/dev/null
    CHANGED=1
  fi
  # Installing MPICH registers it as an alternative for mpi/mpirun (lower priority than Open MPI, but an admin may
  # have switched): the system default must stay Open MPI, which the default stack (.venv) is built for.
  if [ "$DEBIAN_MPICH" = 1 ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    for alt in "mpi /usr/bin/mpicc.openmpi" "mpirun /usr/bin/mpirun.openmpi"; do
      set -- $alt
      if [ -e "$2" ] && [ "$(update-alternatives --query "$1" 2>/dev/null | sed -n 's/^Value: //p')" != "$2" ]; then
        say "update-alternatives --set $1 $2 (keep Open MPI the system default)"
        $SUDO update-alternatives --set "$1" "$2" >/dev/null
      fi
    done
  fi
fi
command -v "$PYTHON" >/dev/null || die "no $PYTHON (set PYTHON=...)"

# ---- 1b. PnetCDF against MPICH (MPICH mode): Debian's libpnetcdf is built for Open MPI only (~4 min, once)
if [ "$DEBIAN_MPICH" = 1 ] && [ ! -x "$PNETCDF_DIR/bin/pnetcdf-config" ]; then
  say "PnetCDF from Debian's source package against MPICH into $PNETCDF_DIR (~4 min)"
  bash ci/build_pnetcdf.sh "$PNETCDF_DIR" "$MPICC" > /dev/null || die "building PnetCDF against MPICH failed"
  CHANGED=1
fi

# ---- 2. venv, pinned wheels and build dependencies
PY="$VENV/bin/python"
# pip runs with its output in a log, shown (last 100 lines) only on failure: the builds are long and noisy
# (setuptools deprecation banners); the "== [t] step" lines say what is going on.
NLOG=0
pip_() {
  local log="$BUILD/pip-$((++NLOG)).log"
  if ! "$PY" -m pip --disable-pip-version-check "$@" > "$log" 2>&1; then
    grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -n 100 >&2
    die "pip $* failed (last 100 lines of its output above)"
  fi
}
have() { MPI4PY_RC_INITIALIZE=false "$PY" -c "$1" >/dev/null 2>&1; }   # import checks, no MPI_Init (faster)

if [ ! -x "$PY" ]; then
  say "venv $VENV ($("$PYTHON" --version 2>&1))"
  "$PYTHON" -m venv "$VENV"
  CHANGED=1
fi
# shellcheck disable=SC2086
if ! "$PY" - $WHEELS <<'EOF'
import sys
from importlib.metadata import version, PackageNotFoundError
for req in sys.argv[1:]:
    name, want = req.split("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
EOF
then
  say "pinned wheels"
  # shellcheck disable=SC2086
  pip_ install --only-binary=:all: $WHEELS
  CHANGED=1
fi

# Stack key: the build mode and prefixes the MPI-dependent packages were compiled against.
KEYFILE="$VENV/.ckptio-stack"
# No key file: a venv from before the key existed (the reference recipe: Debian mode) -> trust the checks below.
FORCE=0
if [ -f "$KEYFILE" ] && [ "$(cat "$KEYFILE")" != "$STACK_KEY" ]; then
  say "build mode changed ($(cat "$KEYFILE") -> $STACK_KEY): rebuilding MPI packages"; FORCE=1
elif [ ! -f "$KEYFILE" ] && [ "$CLUSTER" = 1 ] && [ "$DEBIAN_MPICH" = 0 ]; then   # MPICH mode: checks below
  FORCE=1
fi
NOCACHE=""; [ "$CLUSTER" = 1 ] && NOCACHE="--no-cache-dir"
# h5py must link the HDF5 under $HDF5_DIR (ldd): anything else (e.g. the Open MPI HDF5 found through pkg-config)
# would abort in MPI_Init or mix two MPI libraries in one process.
H5PY_LINK_OK() {
  [ "$CLUSTER" = 0 ] && return 0
  local so want got
  so=$(MPI4PY_RC_INITIALIZE=false "$PY" -c "import h5py.defs as m; print(m.__file__)" 2>/dev/null) || return 1
  for want in "$HDF5_DIR/lib/libhdf5.so" "$HDF5_DIR/lib64/libhdf5.so" "$HDF5_DIR/libhdf5.so" ""; do
    [ -e "$want" ] && break
  done
  [ -n "$want" ] || { warn "no libhdf5.so under HDF5_DIR=$HDF5_DIR: cannot check h5py's link"; return 0; }
  got=$(ldd "$so" | awk '$1 ~ /^libhdf5(_[a-z]+)?\.so/ && $1 !~ /_hl/ {print $3; exit}')
  [ -n "$got" ] && [ "$(readlink -f "$got")" = "$(readlink -f "$want")" ]
}

# ---- 3. mpi4py
if [ "$DEBIAN_MPICH" = 1 ]; then
  MPI4PY_OK="import mpi4py, mpi4py.MPI as M; assert mpi4py.__version__=='$MPI4PY_V' and 'MPICH' in M.Get_library_version()"
elif [ "$CLUSTER" = 1 ]; then
  MPI4PY_OK="import mpi4py, mpi4py.MPI; assert mpi4py.__version__=='$MPI4PY_V'"
else
  MPI4PY_OK="import mpi4py, mpi4py.MPI as M; assert mpi4py.__version__=='$MPI4PY_V' and 'Open MPI' in M.Get_library_version()"
fi
if [ "$FORCE" = 1 ] || ! have "$MPI4PY_OK"; then
  if [ "$DEBIAN_MPICH" = 1 ] && [ "$MPI4PY_FROM_SOURCE" = 0 ]; then
    # The PyPI wheel carries an MPICH-ABI build (MPI.mpich.*.so, NEEDED libmpi.so.12) beside the Open MPI one.
    # Debian names MPICH's library libmpich.so.12 (same ABI, no libmpi.so.12): the extension's NEEDED entry is
    # renamed to it (patchelf), and $VENV/lib/libmpi.so.12 -> libmpich.so.12 is what mpi4py's ABI probe finds
    # first (it searches the venv's lib/ before the system's libmpi.so, which is Open MPI's). Saves the ~4.5 min
    # compile; MPI4PY_FROM_SOURCE=1 compiles instead.
    say "mpi4py $MPI4PY_V (binary wheel, MPICH variant on Debian's libmpich.so.12)"
    pip_ install --force-reinstall --no-deps --only-binary=mpi4py "mpi4py==$MPI4PY_V"
    MPICH_SO=$(ls "$VENV"/lib/python3*/site-packages/mpi4py/MPI.mpich.*.so 2>/dev/null | head -n 1)
    [ -n "$MPICH_SO" ] || die "the mpi4py wheel has no MPICH variant (MPI.mpich.*.so): MPI4PY_FROM_SOURCE=1"
    patchelf --replace-needed libmpi.so.12 libmpich.so.12 "$MPICH_SO"
    ln -sfn /usr/lib/x86_64-linux-gnu/libmpich.so.12 "$VENV/lib/libmpi.so.12"
  elif [ "$CLUSTER" = 1 ] || [ "$MPI4PY_FROM_SOURCE" = 1 ]; then
    say "mpi4py $MPI4PY_V from source (CC=$CC, ~3 min)"
    ext pip_ install $NOCACHE --force-reinstall --no-deps --no-binary=mpi4py "mpi4py==$MPI4PY_V"
  else
    say "mpi4py $MPI4PY_V (binary wheel)"
    pip_ install --force-reinstall --no-deps --only-binary=mpi4py "mpi4py==$MPI4PY_V"
  fi
  have "$MPI4PY_OK" || die "mpi4py does not import or is not built for the expected MPI"
  CHANGED=1; FORCE=1          # everything below compiles against mpi4py's headers
fi

# ---- 4. h5py with parallel HDF5 (~3 min). --no-build-isolation is REQUIRED (see top).
if [ "$FORCE" = 1 ] || ! have "import h5py; assert h5py.get_config().mpi and h5py.__version__=='$H5PY_V'" ||
   ! H5PY_LINK_OK; then
  say "h5py $H5PY_V with parallel HDF5 (~3 min)"
  if [ "$CLUSTER" = 1 ]; then
    HDF5_MPI=ON ext pip_ install --no-cache-dir --no-build-isolation --no-binary=h5py --force-reinstall --no-deps "h5py==$H5PY_V"
  else
    HDF5_MPI=ON HDF5_PKGCONFIG_NAME=hdf5-openmpi \
      ext pip_ install --no-build-isolation --no-binary=h5py --force-reinstall --no-deps "h5py==$H5PY_V"
  fi
  have "import h5py; assert h5py.get_config().mpi" || die "h5py was built without MPI"
  H5PY_LINK_OK || die "h5py does not link the HDF5 under HDF5_DIR=$HDF5_DIR (ldd)"
  CHANGED=1
fi

# ---- 5. pnetcdf-python (~1 min). Finds PnetCDF via $PNETCDF_DIR/bin/pnetcdf-config, else pnetcdf-config on
#         PATH (Debian: /usr/bin). 1.0.0 declares MPI handles as C int (MPICH only); patch it to take the handle
#         types from mpi4py so it compiles with Open MPI (and is still right for MPICH).
if [ "$CLUSTER" = 1 ] && [ -z "${PNETCDF_DIR:-}" ]; then
  have "import pnetcdf" && { say "PNETCDF_DIR not set: removing pnetcdf-python"; pip_ uninstall -y pnetcdf; }
elif [ "$FORCE" = 1 ] || ! have "import pnetcdf; assert pnetcdf.__version__=='$PNETCDF_V'"; then
  say "pnetcdf-python $PNETCDF_V (patched for Open MPI handles)"
  pip_ download --no-deps --no-binary=:all: --no-build-isolation -d "$BUILD" "pnetcdf==$PNETCDF_V"
  tar xzf "$BUILD/pnetcdf-$PNETCDF_V.tar.gz" -C "$BUILD"
  "$PY" - "$BUILD/pnetcdf-$PNETCDF_V" <<'EOF'
import re, sys, pathlib
root = pathlib.Path(sys.argv[1])
names = ["MPI_DATATYPE_NULL","MPI_CHAR","MPI_BYTE","MPI_UNSIGNED_CHAR","MPI_SHORT","MPI_UNSIGNED_SHORT",
         "MPI_INT","MPI_UNSIGNED","MPI_LONG_LONG","MPI_UNSIGNED_LONG_LONG","MPI_FLOAT","MPI_DOUBLE"]
p = root / "include/PnetCDF.pxi"; s = p.read_text()
for t in ("MPI_Comm", "MPI_Info", "MPI_Offset", "MPI_Datatype"):
    assert f"    ctypedef int {t}\n" in s; s = s.replace(f"    ctypedef int {t}\n", "")
for n in names:
    s, k = re.subn(rf"^[ \t]+{n}[ \t]*\n", "", s, flags=re.M); assert k == 1, n
hdr = 'cdef extern from "pnetcdf.h":'; assert hdr in s
s = s.replace(hdr, "from mpi4py.libmpi cimport MPI_Comm, MPI_Info, MPI_Offset, MPI_Datatype, "
              + ", ".join(names) + "\n\n" + hdr, 1)
p.write_text(s)
p = root / "src/pnetcdf/_utils.pyx"; s = p.read_text()
a = s.index("_nptompitype = {'S1' : MPI_CHAR,"); b = s.index("}", a) + 1
s = s[:a] + re.sub(r": MPI_(\w+)", r": MPI.\1", s[a:b]) + s[b:]       # mpi4py objects, not C ints
p.write_text(s)
p = root / "src/pnetcdf/_Variable.pyx"; s = p.read_text()
assert "bufftype = buftype.ob_mpi" in s
p.write_text(s.replace("bufftype = buftype.ob_mpi", "bufftype = (<Datatype?>buftype).ob_mpi"))
EOF
  # a PnetCDF outside the loader's path (cluster prefix, MPICH mode's $VENV/pnetcdf): record it as an rpath
  PN_LDFLAGS=${LDFLAGS:-}; [ -z "${PNETCDF_DIR:-}" ] || PN_LDFLAGS="$PN_LDFLAGS -Wl,-rpath,$PNETCDF_DIR/lib"
  LDFLAGS="$PN_LDFLAGS" ext pip_ install --no-build-isolation --force-reinstall --no-deps "$BUILD/pnetcdf-$PNETCDF_V"
  have "import pnetcdf" || die "pnetcdf does not import"
  CHANGED=1
fi

# ---- 6. netCDF4 with parallel I/O (~1 min). Not needed by ckptio itself (tests use it to cross-check).
#   Debian: against libnetcdf_mpi (netCDF-C 4.9.0), which Debian names libnetcdf_mpi.so and whose headers it
#   hides: give setup.py a shim prefix. Both modes: netCDF4's compat header assumes nc_rc_get/nc_rc_set exist
#   in 4.9.0 (they came in 4.9.1) -> patch the version test (else "undefined symbol: nc_rc_get" at import).
#   A 4.9.0 netcdf_meta.h lacks NC_HAS_BZ2/NC_HAS_BLOSC -> define them (else static-declaration errors); via
#   CPPFLAGS, not CFLAGS: setuptools 84 lets $CFLAGS replace -O3 -g -Wall.
NETCDF4_OK="import netCDF4; assert netCDF4.__has_parallel4_support__ and netCDF4.__version__=='$NETCDF4_V'"
if [ "$DEBIAN_MPICH" = 1 ]; then
  if ! have "import netCDF4; assert netCDF4.__version__=='$NETCDF4_V'"; then
    say "netCDF4 $NETCDF4_V (serial binary wheel: tests read CDF-5 files with it)"
    pip_ install --force-reinstall --no-deps --only-binary=netCDF4 "netCDF4==$NETCDF4_V"
    CHANGED=1
  fi
elif [ "$CLUSTER" = 1 ] && [ -z "${NETCDF4_DIR:-}" ]; then
  have "$NETCDF4_OK" || warn "NETCDF4_DIR not set: skipping the parallel netCDF4 module"
elif [ "$FORCE" = 1 ] || ! have "$NETCDF4_OK"; then
  say "netCDF4 $NETCDF4_V with parallel I/O"
  if [ "$CLUSTER" = 1 ]; then
    NC_PREFIX=$NETCDF4_DIR; NC_CONFIG=0; [ -x "$NETCDF4_DIR/bin/nc-config" ] && NC_CONFIG=1
    NC_ENV=(HDF5_DIR="$HDF5_DIR")
  else
    NC_PREFIX="$BUILD/ncmpi"; NC_CONFIG=0
    mkdir -p "$NC_PREFIX/lib"
    ln -sfn /usr/lib/x86_64-linux-gnu/netcdf/mpi/include "$NC_PREFIX/include"
    ln -sf /usr/lib/x86_64-linux-gnu/libnetcdf_mpi.so "$NC_PREFIX/lib/libnetcdf.so"
    NC_ENV=(HDF5_INCDIR=/usr/include/hdf5/openmpi HDF5_LIBDIR=/usr/lib/x86_64-linux-gnu/hdf5/openmpi)
  fi
  NC_CPPFLAGS=""
  grep -qs NC_HAS_BZ2 "$NC_PREFIX/include/netcdf_meta.h" || NC_CPPFLAGS="-DNC_HAS_BZ2=1 -DNC_HAS_BLOSC=1"
  export USE_SETUPCFG=0 USE_NCCONFIG=$NC_CONFIG NETCDF4_DIR="$NC_PREFIX"
  ( export "${NC_ENV[@]}"
    pip_ download --no-deps --no-binary=:all: --no-build-isolation -d "$BUILD" "netCDF4==$NETCDF4_V" )
  tar xzf "$BUILD/netcdf4-$NETCDF4_V.tar.gz" -C "$BUILD"
  perl -0pi -e 's/NC_VERSION_GE\(4, 9, 0\)\n#define HAS_NCRCSET 1/NC_VERSION_GE(4, 9, 1)\n#define HAS_NCRCSET 1/ or die "patch failed"' \
       "$BUILD/netcdf4-$NETCDF4_V/include/netcdf-compat.h"
  ( export "${NC_ENV[@]}" CPPFLAGS="${CPPFLAGS:-} $NC_CPPFLAGS"
    pip_ install --no-build-isolation --force-reinstall --no-deps "$BUILD/netcdf4-$NETCDF4_V" )
  have "$NETCDF4_OK" || die "netCDF4 does not import or lacks parallel support"
  CHANGED=1
fi
echo "$STACK_KEY" > "$KEYFILE"

# ---- 7. runtime environment for shells that activate the venv
# MPICH mode: the venv's mpirun/mpiexec (Hydra) and compiler wrappers are MPICH's, so a PATH with the venv first
# launches and compiles with the right MPI (like loading an MPI module); the system's stay Open MPI's.
if [ "$DEBIAN_MPICH" = 1 ]; then
  for l in mpirun mpiexec mpicc mpicxx mpifort mpif90; do
    [ "$(readlink "$VENV/bin/$l" 2>/dev/null)" = "/usr/bin/$l.mpich" ] || { ln -sfn "/usr/bin/$l.mpich" "$VENV/bin/$l"; CHANGED=1; }
  done
  # Hydra starts hydra_pmi_proxy from the directory it was called from
  [ -L "$VENV/bin/hydra_pmi_proxy" ] || { ln -sfn /usr/bin/hydra_pmi_proxy "$VENV/bin/hydra_pmi_proxy"; CHANGED=1; }
fi
if [ "$CLUSTER" = 0 ] && ! grep -q OMPI_ALLOW_RUN_AS_ROOT "$VENV/bin/activate"; then
  cat >> "$VENV/bin/activate" <<'EOF'
# added by ckptio ci/install.sh: Open MPI as root, oversubscribed, single node without ssh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_plm=isolated
EOF
fi

# ---- 8. ckptio itself, editable, with its test extra
STAMP="$VENV/.ckptio-editable.stamp"
if [ -f pyproject.toml ]; then
  if [ "$CHANGED" = 1 ] || [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ] ||
     ! (cd / && "$PY" -c "import ckptio, os, sys; sys.exit(os.path.realpath(list(ckptio.__path__)[0]) != '$ROOT/ckptio')") 2>/dev/null
  then
    say "ckptio (editable, [test])"
    # one editable install at a time: .ci/run installs both venvs side by side, and both write the build
    # metadata of this one source tree
    mkdir -p build
    ( flock -w 900 9 || die "another install of this tree holds build/.editable-install.lock"
      pip_ install --no-build-isolation -e ".[test]" ) 9> build/.editable-install.lock
    touch "$STAMP"
    CHANGED=1
  fi
fi

# ---- 8b. bytecode for the source tree: an editable install is imported from it, and with PYTHONDONTWRITEBYTECODE
#          set (as in some CI images) no rank ever writes it, so every rank of every job compiled ckptio again.
#          compileall writes it regardless, for the current sources (~2 s; a stale file is recompiled in memory).
"$PY" -m compileall -q -j 0 ckptio backends tests > /dev/null || warn "compileall failed: ranks compile at import"

# ---- 9. Fortran/C bindings (when they exist)
if [ -f fortran_bindings/CMakeLists.txt ]; then
  FB=build/fortran; [ "$MPI" = mpich ] && FB=build/fortran-mpich   # separate builds: one per MPI stack
  FLOG="$FB/build.log"
  cached_py=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$FB/CMakeCache.txt" 2>/dev/null || true)
  mkdir -p "$FB"
  if [ ! -f "$FB/CMakeCache.txt" ] || [ "$cached_py" != "$PY" ]; then
    say "Fortran/C bindings: cmake configure"
    FC_MPI=mpifort; [ "$CLUSTER" = 1 ] && FC_MPI=${MPIFC:-$(dirname "$MPICC")/mpifort}
    cmake -S fortran_bindings -B "$FB" -DCMAKE_C_COMPILER="$CC" -DCMAKE_Fortran_COMPILER="$FC_MPI" \
          -DPython3_EXECUTABLE="$PY" > "$FLOG" 2>&1 || { cat "$FLOG"; die "cmake configure failed"; }
    CHANGED=1
  fi
  cmake --build "$FB" > "$FLOG" 2>&1 || { cat "$FLOG"; die "building the Fortran/C bindings failed"; }
  if grep -qE 'Building|Linking' "$FLOG"; then say "Fortran/C bindings built in $FB"; CHANGED=1; fi
fi

# ---- 10. smoke check, only after a change: imports, then a real 2-rank parallel write with every library
if [ "$CHANGED" = 1 ]; then
  say "smoke check"
  SMOKE=$BUILD/smoke.py
  cat > "$SMOKE" <<'EOF'
import os, sys, numpy as np
from mpi4py import MPI
import mpi4py, h5py, zstandard, xxhash, adios2
try:
    import pnetcdf
except ImportError:  # cluster mode without PNETCDF_DIR
    pnetcdf = None
try:
    import netCDF4
except ImportError:
    netCDF4 = None
comm = MPI.COMM_WORLD; r, n = comm.rank, comm.size
d = comm.bcast(sys.argv[1] if r == 0 else None)
x = np.arange(4, dtype="f8") + 4 * r
# Alltoallv (the restart redistribution pattern)
sc = np.full(n, 1, dtype="i4"); out = np.empty(n, "f8")
comm.Alltoallv([np.full(n, float(r)), (sc, None), MPI.DOUBLE], [out, (sc, None), MPI.DOUBLE])
assert (out == np.arange(n)).all(), out
with h5py.File(f"{d}/t.h5", "w", driver="mpio", comm=comm) as f:
    ds = f.create_dataset("x", (4 * n,), "f8")
    with ds.collective:
        ds[4 * r:4 * r + 4] = x
if pnetcdf is not None:
  with pnetcdf.File(f"{d}/t.nc", mode="w", format="NC_64BIT_DATA", comm=comm) as f:
    f.def_dim("n", 4 * n); v = f.def_var("x", pnetcdf.NC_DOUBLE, ("n",)); f.enddef()
    v.put_var_all(x, start=[4 * r], count=[4])
if netCDF4 is not None and netCDF4.__has_parallel4_support__:
    assert netCDF4.__has_parallel4_support__
    with netCDF4.Dataset(f"{d}/t4.nc", "w", parallel=True, comm=comm, info=MPI.Info()) as f:
        f.createDimension("n", 4 * n); v = f.createVariable("x", "f8", ("n",)); v.set_collective(True)
        v[4 * r:4 * r + 4] = x
comm.Barrier()
if r == 0:
    want = np.arange(4 * n, dtype="f8")
    with h5py.File(f"{d}/t.h5", "r") as f:
        assert (f["x"][:] == want).all()
    if pnetcdf is not None:
        with pnetcdf.File(f"{d}/t.nc", mode="r", comm=MPI.COMM_SELF) as f:
            assert (f.variables["x"][:] == want).all()
    if netCDF4 is not None and netCDF4.__has_parallel4_support__:
        with netCDF4.Dataset(f"{d}/t4.nc") as f:
            assert (f["x"][:] == want).all()
    print("smoke OK on %d ranks:" % n, MPI.Get_library_version().split(",")[0].splitlines()[0].strip(),
          "| mpi4py", mpi4py.__version__, "| numpy", np.__version__,
          "| h5py", h5py.__version__, "(HDF5", h5py.version.hdf5_version + ", mpi)",
          "| netCDF4", netCDF4.__version__ + " (lib " + netCDF4.__netcdf4libversion__ + ", parallel)"
          if netCDF4 else "| netCDF4 skipped",
          "| pnetcdf", pnetcdf.__version__ if pnetcdf else "skipped", "| zstandard", zstandard.__version__, "| xxhash", xxhash.VERSION,
          "| adios2", adios2.__version__)
EOF
  mkdir -p "$BUILD/smoke"
  if [ "$CLUSTER" = 0 ]; then
    mpirun -n 2 "$PY" "$SMOKE" "$BUILD/smoke" || die "smoke check failed"
  elif [ "$DEBIAN_MPICH" = 1 ]; then
    "$VENV/bin/mpirun" -n 2 "$PY" "$SMOKE" "$BUILD/smoke" || die "smoke check failed"
  else
    ${SMOKE_MPIEXEC:-} "$PY" "$SMOKE" "$BUILD/smoke" || die "smoke check failed"
  fi
  if [ -f pyproject.toml ]; then
    (cd / && "$PY" -c "import ckptio") || die "ckptio does not import from $VENV"
  fi
  say "done: $VENV"
else
  echo "ci/install.sh: up to date ($VENV, $((SECONDS - T0)) s)"
fi
