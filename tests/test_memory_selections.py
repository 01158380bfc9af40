"""Memory selections on the write side: ``Writer.write`` takes strided views (the interior of a halo'd array) and
every backend writes them in place (ckptio.model.memsel; MPI hindexed memory types, HDF5 memory dataspaces, PnetCDF's
flexible API), with the same checksums and the same file contents as a contiguous copy would give."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import BACKENDS, PROGRAMS, run_mpi, run_program

from ckptio.model import memsel
from ckptio.model.meta import checksum

pytestmark = pytest.mark.timeout(600)
PROGRAM = str(PROGRAMS / "memory_selections.py")  # the MPI programs of these tests


# ----------------------------------------------------------------------------------------------- local, pure
def _views():
    base3 = np.arange(8 * 9 * 10, dtype=np.float64).reshape(8, 9, 10)
    base2 = np.arange(12 * 7, dtype=np.int32).reshape(12, 7)
    return {
        "interior3d": base3[2:-2, 2:-2, 2:-2],
        "rows": base2[3:9],  # contiguous already
        "columns": base2[:, 1:5],
        "one_row": base2[4:5, 1:6],
        "every_other_plane": base3[::2, 1:-1, 3:7],
        "fortran_order": np.asfortranarray(base2),
        "element_stride": base2[:, ::2],
        "reversed": base3[::-1, :, 2:5],
        "empty": base3[2:2, 1:3],
        "scalar": np.array(3.5),
        "big_endian": np.arange(40, dtype=">i8").reshape(5, 8)[1:4, 2:7],
    }


@pytest.mark.parametrize("name", list(_views()))
def test_checksum_is_that_of_the_contiguous_copy(name, monkeypatch):
    view = _views()[name]
    expected = checksum(np.ascontiguousarray(view)) if view.size else checksum(b"")
    assert memsel.checksum(view) == expected
    monkeypatch.setattr(memsel, "SCRATCH_BYTES", 24)  # pieces smaller than a row: the recursive path
    assert memsel.checksum(view) == expected


@pytest.mark.parametrize("name", list(_views()))
def test_runs_describe_the_elements_in_c_order(name):
    view = memsel.gathered(_views()[name])
    offsets, run = memsel.runs(view)
    raw = memsel.span(view).view(np.uint8) if view.size else np.empty(0, np.uint8)
    got = b"".join(raw[o:o + run].tobytes() for o in offsets.tolist())
    assert got == np.ascontiguousarray(view).tobytes()


@pytest.mark.parametrize("name", list(_views()))
def test_the_address_of_a_view_is_its_first_elements_through_mpi4py_or_numpy(name):
    """coord.datatypes.address takes mpi4py's buffer protocol once MPI is loaded (contiguous arrays), numpy's
    interface for the views it refuses (strided): the same address either way, for every kind of view (the
    exchange's datatypes and the range writers' joins are built from it)."""
    from ckptio.coord import datatypes

    view = _views()[name]
    expected = int(view.__array_interface__["data"][0])
    saved = datatypes._mpi_buffer
    from ckptio.coord.mpi import MPI  # (loaded: the fast path)

    answered = []

    def counting(arr):
        made = MPI.buffer(arr)  # raises for what it refuses, as address() expects
        answered.append(arr)
        return made

    try:
        datatypes._mpi_buffer = None
        assert datatypes.address(view) == expected and datatypes._mpi_buffer is MPI.buffer
        datatypes._mpi_buffer = counting
        assert datatypes.address(view) == expected
    finally:
        datatypes._mpi_buffer = saved
    contiguous = view.flags.c_contiguous or view.flags.f_contiguous
    assert len(answered) == (1 if contiguous else 0), "the buffer protocol answers exactly the contiguous views"


def test_passable_views_and_the_ones_gathered():
    v = _views()
    assert all(memsel.passable(v[k]) for k in ("interior3d", "rows", "columns", "one_row", "every_other_plane",
                                                "empty", "scalar", "big_endian"))
    for k in ("fortran_order", "element_stride", "reversed"):
        assert not memsel.passable(v[k])
        copy = memsel.gathered(v[k])
        assert copy.flags.c_contiguous and (copy == v[k]).all()
    assert memsel.gathered(v["interior3d"]) is v["interior3d"]


def test_hdf5_selection_selects_the_view():
    view = _views()["interior3d"]
    buf, dims, count = memsel.hdf5_selection(view)
    assert count == view.shape and dims[1:] == (9, 10)
    index = np.zeros(dims, bool)
    index[tuple(slice(0, c) for c in count)] = True  # the hyperslab at 0
    flat = np.flatnonzero(index.reshape(-1))
    assert (buf[flat] == view.reshape(-1)).all()
    assert memsel.hdf5_selection(_views()["rows"]) is None  # contiguous: no selection needed


# ------------------------------------------------------------------------------------------ under mpirun

@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 4])
@pytest.mark.parametrize("backend", BACKENDS)
def test_halo_interiors_written_in_place(backend, nprocs, tmp_path):
    proc = run_mpi(nprocs, [PROGRAM, "halo", backend, str(tmp_path / "chk"), "sync"])
    assert proc.stdout.count("OK") == nprocs, proc.stdout + proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["async", "zstd", "staged"])
def test_halo_interiors_async_compressed_staged(mode, tmp_path):
    proc = run_mpi(2, [PROGRAM, "halo", "mpiio", str(tmp_path / "chk"), mode])
    assert proc.stdout.count("OK") == 2, proc.stdout + proc.stderr


# The native format's own write aggregators (issue 29 item 1, CKPTIO_WRITE_IO=posix, the default, or mpiio) write an
# aggregator's own pieces straight from the caller's arrays (a strided interior as its rows); MPI-IO's own
# collective write (write_all) does not copy either. (Before the fix: a round buffer the size of the interior,
# peak 9.48 MB for 8 MiB.)
WRITE_IO_CASES = [(be, io) for be in BACKENDS
                  for io in (("posix", "mpiio", "write_all") if be == "mpiio" else ("posix",))]


@pytest.mark.mpi
@pytest.mark.parametrize(("backend", "write_io"), WRITE_IO_CASES)
def test_no_copy_of_the_interior(backend, write_io, tmp_path):
    """Python-side allocations while an 8 MiB interior is written stay far below its size (a gathered copy, or
    a full-size checksum buffer, would show up here: numpy reports its allocations to tracemalloc)."""
    proc = run_mpi(1, [PROGRAM, "no_copy", backend, str(tmp_path / "chk")], env={"CKPTIO_WRITE_IO": write_io})
    peak, size = (int(x) for x in proc.stdout.split("PEAK", 1)[1].split()[:2])
    assert peak < size // 4, f"{peak:,} bytes allocated while writing an interior of {size:,} bytes"


@pytest.mark.mpi
@pytest.mark.parametrize("write_io", ["posix", "mpiio"])
def test_senders_and_aggregator_memory_bounded(write_io, tmp_path):
    """Two ranks, one write aggregator, a 1 MiB round buffer: the rank that sends its 8 MiB interior allocates far
    less than it (its rows go out in place, through datatypes); the aggregator writes its own interior from the
    caller's memory (short rows: through a staging buffer of at most the round size) and receives the other one
    through two round buffers of at most 1 MiB: three buffers of the round size, not one the size of the data."""
    env = {"CKPTIO_WRITE_IO": write_io, "CKPTIO_WRITE_AGGREGATORS": "1", "CKPTIO_WRITE_BUFFER_BYTES": "1M"}
    proc = run_mpi(2, [PROGRAM, "no_copy_ranks", "mpiio", str(tmp_path / "chk")], env=env)
    peaks = {}
    for line in proc.stdout.splitlines():
        if line.startswith("PEAK "):
            rank, peak, size = (int(x) for x in line.split()[1:4])
            peaks[rank] = peak
    assert sorted(peaks) == [0, 1], proc.stdout + proc.stderr
    assert peaks[1] < size // 4, f"sender: {peaks[1]:,} bytes allocated while sending {size:,} bytes"
    assert peaks[0] < 3 * (1 << 20) + size // 4, f"aggregator: {peaks[0]:,} bytes allocated for 2 x {size:,}"


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
def test_halo_interiors_under_mpich(backend, tmp_path):
    """ROMIO in MPICH 4.0 cannot flatten mpi4py's large-count types (mpich#6121): the memory types are built with
    the classic constructor too. Runs the MPICH stack's venv (``make install MPI=mpich``) on this checkout."""
    from test_mpi_stacks import require_stack, stack_backends, stack_launcher

    venv = require_stack("mpich")
    if backend not in stack_backends(venv):
        pytest.skip(f"{backend} not available in {venv}")
    env = {"CKPTIO_MPIEXEC": stack_launcher(venv), "PATH": f"{venv / 'bin'}:/usr/bin:/bin"}
    proc = run_program(2, [str(venv / "bin" / "python"), PROGRAM, "halo", backend, str(tmp_path / "chk"), "sync"],
                       env=env, timeout=400, check=False)
    assert proc.stdout.count("OK") == 2, proc.stdout + proc.stderr
