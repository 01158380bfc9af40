#!/usr/bin/env bash
# Checkpoint/restart tour of the FLASH-like mini-app.
#
# Run from the repository root:   bash examples/flash_like/demo.sh
# Environment:
#   BACKEND       ckptio backend: mpiio (default), hdf5 or pnetcdf
#   NP            number of MPI ranks (default 4)
#   KEEP_OUTDIR   set to 1 to keep the checkpoint directory for a look afterwards
# Expects `python`, `mpirun` and `ckptio` on PATH (the Makefile puts the venv's bin first).
set -euo pipefail

BACKEND="${BACKEND:-mpiio}"
NP="${NP:-4}"
APP="examples/flash_like/flash_like.py"

if [[ ! -f "$APP" ]]; then
    echo "demo.sh: run me from the repository root (cannot find $APP)" >&2
    exit 2
fi

OUTDIR="$(mktemp -d "${TMPDIR:-/tmp}/ckptio_flash_demo.XXXXXX")"
cleanup() {
    if [[ "${KEEP_OUTDIR:-0}" == "1" ]]; then
        echo "Checkpoints kept in $OUTDIR"
    else
        rm -rf "$OUTDIR"
    fi
}
trap cleanup EXIT

echo "== ckptio FLASH-like demo: backend=$BACKEND, $NP MPI ranks, checkpoints in $OUTDIR"
echo

echo "== Stage 1: fresh run to step 10, checkpointing every 5 steps."
echo "   Each rank owns a contiguous range of the 64 blocks (16^3 cells, 7 variables each) plus its"
echo "   tracer particles; all ranks write collectively into ONE shared file per checkpoint."
mpirun -n "$NP" python "$APP" --outdir "$OUTDIR" --backend "$BACKEND" --steps 10 --checkpoint-every 5
echo

echo "== Stage 2: pretend the job hit its wall-clock limit; a new job restarts and continues to step 20."
echo "   --restart asks ckptio.latest() for the newest complete, valid checkpoint (chk_000010), reads"
echo "   each rank's blocks back -- the rank count may differ from the writer's -- and carries on."
mpirun -n "$NP" python "$APP" --outdir "$OUTDIR" --backend "$BACKEND" --steps 20 --checkpoint-every 5 --restart
echo

echo "== Stage 3: inspect the newest checkpoint and verify every checksum in it."
LATEST="$(python -c 'import ckptio,sys;print(ckptio.latest(sys.argv[1]))' "$OUTDIR")"
if [[ -z "$LATEST" || "$LATEST" == "None" ]]; then
    echo "demo.sh: ckptio.latest found no complete checkpoint in $OUTDIR" >&2
    exit 1
fi
echo "   newest checkpoint: $LATEST"
ckptio inspect --verify "$LATEST"
echo

echo "== Done. The restarted run ends in exactly the state a straight 20-step run would reach;"
echo "   see examples/flash_like/README.md for how to check that yourself with --final-state."
