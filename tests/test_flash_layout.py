"""`ckptio convert SRC DST --to flash`: the FLASH-like example's checkpoint (written under mpirun, 2 ranks, by the
hdf5 and the native backend) becomes an HDF5 file in FLASH's layout that yt's FLASH frontend loads with a real
`yt.load`, with the same values as the checkpoint (mean, single cells, a point probe, time, domain); a refined
block tree keeps yt's parent/child masks right; what a FLASH file needs and the checkpoint lacks is named (exit 2,
nothing written); `--force` replaces only a file ckptio wrote."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import PROGRAMS, REPO, mpi_env, run_mpi

APP = str(REPO / "examples" / "flash_like" / "flash_like.py")
CKPTIO = str(Path(sys.executable).parent / "ckptio")
NB, NXB = 8, 8  # a 2 x 2 x 2 lattice of root blocks of 8^3 cells over the unit cube
PROGRAM = str(PROGRAMS / "flash_layout.py")  # writes a small checkpoint of each case, one process


def ckptio(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CKPTIO, *args], capture_output=True, text=True, env=mpi_env(), timeout=300,
                          stdin=subprocess.DEVNULL)


def write_serial(tmp_path: Path, case: str) -> Path:
    """A checkpoint of ``case`` written by one process (no mpirun): "refined" (one root block and its 8 children),
    "no-geometry" (the attribute missing), "no-bbox" (the variable missing)."""
    path = tmp_path / f"{case}.ck"
    subprocess.run([sys.executable, PROGRAM, "write", str(path), case], check=True, env=mpi_env(), timeout=120,
                   capture_output=True)
    return path


def read_serial(path: Path, name: str) -> np.ndarray:
    """The whole variable, read by ckptio in a subprocess (this test process never initialises MPI)."""
    out = path.parent / f"{path.name}.{name}.npy"
    subprocess.run([sys.executable, "-c", "import sys, numpy as np, ckptio; ck = ckptio.open(sys.argv[1]); "
                    "np.save(sys.argv[3], ck.read(sys.argv[2]))", str(path), name, str(out)],
                   check=True, env=mpi_env(), timeout=120, capture_output=True)
    return np.load(out)


def load(path: Path):
    import yt

    yt.set_log_level(40)
    return yt.load(str(path))


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> dict[str, Path]:
    """The FLASH-like example's step-5 checkpoint by the hdf5 and the mpiio backend, 2 ranks each."""
    d = tmp_path_factory.mktemp("flash_layout")
    out = {}
    for backend in ("hdf5", "mpiio"):
        run_mpi(2, [APP, "--outdir", str(d / backend), "--backend", backend, "--nblocks", str(NB), "--nxb",
                    str(NXB), "--steps", "5", "--checkpoint-every", "5", "--quiet"])
        out[backend] = d / backend / "chk_000005"
    return out


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["hdf5", "mpiio"])
def test_yt_loads_the_flash_like_example_with_the_checkpoints_values(example, backend, tmp_path):
    src = example[backend]
    dst = tmp_path / "flash_like_hdf5_chk_0005"
    proc = ckptio("convert", str(src), str(dst), "--to", "flash")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "7 grid variables" in proc.stdout and "not converted (not grid variables): refine_level" in proc.stdout
    dens, bbox = read_serial(src, "dens"), read_serial(src, "bbox")

    ds = load(dst)
    assert type(ds).__name__ == "FLASHDataset"
    assert ds.dimensionality == 3 and list(ds.domain_dimensions) == [16, 16, 16]
    assert float(ds.current_time) == 0.05  # 5 steps of dt 0.01: the checkpoint's attribute "time"
    assert list(ds.domain_left_edge.d) == [0, 0, 0] and list(ds.domain_right_edge.d) == [1, 1, 1]
    assert {f for _, f in ds.field_list} == {"dens", "pres", "temp", "velx", "vely", "velz", "ener"}
    assert ds.index.num_grids == NB
    ad = ds.all_data()
    assert ad["flash", "dens"].size == dens.size
    np.testing.assert_allclose(float(ad["flash", "dens"].mean()), dens.mean(), rtol=1e-13)
    for b in (0, 3, NB - 1):  # yt's grids are (x, y, z); the checkpoint's blocks (z, y, x)
        grid = ds.index.grids[b]
        np.testing.assert_array_equal(grid["flash", "dens"].d, dens[b].T)
        np.testing.assert_array_equal(grid["flash", "pres"].d, read_serial(src, "pres")[b].T)
        np.testing.assert_array_equal(grid.LeftEdge.d, bbox[b, :, 0])
        np.testing.assert_array_equal(grid.RightEdge.d, bbox[b, :, 1])
    # a point probe: (0.1, 0.7, 0.3) is in block 2 (lattice x-fastest: i=0, j=1, k=0), cell x=1, y=3, z=4
    assert float(ds.r[0.1, 0.7, 0.3]["flash", "dens"][0]) == dens[2, 4, 3, 1]


