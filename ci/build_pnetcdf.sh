#!/usr/bin/env bash
# ci/build_pnetcdf.sh PREFIX MPICC -- build PnetCDF (the C library and its tools) from Debian's source package
# against the MPI whose C compiler wrapper is MPICC, and install it into PREFIX (bin/pnetcdf-config, lib/, include/).
#
# Why: Debian's libpnetcdf-dev is built for Open MPI only; a PnetCDF linked against Open MPI cannot run in an MPICH
# process. Called by ci/install.sh for MPI=mpich (ckptio's second MPI stack); usable by hand for any MPI.
# Needs root (once, when no deb-src entry provides pnetcdf: adds deb-src entries mirroring the machine's own `deb`
# sources, see ci/apt_deb_src.py), dpkg-dev, autoconf, automake, libtool. C library only: no Fortran, no C++ (ckptio and
# pnetcdf-python use the C API), which also halves the build time. Idempotent: does nothing when
# PREFIX/bin/pnetcdf-config exists and reports the same MPICC.
set -euo pipefail
PREFIX=${1:?usage: build_pnetcdf.sh PREFIX MPICC}
MPICC=${2:?usage: build_pnetcdf.sh PREFIX MPICC}
if [ -x "$PREFIX/bin/pnetcdf-config" ] && [ "$("$PREFIX/bin/pnetcdf-config" --cc 2>/dev/null)" = "$MPICC" ]; then
  exit 0
fi
SRC_LIST=/etc/apt/sources.list.d/ckptio-deb-src.sources
if ! apt-get source --print-uris pnetcdf >/dev/null 2>&1; then
  # no deb-src entry that has pnetcdf: add one for every `deb` entry of this machine's own sources (its mirror,
  # one-line or deb822 format), never a hard-coded archive address
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  entries=$(python3 "$(dirname "${BASH_SOURCE[0]}")/apt_deb_src.py" /etc/apt) ||
    { echo "ci/build_pnetcdf.sh: cannot derive deb-src entries from /etc/apt; add one for pnetcdf by hand" >&2; exit 1; }
  { echo "# added by ckptio ci/build_pnetcdf.sh: the source packages of this machine's own apt sources"
    echo "# (PnetCDF rebuilt against MPICH)"
    echo "$entries"; } | $SUDO tee "$SRC_LIST" >/dev/null
  $SUDO flock -w 1800 /run/lock/ckptio-apt apt-get -o DPkg::Lock::Timeout=1800 update -qq
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ckptio-pnetcdf.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
apt-get source -qq pnetcdf >/dev/null 2>&1 || { apt-get source pnetcdf; exit 1; }
cd "$(find . -maxdepth 1 -mindepth 1 -type d -name 'pnetcdf-*' | head -n 1)"
LOG=$WORK/build.log
{
  [ -x configure ] || autoreconf -fi      # Debian's source package ships configure.ac only (needs autotools)
  ./configure --prefix="$PREFIX" MPICC="$MPICC" --disable-fortran --disable-cxx --enable-shared \
              --disable-static --disable-doxygen
  make -j"$(nproc)"
  make install
} > "$LOG" 2>&1 || { tail -n 60 "$LOG" >&2; echo "ci/build_pnetcdf.sh: PnetCDF build failed" >&2; exit 1; }
"$PREFIX/bin/pnetcdf-config" --version
