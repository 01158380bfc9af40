"""After ckptio closes an HDF5 file it hands HDF5's free lists back to the C library (``H5garbage_collect``,
``backends.hdf5_lib.release_free_lists``): a checkpoint of thousands of small datasets otherwise leaves MBs of
them spread over the heap, and every allocation of the process afterwards runs slower (the simulation's too: the
next 10,000-variable checkpoint took 60 us per variable instead of 47). Measured with HDF5's own
``H5get_free_list_sizes`` (HDF5 >= 1.10.7), against plain h5py writing the same datasets, which keeps them. One
process (``MPI.COMM_SELF``), no mpirun."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import ckptio

h5py = pytest.importorskip("h5py")
if "hdf5" not in ckptio.backends.available_backends():
    pytest.skip("the hdf5 backend is not available (h5py without MPI)", allow_module_level=True)

NVARS = 2000


def _library():
    lib = ctypes.CDLL(h5py.h5f.__file__)  # dlsym also searches the libhdf5 h5py is linked against
    try:
        sizes = lib.H5get_free_list_sizes
    except AttributeError:
        pytest.skip("HDF5 before 1.10.7 has no H5get_free_list_sizes")
    sizes.argtypes = [ctypes.POINTER(ctypes.c_size_t)] * 4
    sizes.restype = ctypes.c_int
    return lib, sizes


def _held(sizes) -> int:
    """Bytes in HDF5's free lists (regular, array, block and factory lists)."""
    values = [ctypes.c_size_t() for _ in range(4)]
    assert sizes(*[ctypes.byref(v) for v in values]) >= 0
    return sum(v.value for v in values)


def test_an_hdf5_checkpoint_leaves_no_free_lists_behind_where_plain_h5py_leaves_megabytes(tmp_path):
    from ckptio.coord.mpi import MPI

    lib, sizes = _library()
    lib.H5garbage_collect()
    before = _held(sizes)
    with h5py.File(tmp_path / "plain.h5", "w") as f:  # the control: what the same datasets leave behind
        for i in range(NVARS):
            f.create_dataset(f"v{i:04d}", data=np.arange(128.0))
    plain = _held(sizes) - before
    assert plain > 512 * 1024, f"plain h5py left only {plain} bytes in HDF5's free lists: the measure shows nothing"

    lib.H5garbage_collect()
    before = _held(sizes)
    path = str(tmp_path / "c.ckpt")
    with ckptio.create(path, MPI.COMM_SELF, backend="hdf5") as ck:
        for i in range(NVARS):
            ck.write(f"v{i:04d}", np.arange(128.0) + i, offset=(0,), global_shape=(128,))
    written = _held(sizes) - before
    with ckptio.open(path, MPI.COMM_SELF) as reader:
        got = reader.read_many([(f"v{i:04d}", (0,), (128,)) for i in range(NVARS)])
    read = _held(sizes) - before
    assert all(np.array_equal(g, np.arange(128.0) + i) for i, g in enumerate(got))
    assert written < 64 * 1024 and read < 64 * 1024, (written, read, plain)


def test_every_dataset_is_contiguous_allocated_early_and_never_filled(tmp_path):
    """The HDF5 write creates every variable's dataset with one shared creation property list (contiguous,
    allocated at creation, never filled; h5py sets the same flags on it each time): each dataset of a checkpoint
    of several dtypes, shapes and a scalar has exactly those properties and no filter."""
    from ckptio.coord.mpi import MPI

    path = str(tmp_path / "c.ckpt")
    arrays = {"f8": np.arange(12.0).reshape(3, 4), "i4": np.arange(5, dtype=np.int32), "u1": np.zeros(7, np.uint8),
              "c16": np.ones(2, np.complex128), "scalar": np.array(2.5)}
    with ckptio.create(path, MPI.COMM_SELF, backend="hdf5") as ck:
        for name, a in arrays.items():
            ck.write(name, a, offset=(0,) * a.ndim, global_shape=a.shape)
    with h5py.File(path, "r") as f:
        for name, a in arrays.items():
            plist = f[name].id.get_create_plist()
            assert plist.get_layout() == h5py.h5d.CONTIGUOUS, name
            assert plist.get_alloc_time() == h5py.h5d.ALLOC_TIME_EARLY, name
            # (HDF5 1.10 reports a scalar dataset's fill time as IFSET, with the same property list; no fill value
            # is set, so nothing is filled: as before the list was shared)
            never = (h5py.h5d.FILL_TIME_NEVER,) if a.ndim else (h5py.h5d.FILL_TIME_NEVER, h5py.h5d.FILL_TIME_IFSET)
            assert plist.get_fill_time() in never, name
            assert plist.get_nfilters() == 0, name
            assert f[name].dtype == a.dtype and f[name].shape == a.shape and np.array_equal(f[name][()], a), name