@pytest.mark.mpi
def test_a_refined_block_tree_keeps_yts_parent_child_masks(tmp_path):
    src = write_serial(tmp_path, "refined")
    dst = tmp_path / "refined_hdf5_chk_0000"
    proc = ckptio("convert", str(src), str(dst), "--to", "flash")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import h5py

    with h5py.File(dst) as f:
        assert list(f["refine level"][:]) == [1] + [2] * 8
        assert list(f["gid"][0, 6:]) == [-1, 2, 3, 4, 5, 6, 7, 8, 9]  # no parent; children 1-based, x fastest
        assert list(f["gid"][1, :7]) == [-1, 3, -1, 4, -1, 6, 1]  # same-level neighbours, then the parent
        assert list(f["node type"][:]) == [2] + [1] * 8
    ds = load(dst)
    assert ds.index.max_level == 1 and list(ds.domain_dimensions) == [4, 4, 4]
    leaf = ds.all_data()["flash", "dens"].d
    children = np.arange(8 * 64, dtype=float)
    assert leaf.size == children.size and sorted(leaf) == sorted(children)  # the parent's 100s are all masked
    assert float(ds.r[1.6, 0.2, 1.1]["flash", "dens"][0]) == 5 * 64 + 0 * 16 + 0 * 4 + 2  # block 6: child (1, 0, 1)


@pytest.mark.mpi
@pytest.mark.parametrize("case, named", [("no-geometry", "attribute 'geometry' is missing"),
                                         ("no-bbox", "variable 'bbox'")])
def test_what_a_flash_file_needs_is_named_and_nothing_is_written(tmp_path, case, named):
    src = write_serial(tmp_path, case)
    dst = tmp_path / "out_hdf5_chk_0000"
    proc = ckptio("convert", str(src), str(dst), "--to", "flash")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert named in proc.stderr and str(src) in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [src.name]  # no DST, no temporary


@pytest.mark.mpi
def test_force_replaces_only_a_flash_file_ckptio_wrote(tmp_path):
    src = write_serial(tmp_path, "refined")
    other = tmp_path / "other.h5"
    other.write_bytes(b"\x89HDF\r\n\x1a\n not ours")
    for args in ([], ["--force"]):
        proc = ckptio("convert", str(src), str(other), "--to", "flash", *args)
        assert proc.returncode == 2 and str(other) in proc.stderr, proc.stderr
    assert other.read_bytes() == b"\x89HDF\r\n\x1a\n not ours"
    dst = tmp_path / "ours_hdf5_chk_0000"
    assert ckptio("convert", str(src), str(dst), "--to", "flash").returncode == 0
    assert ckptio("convert", str(src), str(dst), "--to", "flash").returncode == 2  # exists
    proc = ckptio("convert", str(src), str(dst), "--to", "flash", "--force")
    assert proc.returncode == 0, proc.stderr
    assert load(dst).index.num_grids == 9


@pytest.mark.mpi
def test_a_damaged_source_is_reported_and_leaves_nothing_behind(tmp_path):
    src = write_serial(tmp_path, "refined")
    data = bytearray(src.read_bytes())
    at = data.index(np.float64(100.0).tobytes())  # the parent block's first value
    data[at] ^= 0x01
    src.write_bytes(bytes(data))
    dst = tmp_path / "damaged_hdf5_chk_0000"
    proc = ckptio("convert", str(src), str(dst), "--to", "flash")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "is damaged, nothing written" in proc.stderr and "checksum mismatch" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [src.name]  # no DST, no temporary


def test_blocks_off_the_flash_tree_are_named():
    from ckptio.tools.flash_layout import FlashLayoutError, plan_grid

    attrs = {"time": 0.0, "geometry": "cartesian", "xmin": 0.0, "xmax": 1.0, "ymin": 0.0, "ymax": 1.0,
             "zmin": 0.0, "zmax": 1.0, "nblockx": 2, "nblocky": 2, "nblockz": 2}
    lo = np.array([[i, j, k] for k in (0, 1) for j in (0, 1) for i in (0, 1)], float) / 2
    bbox = np.stack([lo, lo + 0.5], axis=2)
    grid = plan_grid(attrs, bbox, (4, 4, 4), "chk")
    assert list(grid.refine_level) == [1] * 8 and grid.ndim == 3
    assert list(grid.gid[0, :6]) == [-1, 2, -1, 3, -1, 5]  # same-level neighbours, 1-based
    shifted = bbox.copy()
    shifted[5] += 0.1
    with pytest.raises(FlashLayoutError, match=r"chk: block 5 .* is not a root block"):
        plan_grid(attrs, shifted, (4, 4, 4), "chk")
    with pytest.raises(FlashLayoutError, match="blocks 0 and 1 have the same bounding box"):
        plan_grid(attrs, np.concatenate([bbox[:1], bbox[:1]]), (4, 4, 4), "chk")
    with pytest.raises(FlashLayoutError, match="attribute 'nblockx' = 'two' is not an integer"):
        plan_grid({**attrs, "nblockx": "two"}, bbox, (4, 4, 4), "chk")
    with pytest.raises(FlashLayoutError, match="'geometry' = 'cubic' is not one of"):
        plan_grid({**attrs, "geometry": "cubic"}, bbox, (4, 4, 4), "chk")
    parent = np.array([[[0.0, 1.0]] * 3])  # a root block of a 1x1x1 lattice with only 7 of its 8 children
    with pytest.raises(FlashLayoutError, match="block 0 has some but not all of its 8 children"):
        plan_grid({**attrs, "nblockx": 1, "nblocky": 1, "nblockz": 1}, np.concatenate([parent, bbox[:7]]),
                  (4, 4, 4), "chk")
