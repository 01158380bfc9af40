#!/usr/bin/env python3
"""FLASH-like block-structured mini-app that checkpoints and restarts through ckptio.

The grid is ``nblocks`` blocks of ``nxb**3`` cells laid out on a cubic lattice in the unit cube. Every
cell-centred variable is one global array of shape ``(nblocks, nxb, nxb, nxb)`` (axes: block, z, y, x);
each MPI rank owns a contiguous range of blocks (the first ``nblocks % nranks`` ranks get one extra).
Per-block metadata (``refine_level``, ``bbox``) and tracer particles are checkpointed alongside.

The "physics" is a cheap, purely element-wise update: every block is advanced only from its own data and
from scalars that every rank computes identically, so the result is bit-identical whatever the number of
ranks. Only IEEE-exactly-rounded operations (+, -, *, /, abs, floor) are used -- no transcendental
functions, whose vectorised implementations may round differently depending on where an element falls in
a SIMD lane -- so a run that is split and restarted on a different rank count ends in exactly the same
state as a straight run.

Run ``python flash_like.py --help`` for the options and ``examples/flash_like/README.md`` for a tour.
"""

from __future__ import annotations

import argparse
import glob
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

# The batch system's warning may come while the job starts: until a handler is installed, SIGUSR1 ends the
# process. So the warning signals are blocked first (a signal that arrives meanwhile waits in the kernel), through
# the imports (`import ckptio` took 0.4 s on an idle node, many seconds at load ~100); the handlers are installed
# before MPI_Init (the mpi4py import below, seconds on a busy node) and the signals unblocked: one that came in
# between is delivered then, to the handler. series.should_exit() then finds the handlers installed.
if "--batch" in sys.argv:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM})

import ckptio
from ckptio.tiers import batch

if "--batch" in sys.argv:
    batch.install()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM})

import numpy as np
from mpi4py import MPI

GRID_VARS: tuple[str, ...] = ("dens", "pres", "temp", "velx", "vely", "velz", "ener")
TRACER_WIDTH = 4  # values per particle: x, y, z, pid (the particle's index within its block, as a float)
CHECKPOINT_PREFIX = "chk"
SIMULATION_NAME = "flash_like"
DEFAULT_NBLOCKS = 64
DEFAULT_NXB = 16
DT = 0.01
EXIT_STOPPED = 3  # --batch without --requeue: stopped early at the batch system's request, final checkpoint done
GAMMA_M1 = 0.4  # gamma - 1 of an ideal gas with gamma = 1.4


@dataclass
class RankState:
    """The part of the simulation state owned by one rank.

    ``fields`` maps each name of :data:`GRID_VARS` to a ``(nlocal, nxb, nxb, nxb)`` float64 array holding the
    blocks ``first_block .. first_block + nlocal - 1``. ``tracers`` is ``(ntracers, 4)`` float64 and
    ``tracer_block`` the global block index (int64) of each of these particles.
    """

    step: int
    dt: float
    nblocks: int
    nxb: int
    first_block: int
    fields: dict[str, np.ndarray]
    refine_level: np.ndarray
    bbox: np.ndarray
    tracers: np.ndarray
    tracer_block: np.ndarray

    @property
    def nlocal(self) -> int:
        """Number of blocks this rank owns."""
        return int(self.refine_level.shape[0])

    @property
    def time(self) -> float:
        """Simulation time. With a fixed dt it is a function of the step, so restarts cannot drift."""
        return self.step * self.dt


# --------------------------------------------------------------------------------------------------------
# Decomposition and geometry
# --------------------------------------------------------------------------------------------------------


def block_range(nblocks: int, nranks: int, rank: int) -> tuple[int, int]:
    """Return ``(first, count)`` of the contiguous block range owned by ``rank`` out of ``nranks``.

    The first ``nblocks % nranks`` ranks own one block more than the others; ranks beyond ``nblocks`` own
    an empty range.
    """
    base, extra = divmod(nblocks, nranks)
    count = base + (1 if rank < extra else 0)
    first = rank * base + min(rank, extra)
    return first, count


