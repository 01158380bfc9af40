#!/usr/bin/env bash
# ci/build_flash_io.sh [OUTDIR] -- build PnetCDF's FLASH-IO benchmark (benchmarks/FLASH-IO of PnetCDF's source,
# Fortran) from Debian's `pnetcdf` source package, against the machine's PnetCDF (libpnetcdf-dev: its Fortran
# module and library) and MPI Fortran compiler (mpif90, else $MPIF90), into OUTDIR/flash_benchmark_io (default
# build/flash-io). For `make bench` only (benchmarks/flashio.py runs it); never part of `make test`.
#
# The source comes with the machine's own apt configuration: when no deb-src entry provides pnetcdf, one is added
# for every `deb` entry of this machine's sources (ci/apt_deb_src.py: its mirror, never a hard-coded archive
# address; root, as ci/build_pnetcdf.sh does). Only benchmarks/FLASH-IO is unpacked from the upstream tarball
# (Debian's patches of this package do not touch benchmarks/). Built as its Makefile.am builds it
# (-DN_DIM=3 -DMAXBLOCKS=100 -DIONMAX=13) with the block size set to 16^3 in physicaldata.fh, the "USER EDIT"
# constants its README names (the source's default is 8^3; FLASH and the README's figures use 16^3).
# Idempotent: does nothing when OUTDIR/flash_benchmark_io exists and OUTDIR/build.stamp records the same
# compiler, PnetCDF version and block size. ~1 minute (the download and ~10 s of compiling).
set -euo pipefail
OUT=$(realpath -m "${1:-build/flash-io}")
NXB=16
FC=${MPIF90:-$(command -v mpif90 || command -v mpifort || true)}
[ -n "$FC" ] || { echo "ci/build_flash_io.sh: no MPI Fortran compiler (mpif90; apt-get install gfortran libopenmpi-dev)" >&2; exit 1; }
command -v pnetcdf-config >/dev/null ||
  { echo "ci/build_flash_io.sh: no pnetcdf-config (apt-get install libpnetcdf-dev pnetcdf-bin)" >&2; exit 1; }
PN_VERSION=$(pnetcdf-config --version)
[ "$(pnetcdf-config --has-fortran)" = yes ] ||
  { echo "ci/build_flash_io.sh: $PN_VERSION has no Fortran interface (FLASH-IO is Fortran)" >&2; exit 1; }
STAMP="fc=$FC pnetcdf=$PN_VERSION nxb=$NXB maxblocks=100"
if [ -x "$OUT/flash_benchmark_io" ] && [ "$(cat "$OUT/build.stamp" 2>/dev/null)" = "$STAMP" ]; then
  exit 0
fi

SRC_LIST=/etc/apt/sources.list.d/ckptio-deb-src.sources
if ! apt-get source --print-uris pnetcdf >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  entries=$(python3 "$(dirname "${BASH_SOURCE[0]}")/apt_deb_src.py" /etc/apt) ||
    { echo "ci/build_flash_io.sh: cannot derive deb-src entries from /etc/apt; add one for pnetcdf by hand" >&2; exit 1; }
  { echo "# added by ckptio ci/build_flash_io.sh: the source packages of this machine's own apt sources"
    echo "# (PnetCDF's FLASH-IO benchmark for make bench)"
    echo "$entries"; } | $SUDO tee "$SRC_LIST" >/dev/null
  $SUDO flock -w 1800 /run/lock/ckptio-apt apt-get -o DPkg::Lock::Timeout=1800 update -qq
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ckptio-flash-io.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
apt-get source --download-only -qq pnetcdf >/dev/null 2>&1 || { apt-get source --download-only pnetcdf; exit 1; }
ORIG=$(ls pnetcdf_*.orig.tar.* | head -n 1)
tar xf "$ORIG" --wildcards '*/benchmarks/FLASH-IO/*'
cd "$(find . -maxdepth 1 -mindepth 1 -type d -name 'pnetcdf-*' | head -n 1)/benchmarks/FLASH-IO"
for axis in nxb nyb nzb; do
  grep -q "parameter($axis=8)" physicaldata.fh ||
    { echo "ci/build_flash_io.sh: physicaldata.fh has no 'parameter($axis=8)' to set to $NXB" >&2; exit 1; }
  sed -i "s/parameter($axis=8)/parameter($axis=$NXB)/" physicaldata.fh
done
# where Debian puts pnetcdf.mod (gfortran-mod-N), next to the library
MODDIR=$(dirname "$(find "$(pnetcdf-config --libdir)" "$(pnetcdf-config --includedir)" -name pnetcdf.mod 2>/dev/null |
                    head -n 1)")
FFLAGS="-O2 -fallow-argument-mismatch -DN_DIM=3 -DMAXBLOCKS=100 -DIONMAX=13 -I. -I$MODDIR"
LOG=$WORK/build.log
{
  for f in get_mfluid_property flash_release flash_benchmark_io checkpoint_ncmpi_parallel plotfile_ncmpi_parallel; do
    $FC $FFLAGS -c "$f.F90"
  done
  $FC -o flash_benchmark_io ./*.o -L"$(pnetcdf-config --libdir)" -lpnetcdf
} > "$LOG" 2>&1 || { tail -n 40 "$LOG" >&2; echo "ci/build_flash_io.sh: FLASH-IO build failed" >&2; exit 1; }
mkdir -p "$OUT"
cp "$WORK"/pnetcdf-*/benchmarks/FLASH-IO/flash_benchmark_io "$OUT/"
echo "$STAMP" > "$OUT/build.stamp"
echo "ci/build_flash_io.sh: $OUT/flash_benchmark_io ($PN_VERSION, ${NXB}^3 blocks)"
