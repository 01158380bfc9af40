"""Small variables one rank holds whole go out with an independent ``H5Dwrite`` by that rank (in the write's
first step, with the block tables) instead of one collective ``H5Dwrite`` per variable on every rank
(``backends.hdf5_lib.written_by_its_owner``, issue 29's metadata cost per variable). Which variables qualify
(planning rank, pure), and a checkpoint mixing every kind written on 4 ranks and restarted on 3, every value
checked, and read by plain serial h5py."""

from __future__ import annotations

import numpy as np
import pytest
from ckptio.backends.hdf5_lib import written_by_its_owner
from mpi_helpers import PROGRAMS, run_mpi

from ckptio.model.layout import Box
from ckptio.model.variable_plan import BlockPlan, VariablePlan

PROGRAM = str(PROGRAMS / "hdf5_by_owner.py")
STRIPE = 1 << 20


def _var(shape, blocks, dtype="float64"):
    """A plan of ``blocks`` = [(rank, offset, shape)]."""
    plans = [BlockPlan(r, i, Box(o, s), None, None, None) for i, (r, o, s) in enumerate(blocks)]
    return VariablePlan.from_blocks("v", dtype, shape, "array", plans)


@pytest.mark.parametrize("case, expected", [
    ("one rank, one block", True),
    ("one rank, several blocks", True),
    ("one rank, empty blocks of others", True),
    ("a scalar", True),
    ("two ranks", False),
    ("larger than the stripe unit", False),
    ("no bytes", False),
])
def test_which_variables_their_one_writer_writes_independently(case, expected):
    var = {
        "one rank, one block": _var((128,), [(2, (0,), (128,))]),
        "one rank, several blocks": _var((64, 4), [(1, (0, 0), (16, 4)), (1, (16, 0), (48, 4))]),
        "one rank, empty blocks of others": _var((128,), [(0, (0,), (0,)), (3, (0,), (128,)), (1, (128,), (0,))]),
        "a scalar": _var((), [(3, (), ())]),
        "two ranks": _var((128,), [(0, (0,), (64,)), (1, (64,), (64,))]),
        "larger than the stripe unit": _var((STRIPE // 8 + 1,), [(0, (0,), (STRIPE // 8 + 1,))]),
        "no bytes": _var((0, 3), [(0, (0, 0), (0, 3))]),
    }[case]
    assert written_by_its_owner(var, STRIPE) is expected


def test_the_hdf5_placement_makes_no_collective_call_for_variables_written_by_their_owner():
    from ckptio.backends.hdf5 import HDF5Backend

    variables = {"own": _var((128,), [(1, (0,), (128,))]), "shared": _var((128,), [(0, (0,), (64,)),
                                                                                   (1, (64,), (64,))])}
    placement = HDF5Backend().place(variables, STRIPE, 2)
    assert placement.whole["by_owner"] == ["own"]
    assert placement.whole["ncalls"] == {"own": 0, "shared": 1}
    assert placement.same_for_all  # one share for every rank: broadcast once, not pickled per rank


@pytest.mark.mpi
def test_a_mix_of_owned_shared_large_scalar_and_empty_variables_restarts_4_to_3(tmp_path):
    path = str(tmp_path / "mixed.h5")
    wrote = run_mpi(4, [PROGRAM, "write", path])
    # one independent step for the 4 x 42 owned variables, then one collective call each for shared and big
    assert wrote.stdout.split("STEPS", 1)[1].split() == ["3"] * 4, wrote.stdout
    read = run_mpi(3, [PROGRAM, "read", path, "4"])
    assert read.stdout.strip().splitlines()[-1] == "OK", read.stdout + read.stderr

    import h5py  # a plain serial reader sees the same values (the file is plain HDF5)
    from programs.hdf5_by_owner import values

    with h5py.File(path, "r") as f:
        for name in ("own0_0", "own3_39", "gappy2", "tiles1", "shared", "big"):
            assert np.array_equal(f[name][()], values(name, f[name].shape)), name
        assert float(f["scalar"][()]) == 3.25 and f["empty"].shape == (0, 3)