def lattice_size(nblocks: int) -> int:
    """Smallest ``m`` such that an ``m x m x m`` lattice of blocks holds ``nblocks`` blocks."""
    m = 1
    while m * m * m < nblocks:
        m += 1
    return m


def block_bbox(blocks: np.ndarray, nblocks: int) -> np.ndarray:
    """Bounding boxes ``(len(blocks), 3, 2)`` of the given global block indices (x-fastest lattice order)."""
    m = lattice_size(nblocks)
    blocks = np.asarray(blocks, dtype=np.int64)
    ijk = np.stack([blocks % m, (blocks // m) % m, blocks // (m * m)], axis=1).astype(np.float64)
    return np.stack([ijk / m, (ijk + 1.0) / m], axis=2)


def block_refine_level(blocks: np.ndarray) -> np.ndarray:
    """Synthetic AMR refinement level (1..3) of each block; it scales the velocity relaxation."""
    blocks = np.asarray(blocks, dtype=np.int64)
    return (1 + (blocks * 5) % 3).astype(np.int32)


def cell_centers(bbox: np.ndarray, nxb: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cell-centre coordinates ``x, y, z``, each broadcastable to ``(nblocks_local, nxb, nxb, nxb)``."""
    frac = (np.arange(nxb, dtype=np.float64) + 0.5) / nxb
    lo = bbox[:, :, 0]
    width = bbox[:, :, 1] - bbox[:, :, 0]
    x = lo[:, 0, None, None, None] + width[:, 0, None, None, None] * frac[None, None, None, :]
    y = lo[:, 1, None, None, None] + width[:, 1, None, None, None] * frac[None, None, :, None]
    z = lo[:, 2, None, None, None] + width[:, 2, None, None, None] * frac[None, :, None, None]
    return x, y, z


# --------------------------------------------------------------------------------------------------------
# Initial condition and update
# --------------------------------------------------------------------------------------------------------


def squash(a: np.ndarray) -> np.ndarray:
    """Smooth bounded map to (-1, 1), ``a / (1 + |a|)``: a sin()-like nonlinearity with exact rounding."""
    return a / (1.0 + np.abs(a))


def total_energy(
    dens: np.ndarray, pres: np.ndarray, velx: np.ndarray, vely: np.ndarray, velz: np.ndarray
) -> np.ndarray:
    """Total energy density of an ideal gas: internal plus kinetic."""
    return pres / GAMMA_M1 + 0.5 * dens * (velx * velx + vely * vely + velz * velz)


def initial_fields(bbox: np.ndarray, nxb: int) -> dict[str, np.ndarray]:
    """Initial grid variables of the blocks with the given bounding boxes (a blob in a swirling flow)."""
    shape = (bbox.shape[0], nxb, nxb, nxb)
    x, y, z = cell_centers(bbox, nxb)
    dx, dy, dz = x - 0.5, y - 0.5, z - 0.5
    r2 = dx * dx + dy * dy + dz * dz
    dens = 1.0 + 1.0 / (1.0 + 20.0 * r2)
    pres = 1.0 + 0.5 * x * y + 0.25 * z
    fields = {
        "dens": dens,
        "pres": pres,
        "temp": pres / dens,
        "velx": -0.3 * dy,
        "vely": 0.3 * dx,
        "velz": 0.1 * dz * (1.0 - 2.0 * r2),
    }
    full = {
        name: np.ascontiguousarray(np.broadcast_to(a, shape), dtype=np.float64) for name, a in fields.items()
    }
    full["ener"] = total_energy(full["dens"], full["pres"], full["velx"], full["vely"], full["velz"])
    return full


def initial_tracers(blocks: np.ndarray, bbox: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tracer particles of the given blocks: ``(tracers (n, 4), tracer_block (n,))``.

    Block ``b`` holds ``(b * 7) % 5 + 1`` particles at deterministic positions inside its bounding box;
    particles are ordered by block, then by their index within the block (stored as the 4th value).
    """
    blocks = np.asarray(blocks, dtype=np.int64)
    counts = (blocks * 7) % 5 + 1
    tracer_block = np.repeat(blocks, counts)
    local = np.repeat(np.arange(blocks.size), counts)
    starts = np.cumsum(counts) - counts
    pid = np.arange(tracer_block.size, dtype=np.int64) - np.repeat(starts, counts)
    cnt = np.repeat(counts, counts)
    frac = np.stack(
        [
            (2.0 * pid + 1.0) / (2.0 * cnt),
            ((tracer_block + 3 * pid) % 7 + 0.5) / 7.0,
            ((3 * tracer_block + 5 * pid) % 11 + 0.5) / 11.0,
        ],
        axis=1,
    )
    lo = bbox[local, :, 0]
    width = bbox[local, :, 1] - bbox[local, :, 0]
    tracers = np.empty((tracer_block.size, TRACER_WIDTH), dtype=np.float64)
    tracers[:, :3] = lo + width * frac
    tracers[:, 3] = pid
    return tracers, tracer_block


def advance_fields(
    fields: dict[str, np.ndarray], refine_level: np.ndarray, time: float, dt: float
) -> dict[str, np.ndarray]:
    """One explicit step of the toy update; element-wise, so each block depends only on itself.

    ``time`` enters only through a scalar forcing that every rank computes identically.
    """
    d, p, t = fields["dens"], fields["pres"], fields["temp"]
    u, v, w = fields["velx"], fields["vely"], fields["velz"]
    forcing = 1.0 + 0.5 * (time / (1.0 + time))
    relax = dt / refine_level.astype(np.float64)[:, None, None, None]
    kinetic = 0.5 * (u * u + v * v + w * w)
    new = {
        "dens": d + dt * 0.2 * (forcing + squash(p - 1.0) - d),
        "pres": 0.99 * p + 0.01 * d * t,
        "temp": t + dt * (kinetic - 0.1 * (t - 1.0)),
        "velx": 0.98 * u - relax * squash(v - w) * 0.1,
        "vely": 0.98 * v + relax * squash(u - d + p) * 0.1,
        "velz": 0.98 * w + relax * squash(d - p) * 0.1,
    }
    new["ener"] = total_energy(new["dens"], new["pres"], new["velx"], new["vely"], new["velz"])
    return new


def advance_tracers(
    tracers: np.ndarray,
    tracer_block: np.ndarray,
    first_block: int,
    bbox: np.ndarray,
    fields: dict[str, np.ndarray],
    nxb: int,
    dt: float,
) -> np.ndarray:
    """Move each particle with the velocity of the cell it sits in, wrapping periodically inside its block.

    Particles never leave their block, so their owner never changes (a real code would migrate them).
    """
    local = tracer_block - first_block
    lo = bbox[local, :, 0]
    width = bbox[local, :, 1] - bbox[local, :, 0]
    pos = tracers[:, :3]
    cell = np.clip(np.floor((pos - lo) / width * nxb).astype(np.int64), 0, nxb - 1)
    ix, iy, iz = cell[:, 0], cell[:, 1], cell[:, 2]
    vel = np.stack([fields[name][local, iz, iy, ix] for name in ("velx", "vely", "velz")], axis=1)
    moved = pos + dt * vel
    out = tracers.copy()
    out[:, :3] = lo + np.mod(moved - lo, width)
    return out


def advance(state: RankState) -> RankState:
    """Advance the rank's state by one step of size ``state.dt``."""
    tracers = advance_tracers(
        state.tracers, state.tracer_block, state.first_block, state.bbox, state.fields, state.nxb, state.dt
    )
    fields = advance_fields(state.fields, state.refine_level, state.time, state.dt)
    return RankState(
        step=state.step + 1,
        dt=state.dt,
        nblocks=state.nblocks,
        nxb=state.nxb,
        first_block=state.first_block,
        fields=fields,
        refine_level=state.refine_level,
        bbox=state.bbox,
        tracers=tracers,
        tracer_block=state.tracer_block,
    )


def initial_state(nblocks: int, nxb: int, nranks: int, rank: int, dt: float = DT) -> RankState:
    """State at step 0 of the blocks ``rank`` owns; depends only on global block and cell indices."""
    first, count = block_range(nblocks, nranks, rank)
    blocks = np.arange(first, first + count, dtype=np.int64)
    bbox = block_bbox(blocks, nblocks)
    tracers, tracer_block = initial_tracers(blocks, bbox)
    return RankState(
        step=0,
        dt=dt,
        nblocks=nblocks,
        nxb=nxb,
        first_block=first,
        fields=initial_fields(bbox, nxb),
        refine_level=block_refine_level(blocks),
        bbox=bbox,
        tracers=tracers,
        tracer_block=tracer_block,
    )


def select_tracers(
    all_tracers: np.ndarray, all_blocks: np.ndarray, first: int, count: int
) -> tuple[np.ndarray, np.ndarray]:
    """Keep the particles of blocks ``first .. first + count - 1``, sorted by (block, pid)."""
    tracers = all_tracers.reshape(-1, TRACER_WIDTH)
    keep = (all_blocks >= first) & (all_blocks < first + count)
    tracers, blocks = tracers[keep], all_blocks[keep]
    order = np.lexsort((tracers[:, 3], blocks))
    return np.ascontiguousarray(tracers[order]), np.ascontiguousarray(blocks[order])


# --------------------------------------------------------------------------------------------------------
# Checkpoint I/O
# --------------------------------------------------------------------------------------------------------


def checkpoint_path(outdir: str, step: int) -> str:
    """Path of the checkpoint of ``step`` in ``outdir``."""
    return os.path.join(outdir, f"{CHECKPOINT_PREFIX}_{step:06d}")


def flash_geometry_attrs(nblocks: int) -> dict[str, object]:
    """The domain and root-block lattice as FLASH names them (``ckptio convert --to flash`` needs them for yt):
    the unit cube, ``lattice_size(nblocks)`` root blocks along each axis, Cartesian."""
    m = lattice_size(nblocks)
    return {"geometry": "cartesian", "xmin": 0.0, "xmax": 1.0, "ymin": 0.0, "ymax": 1.0, "zmin": 0.0,
            "zmax": 1.0, "nblockx": m, "nblocky": m, "nblockz": m}


def write_checkpoint(series: ckptio.Series, state: RankState) -> ckptio.Writer:
    """Write the state collectively as the series' checkpoint of this step; every rank declares its blocks
    and its tracer segment. In async mode this returns once the data is staged in ckptio's buffers."""
    attrs = {
        "step": state.step,
        "time": state.time,
        "dt": state.dt,
        "nblocks": state.nblocks,
        "nxb": state.nxb,
        "simulation": SIMULATION_NAME,
        **flash_geometry_attrs(state.nblocks),
    }
    nb, nxb, first = state.nblocks, state.nxb, state.first_block
    with series.create(state.step, attrs=attrs) as ck:
        for name in GRID_VARS:
            ck.write(name, state.fields[name], offset=(first, 0, 0, 0), global_shape=(nb, nxb, nxb, nxb))
        ck.write("refine_level", state.refine_level, offset=(first,), global_shape=(nb,))
        ck.write("bbox", state.bbox, offset=(first, 0, 0), global_shape=(nb, 3, 2))
        ck.write("tracers", state.tracers)  # per-rank segments: (n, 4) here, every rank's rows in the file
        ck.write("tracer_block", state.tracer_block)
    return ck


def read_checkpoint(path: str, comm: MPI.Comm) -> RankState:
    """Read a checkpoint collectively, decomposed for the CURRENT communicator (any rank count)."""
    with ckptio.open(path, comm) as ck:
        attrs = ck.attrs
        simulation = attrs.get("simulation")
        if isinstance(simulation, bytes):
            simulation = simulation.decode()
        if simulation != SIMULATION_NAME:
            raise ValueError(f"{path} is not a {SIMULATION_NAME} checkpoint (simulation={simulation!r})")
        step, dt = int(attrs["step"]), float(attrs["dt"])
        nb, nxb = int(attrs["nblocks"]), int(attrs["nxb"])
        first, count = block_range(nb, comm.Get_size(), comm.Get_rank())
        fields = {}
        for name in GRID_VARS:
            if tuple(ck.variables[name].shape) != (nb, nxb, nxb, nxb):
                raise ValueError(
                    f"{path}: variable {name} has shape {ck.variables[name].shape}, "
                    f"expected {(nb, nxb, nxb, nxb)}"
                )
            fields[name] = ck.read(name, offset=(first, 0, 0, 0), shape=(count, nxb, nxb, nxb))
        refine_level = ck.read("refine_level", offset=(first,), shape=(count,))
        bbox = ck.read("bbox", offset=(first, 0, 0), shape=(count, 3, 2))
        # Segments belong to the writer's ranks; read everything and keep the particles of our blocks.
        tshape = ck.variables["tracers"].shape  # (n, 4); (4n,) in checkpoints of ckptio before N-d segments
        nvalues = int(np.prod(tshape))
        nparticles = int(ck.variables["tracer_block"].shape[0])
        all_tracers = ck.read("tracers", offset=(0,) * len(tshape), shape=tshape)
        all_blocks = ck.read("tracer_block", offset=(0,), shape=(nparticles,))
    if nvalues != TRACER_WIDTH * nparticles:
        raise ValueError(f"{path}: {nvalues} tracer values for {nparticles} particles")
    tracers, tracer_block = select_tracers(
        np.asarray(all_tracers, dtype=np.float64), np.asarray(all_blocks, dtype=np.int64), first, count
    )
    return RankState(
        step=step,
        dt=dt,
        nblocks=nb,
        nxb=nxb,
        first_block=first,
        fields={k: np.ascontiguousarray(a, dtype=np.float64) for k, a in fields.items()},
        refine_level=np.ascontiguousarray(refine_level, dtype=np.int32),
        bbox=np.ascontiguousarray(bbox, dtype=np.float64),
        tracers=tracers,
        tracer_block=tracer_block,
    )


def path_size(path: str) -> int:
    """Size in bytes of a checkpoint file (or of all files below it, should a backend use a directory)."""
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    return os.path.getsize(path)


# --------------------------------------------------------------------------------------------------------
# Final state
# --------------------------------------------------------------------------------------------------------


def gather_state(state: RankState, comm: MPI.Comm) -> dict[str, np.ndarray] | None:
    """Gather the full state on rank 0 in global block order, tracers sorted by (block, pid).

    Returns ``None`` on the other ranks. The result does not depend on the decomposition.
    """
    local = dict(state.fields)
    local.update(
        refine_level=state.refine_level,
        bbox=state.bbox,
        tracers=state.tracers,
        tracer_block=state.tracer_block,
    )
    parts = comm.gather(local, root=0)
    if parts is None:
        return None
    out = {name: np.concatenate([p[name] for p in parts]) for name in local}  # rank order == block order
    order = np.lexsort((out["tracers"][:, 3], out["tracer_block"]))
    out["tracers"], out["tracer_block"] = out["tracers"][order], out["tracer_block"][order]
    out.update(
        step=np.int64(state.step),
        time=np.float64(state.time),
        dt=np.float64(state.dt),
        nblocks=np.int64(state.nblocks),
        nxb=np.int64(state.nxb),
    )
    return out


def save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to exactly ``path`` (``np.savez`` would append ``.npz`` to a bare name)."""
    with open(path, "wb") as f:
        np.savez(f, **arrays)


# --------------------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------------------


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        description="FLASH-like block-structured mini-app with ckptio checkpoint/restart. "
        "Run it under mpirun; checkpoints are written to OUTDIR/chk_NNNNNN."
    )
    parser.add_argument("--outdir", required=True, help="directory for checkpoints (created if missing)")
    parser.add_argument(
        "--backend",
        choices=("mpiio", "hdf5", "pnetcdf"),
        default="mpiio",
        help="ckptio backend used to write checkpoints (default: %(default)s)",
    )
    parser.add_argument(
        "--steps",
        type=non_negative_int,
        default=20,
        help="total number of steps to reach (default: %(default)s)",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=positive_int,
        default=5,
        help="checkpoint at every step that is a multiple of this (default: %(default)s)",
    )
    parser.add_argument(
        "--nblocks",
        type=positive_int,
        default=None,
        help=f"global number of blocks (default: {DEFAULT_NBLOCKS}; on --restart taken from the checkpoint)",
    )
    parser.add_argument(
        "--nxb",
        type=positive_int,
        default=None,
        help=f"cells per block edge (default: {DEFAULT_NXB}; on --restart taken from the checkpoint)",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="continue from the newest complete checkpoint in OUTDIR (any rank count)",
    )
    parser.add_argument(
        "--final-state",
        metavar="FILE",
        default=None,
        help="rank 0 writes the gathered final state to FILE (.npz) for comparisons",
    )
    parser.add_argument("--mode", choices=("sync", "async"), default="sync",
                        help="async: checkpoints are written by ckptio's I/O thread while the run goes on")
    parser.add_argument("--stage-dir", default=None,
                        help="fast tier (e.g. /dev/shm/x) written first, then drained to OUTDIR in the background")
    parser.add_argument("--keep", type=positive_int, default=3, help="checkpoints to keep (default 3)")
    parser.add_argument("--resume", action="store_true",
                        help="restart from the newest complete checkpoint in OUTDIR if there is one, else start "
                        "afresh (what a requeued batch job runs)")
    parser.add_argument("--batch", action="store_true",
                        help="ask series.should_exit() every step: on the batch system's warning signal (or too "
                        "little wall time left) write a final checkpoint and stop (docs/guide/batch.md)")
    parser.add_argument("--requeue", action="store_true",
                        help="with --batch: after the final checkpoint, requeue the Slurm job (scontrol requeue) "
                        f"and exit 0; without it a stopped run exits with status {EXIT_STOPPED}")
    parser.add_argument("--step-seconds", type=float, default=0.0, metavar="S",
                        help="sleep S seconds per step (stands in for costlier physics; for demos and tests)")
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    return parser.parse_args(argv)


def open_series(args: argparse.Namespace, comm: MPI.Comm) -> ckptio.Series:
    """The run's checkpoint series: naming by step, retention, async/staged writing, restart fallback."""
    return ckptio.Series(args.outdir, comm, prefix=CHECKPOINT_PREFIX, keep=args.keep, backend=args.backend,
                         stage_dir=args.stage_dir, mode=args.mode)


def dens_range(state: RankState, comm: MPI.Comm) -> tuple[float, float]:
    """Global min and max of ``dens`` (min/max reductions do not depend on rank order)."""
    d = state.fields["dens"]
    lo = float(d.min()) if d.size else float("inf")
    hi = float(d.max()) if d.size else float("-inf")
    return comm.allreduce(lo, op=MPI.MIN), comm.allreduce(hi, op=MPI.MAX)


def run(args: argparse.Namespace, comm: MPI.Comm) -> int:
    """Run the simulation described by ``args`` on ``comm``; return the process exit status."""
    rank, nranks = comm.Get_rank(), comm.Get_size()
    verbose = rank == 0 and not args.quiet

    def say(message: str) -> None:
        if verbose:
            print(message, flush=True)

    series = open_series(args, comm)
    if args.batch:
        series.should_exit()  # collective; installs the signal handlers now, before the first step
    path = None
    if args.restart or args.resume:
        path = series.latest()  # newest complete and verified one (an undrained staged one is drained first)
        if path is None and args.restart:
            if rank == 0:
                print(
                    f"flash_like: --restart given but {args.outdir} holds no complete checkpoint",
                    file=sys.stderr,
                    flush=True,
                )
            return 1
    if path is not None:
        t0 = MPI.Wtime()
        state = read_checkpoint(path, comm)
        for name, given in (("nblocks", args.nblocks), ("nxb", args.nxb)):
            stored = getattr(state, name)
            if given is not None and given != stored:
                if rank == 0:
                    print(
                        f"flash_like: --{name} {given} does not match the checkpoint's {stored}",
                        file=sys.stderr,
                        flush=True,
                    )
                return 1
        say(
            f"restarted from {path}: step {state.step}, t={state.time:.4f}, {state.nblocks} blocks of "
            f"{state.nxb}^3 cells on {nranks} ranks ({MPI.Wtime() - t0:.3f} s)"
        )
    else:
        nblocks = args.nblocks if args.nblocks is not None else DEFAULT_NBLOCKS
        nxb = args.nxb if args.nxb is not None else DEFAULT_NXB
        state = initial_state(nblocks, nxb, nranks, rank)
        if rank == 0 and glob.glob(os.path.join(args.outdir, f"{CHECKPOINT_PREFIX}_*")):
            say(f"note: {args.outdir} already holds checkpoints; those with the same step get overwritten")
        say(f"fresh start: {nblocks} blocks of {nxb}^3 cells on {nranks} ranks, backend {args.backend}")

    last: list[ckptio.Writer] = []  # the last checkpoint's writer: still being written in the background?

    def checkpoint() -> None:
        path = checkpoint_path(args.outdir, state.step)
        t0 = MPI.Wtime()
        writer = write_checkpoint(series, state)
        last[:] = [writer]
        elapsed = MPI.Wtime() - t0
        done = writer.done() and os.path.exists(path)
        size = f"{path_size(path) / 2**20:.2f} MiB, " if done else "in background, "
        if not args.quiet:
            dmin, dmax = dens_range(state, comm)  # collective: every rank takes part
        if verbose:
            say(
                f"step {state.step:6d}  t={state.time:8.4f}  dens [{dmin:.6f}, {dmax:.6f}]  wrote {path} "
                f"({args.backend}, {size}{elapsed:.3f} s blocked)"
            )

    stopped = False
    while state.step < args.steps:
        state = advance(state)
        if args.step_seconds:
            time.sleep(args.step_seconds)
        written = state.step % args.checkpoint_every == 0
        if written:
            checkpoint()
        # the batch system wants the job gone soon: the same answer on every rank (one small allreduce)
        if args.batch and state.step < args.steps and series.should_exit():
            busy = "; a background checkpoint is still being written" if last and not last[0].done() else ""
            say(f"stopping at step {state.step}: {batch.last_decision()}{busy}")
            if not written:
                checkpoint()  # the final checkpoint
            stopped = True
            break

    series.wait()  # background checkpoints committed (errors raised here on every rank), retention applied
    if stopped:
        say(f"final checkpoint {checkpoint_path(args.outdir, state.step)} committed")
        if not args.requeue:
            return EXIT_STOPPED  # the job script requeues (examples/slurm/)
        batch.requeue(comm)  # collective; Slurm ends this run now and starts the job script again
        say("job requeued")
        return 0
    if args.final_state:
        gathered = gather_state(state, comm)
        if gathered is not None:
            save_npz(args.final_state, gathered)
            say(f"final state at step {state.step} written to {args.final_state}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    return run(parse_args(argv), MPI.COMM_WORLD)


if __name__ == "__main__":
    sys.exit(main())
