"""FLASH-like driver: 20 straight steps == 10 steps + restart + 10 steps, bit for bit, for every backend,
also on another rank count (4 -> 3) and across backends (checkpoint by one, continue writing with another)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import BACKENDS, REPO, run_mpi

APP = str(REPO / "examples" / "flash_like" / "flash_like.py")
SMALL = ["--nblocks", "12", "--nxb", "8", "--checkpoint-every", "5", "--quiet"]


def _final(path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _assert_identical(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert a[k].tobytes() == b[k].tobytes(), f"{k} differs"


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    d = tmp_path_factory.mktemp("straight")
    run_mpi(2, [APP, "--outdir", str(d / "run"), "--steps", "20", "--final-state", str(d / "final.npz"), *SMALL])
    return _final(d / "final.npz")


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("first, second", [(2, 2), (4, 4), (4, 3)])
def test_restart_is_bit_identical(backend, first, second, straight, tmp_path):
    out = str(tmp_path / "run")
    run_mpi(first, [APP, "--outdir", out, "--backend", backend, "--steps", "10", *SMALL])
    run_mpi(second, [APP, "--outdir", out, "--backend", backend, "--steps", "20", "--restart",
                     "--final-state", str(tmp_path / "final.npz"), *SMALL])
    _assert_identical(straight, _final(tmp_path / "final.npz"))


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("first, second", [("mpiio", "hdf5"), ("hdf5", "pnetcdf"), ("pnetcdf", "mpiio")])
def test_restart_across_backends(first, second, straight, tmp_path):
    out = str(tmp_path / "run")
    run_mpi(4, [APP, "--outdir", out, "--backend", first, "--steps", "10", *SMALL])
    run_mpi(3, [APP, "--outdir", out, "--backend", second, "--steps", "20", "--restart",
                "--final-state", str(tmp_path / "final.npz"), *SMALL])
    _assert_identical(straight, _final(tmp_path / "final.npz"))
    from ckptio.backends import detect_backend

    import ckptio

    assert detect_backend(ckptio.latest(out)).name == second
