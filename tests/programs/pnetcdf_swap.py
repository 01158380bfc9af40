"""The MPI programs of ``tests/test_pnetcdf_swap.py`` (``mpirun -n P python pnetcdf_swap.py CASE PATH``): the
pnetcdf backend lets PnetCDF byte-swap write buffers in place (``nc_in_place_swap=enable``) and gives it a private
copy of every buffer that is not safe to change for a moment (``backends/pnetcdf_write.swappable``).

* ``restored PATH``: every kind of array a caller may hand over (its own arrays, one array under two names, a slice
  of another block, read-only memory, a file mapping, a scalar, big-endian and one-byte data, a strided view
  overlapping a contiguous block) is bitwise what it was after ``close()``, the file mapping was never written to
  (its mtime is untouched), and the file holds the values, read back by pnetcdf-python itself and by ckptio;
  prints ``OK <rank>``;
* ``failure PATH``: rank 1 fails once every rank posted its writes (``internals.fail_after_posting``): every rank
  raises the same CheckpointError, every array is restored, nothing is left at PATH, and the next checkpoint
  works; prints ``OK <rank>``;
* ``peak PATH``: the growth of the process' peak resident memory (``VmHWM``, reset through
  ``/proc/self/clear_refs``) while a 64 MiB block is written, with the default hints and with
  ``nc_in_place_swap=disable`` (PnetCDF's swapped copy); prints ``PEAK <rank> <default> <disable> <bytes>``.
"""

from __future__ import annotations

import mmap
import os
import sys

import internals
import numpy as np

import ckptio


def _arrays(comm, path: str) -> dict[str, np.ndarray]:
    """Name -> this rank's block of each variable (the global arrays are ``size`` such blocks along axis 0)."""
    r = comm.rank
    big = np.arange(300_000, dtype=np.float64) + r * 1e6  # 2.4 MB: PnetCDF swaps it in place
    mapped_path = f"{path}.rank{r}.map"
    with open(mapped_path, "wb") as f:
        f.write((np.arange(50_000, dtype=np.float64) * 3 + r).tobytes())
    os.utime(mapped_path, (1_000_000_000, 1_000_000_000))  # any write through the mapping moves it to now
    mapped = np.memmap(mapped_path, dtype=np.float64, mode="r+")
    plane = np.arange(40 * 50, dtype=np.int32).reshape(40, 50) + r
    return {
        "big": big,
        "big_again": big,  # the same memory under a second name: swapped twice, it would be written unswapped
        "big_part": big[1000:21000],  # a slice of another block's memory
        "readonly": np.frombuffer((np.arange(10_000, dtype=np.float64) - r).tobytes(), dtype=np.float64),
        "mapped": mapped,
        "scalar": np.asarray(2.5),  # written by rank 0
        "bigendian": (np.arange(7_000, dtype=np.float64) * 0.5 + r).astype(">f8"),
        "bytes": (np.arange(5_000) % 251 + r).astype(np.uint8),
        "plane": plane,
        "plane_cols": plane[:, 10:20],  # a strided view of a contiguous block's memory
        "ints": np.arange(20_000, dtype=np.int64) - 7 * r,
    }


def _write(comm, path: str, arrays: dict[str, np.ndarray], **kw) -> None:
    r, p = comm.rank, comm.size
    with ckptio.create(path, comm, backend="pnetcdf", **kw) as ck:
        for name, a in arrays.items():
            if a.ndim == 0:
                if r == 0:
                    ck.write(name, a, offset=(), global_shape=())
                continue
            ck.write(name, a, offset=(r * a.shape[0],) + (0,) * (a.ndim - 1),
                     global_shape=(p * a.shape[0], *a.shape[1:]))


def restored(comm, path: str) -> None:
    import pnetcdf

    r = comm.rank
    arrays = _arrays(comm, path)
    before = {name: (a.dtype.str, a.tobytes()) for name, a in arrays.items()}
    _write(comm, path, arrays)
    for name, a in arrays.items():
        assert (a.dtype.str, a.tobytes()) == before[name], f"rank {r}: {name} changed by the checkpoint"
    mapped = arrays["mapped"]
    assert isinstance(mapped.base, mmap.mmap)
    assert os.stat(f"{path}.rank{r}.map").st_mtime == 1_000_000_000, "the file mapping was written to"
    comm.Barrier()
    with pnetcdf.File(path, mode="r", comm=comm) as f:  # PnetCDF's own reading of what ckptio wrote
        for name, a in arrays.items():
            got = np.empty(a.shape, a.dtype.newbyteorder("="))
            if a.ndim == 0:
                f.variables[name].get_var_all(got)
            else:
                start = [r * a.shape[0]] + [0] * (a.ndim - 1)
                f.variables[name].get_var_all(got, start=start, count=list(a.shape))
            assert np.array_equal(got, a), f"rank {r}: {name} in the file differs"
    with ckptio.open(path, comm) as ck:  # ckptio's restart (every block's checksum verified)
        for name, a in arrays.items():
            got = ck.read(name) if a.ndim == 0 else ck.read(
                name, offset=(r * a.shape[0],) + (0,) * (a.ndim - 1), shape=a.shape)
            assert np.array_equal(got, a), f"rank {r}: {name} read back differs"
    del mapped, arrays
    print("OK", r, flush=True)


def failure(comm, path: str) -> None:
    r = comm.rank
    arrays = _arrays(comm, path)
    before = {name: a.tobytes() for name, a in arrays.items()}
    internals.fail_after_posting("pnetcdf", 1)
    try:
        _write(comm, path, arrays)
    except ckptio.CheckpointError as exc:
        assert "injected: rank 1 fails after posting" in str(exc), str(exc)
    else:
        raise AssertionError(f"rank {r}: the checkpoint did not fail")
    for name, a in arrays.items():
        assert a.tobytes() == before[name], f"rank {r}: {name} not restored after the failed checkpoint"
    comm.Barrier()
    assert not os.path.exists(path), f"{path} exists after a failed checkpoint"
    u = np.arange(1000.0) + r  # the job goes on (the patched pnetcdf backend would fail again: the native one)
    with ckptio.create(path + ".next", comm, backend="mpiio") as ck:
        ck.write("u", u, offset=(r * 1000,), global_shape=(comm.size * 1000,))
    with ckptio.open(path + ".next", comm) as ck:
        assert np.array_equal(ck.read("u", offset=(r * 1000,), shape=(1000,)), u)
    print("OK", r, flush=True)


def _hwm_growth(action) -> int:
    """Bytes the peak resident set grew by while ``action()`` ran (VmHWM reset first: /proc/self/clear_refs)."""
    def hwm() -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    start = hwm()
    action()
    return hwm() - start


def peak(comm, path: str) -> None:
    r, p = comm.rank, comm.size
    u = np.arange(8 << 20, dtype=np.float64) + r  # 64 MiB
    shape = (p * u.size,)

    def write(name: str, **kw) -> None:
        with ckptio.create(name, comm, backend="pnetcdf", **kw) as ck:
            ck.write("u", u, offset=(r * u.size,), global_shape=shape)

    write(path + ".warm")  # imports, MPI-IO's first buffers
    default = _hwm_growth(lambda: write(path))
    disabled = _hwm_growth(lambda: write(path + ".copy", hints={"nc_in_place_swap": "disable"}))
    print("PEAK", r, default, disabled, u.nbytes, flush=True)


CASES = {"restored": restored, "failure": failure, "peak": peak}


if __name__ == "__main__":
    from dispatch import run_case

    sys.exit(run_case(CASES, sys.argv[1:]))
