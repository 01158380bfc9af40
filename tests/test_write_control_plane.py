"""The write control plane (issue 13): rank 0 plans with every rank's declarations, every other rank receives
only the plan's O(variables) part and its own share, and rebuilds exactly the blocks rank 0 planned for it."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from ckptio.backends.mpiio import NativeBackend
from mpi_helpers import PROGRAMS, run_mpi

from ckptio.model.plan import plan_write
from ckptio.model.rank_plan import own_plan, plan_headers, segment_starts
from ckptio.tools import scale

PROGRAM = str(PROGRAMS / "write_control_plane.py")  # the MPI program of these tests


def _declarations(seed: int, nprocs: int) -> list[list[dict]]:
    """Random declarations: a 2-D array cut into row bands (some ranks own none, some several), a segment
    variable some ranks skip, a scalar on one rank; compressed sizes on some blocks."""
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 12))
    cuts = sorted({0, rows, *rng.integers(0, rows, size=3).tolist()})
    out: list[list[dict]] = [[] for _ in range(nprocs)]
    for lo, hi in itertools.pairwise(cuts):
        r = int(rng.integers(0, nprocs))
        out[r].append({"name": "dens", "dtype": "<f8", "kind": "array", "global_shape": [rows, 3],
                       "offset": [lo, 0], "shape": [hi - lo, 3], "checksum": f"{lo:016x}",
                       "stored_nbytes": int(rng.integers(1, 99)) if lo % 2 else None,
                       "codec": "zstd:3" if lo % 2 else None})
    for r in range(nprocs):
        if rng.random() < 0.7:
            out[r].append({"name": "parts", "dtype": "<i4", "kind": "segment", "length": int(rng.integers(0, 5)),
                           "trailing": [], "checksum": f"{r:016x}"})
        if rng.random() < 0.5:
            out[r].append({"name": "tracers", "dtype": "<f4", "kind": "segment",
                           "length": int(rng.integers(0, 4)), "trailing": [4, 2], "checksum": f"{r + 7:016x}"})
        rng.shuffle(out[r])  # declaration order is each rank's own
    out[int(rng.integers(0, nprocs))].append({"name": "t", "dtype": "<f8", "kind": "array", "global_shape": [],
                                              "offset": [], "shape": [], "checksum": "0" * 16})
    return out


@pytest.mark.parametrize("seed", range(25))
def test_every_rank_rebuilds_exactly_its_own_planned_blocks(seed: int) -> None:
    nprocs = 1 + seed % 6
    decls = _declarations(seed, nprocs)
    full = plan_write(decls)
    headers = plan_headers(full)
    starts = segment_starts(full, nprocs)
    for rank in range(nprocs):
        mine = own_plan(headers, decls[rank], rank, starts[rank])
        assert list(mine) == list(full)
        for name, var in full.items():
            assert (mine[name].dtype, mine[name].shape, mine[name].kind) == (var.dtype, var.shape, var.kind)
            assert mine[name].total_blocks == len(var.blocks)
            assert mine[name].blocks == [b for b in var.blocks if b.rank == rank], (name, rank)


def test_native_placement_shares_hold_only_each_ranks_offsets() -> None:
    decls = _declarations(3, 4)
    full = plan_write(decls)
    placement = NativeBackend().place(full, 1 << 20, 4)
    for rank, share in enumerate(placement.shares):
        assert len(share["offsets"]) == len(decls[rank]) and share["header"] == (rank == 0)
        assert share["data_end"] == placement.whole["data_end"] and "regions" not in share
    assert placement.whole["regions"] and placement.whole["offsets"] == placement.shares[0]["offsets"]


def test_what_a_rank_receives_does_not_grow_with_the_job() -> None:
    """The scale harness at 100 and 800 ranks: every other rank receives the same bytes, but for the digits of
    larger numbers (headers, its own share, the light document); the rebuilt plan holds its own 24 blocks only."""
    small = scale.write_control_plane(100, 100 * 24 * 2 * 32768)
    large = scale.write_control_plane(800, 800 * 24 * 2 * 32768)
    for what, n in large["receives"].items():  # only the numbers' digits grow (shapes, offsets): O(log ranks)
        assert n <= small["receives"][what] * 1.1, (what, small["receives"], large["receives"])
    assert large["metadata_document_bytes"] > 4 * small["metadata_document_bytes"]  # what rank 0 keeps grows


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_only_rank_0_holds_the_document_after_a_write(tmp_path: Path, nprocs: int) -> None:
    proc = run_mpi(nprocs, [PROGRAM, "write_and_look", str(tmp_path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("OK") == nprocs
