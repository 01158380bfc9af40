"""The backend conformance suite, shipped with the package so a new backend can run it too.

Run under MPI, one process per rank::

    mpirun -n 4 python -m ckptio.testing --backend hdf5 --outdir DIR            # all single-job cases
    mpirun -n 3 python -m ckptio.testing --backend hdf5 --outdir DIR --write-nm  # N-to-M: write ...
    mpirun -n 5 python -m ckptio.testing --backend hdf5 --outdir DIR --read-nm   # ... then read elsewhere

Every case is collective; its outcome is agreed over all ranks (a failure on one rank fails the case on all
and never leaves a rank waiting). Rank 0 prints one line per case: ``CASE <name> PASS`` or
``CASE <name> FAIL <reason>``, and ``SUMMARY <passed> passed, <failed> failed``.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable

import numpy as np

import ckptio
from ckptio import coord
from ckptio.backends import get_backend

CASES: list[tuple[str, Callable]] = []


def case(fn: Callable) -> Callable:
    CASES.append((fn.__name__, fn))
    return fn


def expected(shape: tuple[int, ...], dtype, seed: int = 1) -> np.ndarray:
    """Deterministic content of a global array: distinct values that survive every supported dtype."""
    n = int(np.prod(shape, dtype=np.int64))
    base = (np.arange(n, dtype=np.int64) * 7 + seed) % 251
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return (base % 2 == 0).reshape(shape)
    if dt.kind == "c":
        return (base + 1j * (base % 13)).astype(dt).reshape(shape)
    if dt.kind == "u" or dt.itemsize == 1:
        return (base % 120).astype(dt).reshape(shape)
    return (base - 100).astype(dt).reshape(shape)


def split(n: int, parts: int, index: int, shift: int = 0) -> tuple[int, int]:
    """[start, count) of piece ``index`` of ``n`` in ``parts`` uneven pieces (``shift`` changes the cut)."""
    weights = [(i + shift) % 3 + 1 for i in range(parts)]
    total = sum(weights)
    bounds = [0]
    for w in weights:
        bounds.append(bounds[-1] + w)
    bounds = [b * n // total for b in bounds]
    return bounds[index], bounds[index + 1] - bounds[index]


class Ctx:
    def __init__(self, comm, backend: str, outdir: str):
        self.comm, self.backend, self.outdir = comm, backend, outdir
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.caps = get_backend(backend).capabilities

    def path(self, name: str) -> str:
        return os.path.join(self.outdir, f"{name}_{self.backend}_{self.size}")

    def dtypes(self) -> list[str]:
        out = ["<f8", "<f4", "<i4", "<i8", "|i1", "<i2"]
        if self.caps.unsigned_dtypes:
            out += ["|u1", "<u2", "<u4", "<u8"]
        if self.caps.float16:
            out.append("<f2")
        if self.caps.complex_dtypes:
            out += ["<c8", "<c16"]
        if self.caps.bool_dtype:
            out.append("|b1")
        return out


def expect_error(ctx: Ctx, exc_type: type, words: list[str], fn: Callable) -> None:
    """``fn`` must raise ``exc_type`` (on every rank) with all ``words`` in its message."""
    try:
        fn()
    except exc_type as exc:
        for w in words:
            assert w in str(exc), f"expected {w!r} in error message: {exc}"
        return
    except Exception as exc:
        raise AssertionError(f"expected {exc_type.__name__}, got {type(exc).__name__}: {exc}") from exc
    raise AssertionError(f"expected {exc_type.__name__}, nothing was raised")


# ------------------------------------------------------------------------------------------------- cases
@case
def roundtrip_every_dtype(ctx: Ctx) -> None:
    shape = (23, 5)
    start, count = split(shape[0], ctx.size, ctx.rank)
    path = ctx.path("dtypes")
    with ckptio.create(path, ctx.comm, backend=ctx.backend) as ck:
        for dt in ctx.dtypes():
            name = "v_" + np.dtype(dt).name
            ck.write(name, expected(shape, dt)[start:start + count], offset=(start, 0), global_shape=shape)
    with ckptio.open(path, ctx.comm) as ck:
        for dt in ctx.dtypes():
            name = "v_" + np.dtype(dt).name
            assert ck.variables[name].shape == shape
            assert ck.variables[name].dtype == np.dtype(dt).newbyteorder("=")
            got = ck.read(name)
            np.testing.assert_array_equal(got, expected(shape, dt), err_msg=name)


@case
def fortran_order_blocks(ctx: Ctx) -> None:
    shape = (6, 7 * ctx.size + 1, 3)
    start, count = split(shape[1], ctx.size, ctx.rank)
    local = np.asfortranarray(expected(shape, "<f8")[:, start:start + count, :])
    path = ctx.path("forder")
    with ckptio.create(path, ctx.comm, backend=ctx.backend) as ck:
        ck.write("f", local, offset=(0, start, 0), global_shape=shape)
    with ckptio.open(path, ctx.comm) as ck:
        np.testing.assert_array_equal(ck.read("f", offset=(1, 0, 1), shape=(4, shape[1], 2)),
                                      expected(shape, "<f8")[1:5, :, 1:3])


@case
def zero_sized_blocks_and_idle_ranks(ctx: Ctx) -> None:
    shape = (10, 4)
    path = ctx.path("zeros")
    g = expected(shape, "<i8")
    with ckptio.create(path, ctx.comm, backend=ctx.backend) as ck:
        if ctx.rank == ctx.size - 1:  # the last rank writes everything, rank 0 (if different) nothing
            ck.write("a", g, offset=(0, 0), global_shape=shape)
        ck.write("a", np.zeros((0, 4), np.int64), offset=(ctx.rank % 10, 0), global_shape=shape)
        ck.write("empty", np.zeros((0, 3)), offset=(0, 0), global_shape=(0, 3))
    with ckptio.open(path, ctx.comm) as ck:
        np.testing.assert_array_equal(ck.read("a"), g)
        assert ck.read("empty").shape == (0, 3)
        if ctx.rank % 2:
            got = ck.read("a", offset=(3, 1), shape=(0, 2))
            assert got.shape == (0, 2)
        else:
            got = ck.read("a", offset=(3, 1), shape=(2, 2))
            np.testing.assert_array_equal(got, g[3:5, 1:3])


@case
def several_blocks_per_rank_2d_decomposition(ctx: Ctx) -> None:
    shape = (9, 11)
    g = expected(shape, "<f4")
    path = ctx.path("multi")
    with ckptio.create(path, ctx.comm, backend=ctx.backend) as ck:
        # a 3x3 tiling; tile t goes to rank t % size, so ranks own 0..several tiles
        for t in range(9):
            if t % ctx.size == ctx.rank:
                r0, rn = split(shape[0], 3, t // 3)
                c0, cn = split(shape[1], 3, t % 3, shift=1)
                ck.write("tile", np.ascontiguousarray(g[r0:r0 + rn, c0:c0 + cn]), offset=(r0, c0), global_shape=shape)
    with ckptio.open(path, ctx.comm) as ck:
        s, n = split(shape[1], ctx.size, ctx.rank, shift=2)
        np.testing.assert_array_equal(ck.read("tile", offset=(0, s), shape=(shape[0], n)), g[:, s:s + n])
        # overlapping requests between ranks
        np.testing.assert_array_equal(ck.read("tile", offset=(2, 2), shape=(5, 5)), g[2:7, 2:7])


@case
def per_rank_segments(ctx: Ctx) -> None:
    if not ctx.caps.segments:
        return
    path = ctx.path("segments")
    n = (ctx.rank * 5) % 7  # some ranks have empty segments
    mine = np.arange(n, dtype=np.float64) + 1000 * ctx.rank
    ids = np.full(n, ctx.rank, dtype=np.int64)
    rows = (np.arange(n * 6, dtype=np.int32).reshape(n, 3, 2) + 100 * ctx.rank)  # N-d segment: rows of (3, 2)
    with ckptio.create(path, ctx.comm, backend=ctx.backend) as ck:
        ck.write("particles", mine)
        ck.write("owner", ids)
        ck.write("tracers", rows)
    lengths = [(r * 5) % 7 for r in range(ctx.size)]
    with ckptio.open(path, ctx.comm) as ck:
        assert ck.variables["particles"].shape == (sum(lengths),)
        np.testing.assert_array_equal(ck.read("particles"), mine)
        whole = ck.read("owner", offset=(0,), shape=(sum(lengths),))
        np.testing.assert_array_equal(whole, np.repeat(np.arange(ctx.size), lengths))
        assert ck.variables["tracers"].shape == (sum(lengths), 3, 2)
        np.testing.assert_array_equal(ck.read("tracers"), rows)
        every = np.concatenate([np.arange(k * 6, dtype=np.int32).reshape(k, 3, 2) + 100 * r
                                for r, k in enumerate(lengths)])
        np.testing.assert_array_equal(ck.read("tracers", offset=(0, 1, 1), shape=(sum(lengths), 2, 1)),
                                      every[:, 1:, 1:])


@case
def attributes_round_trip(ctx: Ctx) -> None:
    path = ctx.path("attrs")
    attrs = {"step": 100, "time": 1.25, "name": "sedov", "flags": [1, 2, 3], "ok": True,
             "np_int": np.int32(7), "np_float": np.float64(0.5), "nothing": None, "mixed": ["a", 1.5]}
    with ckptio.create(path, ctx.comm, backend=ctx.backend, attrs=attrs) as ck:
        ck.set_attr("later", "set after create")
        ck.write("x", np.full(2, ctx.rank, np.int32), offset=(2 * ctx.rank,), global_shape=(2 * ctx.size,))
    with ckptio.open(path, ctx.comm) as ck:
        want = {**attrs, "np_int": 7, "np_float": 0.5, "later": "set after create"}
        assert ck.attrs == want, ck.attrs


@case
def hints_requested_and_recorded(ctx: Ctx) -> None:
    path = ctx.path("hints")
    with ckptio.create(path, ctx.comm, backend=ctx.backend, hints={"cb_buffer_size": 1 << 20}) as ck:
        ck.write("x", np.zeros(3), offset=(3 * ctx.rank,), global_shape=(3 * ctx.size,))
    with ckptio.open(path, ctx.comm) as ck:
        hints = ck.meta.hints
        requested = hints.requested
        assert requested["striping_factor"] == str(min(ctx.size, 80)), requested
        assert requested["cb_buffer_size"] == str(1 << 20)
        assert requested["romio_cb_write"] == "enable"
        assert isinstance(hints.effective, dict)


@case
def corrupt_block_detected_on_every_rank(ctx: Ctx) -> None:
    path = ctx.path("corrupt")
    shape = (8 * ctx.size, 64)
    start, count = split(shape[0], ctx.size, ctx.rank)
    with ckptio.create(path, ctx.comm, backend=ctx.backend) as ck:
        ck.write("dens", expected(shape, "<f8")[start:start + count], offset=(start, 0), global_shape=shape)

    def flip_a_byte() -> None:
        if ctx.rank == 0:
            from ckptio.backends import detect_backend

            backend = detect_backend(path)
            meta = backend.read_document(path)
            extent = backend.extents(meta)[-1]
            with open(path, "r+b") as f:
                f.seek(extent.file_offset + extent.nbytes // 2)
                byte = f.read(1)
                f.seek(-1, 1)
                f.write(bytes([byte[0] ^ 0x40]))

    coord.run(ctx.comm, "rank 0 flips a byte of the last extent", flip_a_byte)
    with ckptio.open(path, ctx.comm) as ck:
        expect_error(ctx, ckptio.CorruptCheckpointError, ["dens", "checksum"], lambda: ck.read("dens"))
    from ckptio.tools.cli import inspect_report

    if ctx.rank == 0:
        code, report = inspect_report(path, verify=True)
        assert code == 1 and report["problems"] and report["problems"][0]["variable"] == "dens", report


@case
def incomplete_checkpoint_refused_and_skipped(ctx: Ctx) -> None:
    sub = os.path.join(ctx.outdir, f"series_{ctx.backend}_{ctx.size}")
    coord.run(ctx.comm, "rank 0 makes the series directory",
              lambda: os.makedirs(sub, exist_ok=True) if ctx.rank == 0 else None)
    for step in (10, 20):
        with ckptio.create(os.path.join(sub, f"chk_{step:06d}"), ctx.comm, backend=ctx.backend,
                           attrs={"step": step}) as ck:
            ck.write("x", np.full(4, step, np.int64), offset=(4 * ctx.rank,), global_shape=(4 * ctx.size,))
    newest = os.path.join(sub, "chk_000020")
    # every rank has looked before rank 0 truncates (the agreement's allreduce orders them)
    assert coord.run(ctx.comm, "every rank finds the newest", lambda: ckptio.latest(sub)) == newest

    def truncate() -> None:
        if ctx.rank == 0:
            size = os.path.getsize(newest)
            with open(newest, "r+b") as f:
                f.truncate(size - 40)

    coord.run(ctx.comm, "rank 0 truncates the newest", truncate)
    expect_error(ctx, ckptio.CheckpointError, [], lambda: ckptio.open(newest, ctx.comm))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert ckptio.latest(sub, comm=ctx.comm) == os.path.join(sub, "chk_000010")


@case
def bad_declarations_raise_on_every_rank(ctx: Ctx) -> None:
    path = ctx.path("bad")
    n = ctx.size

    def overlap():
        with ckptio.create(path, ctx.comm, backend=ctx.backend) as ck:
            ck.write("ov", np.zeros(3), offset=(2 * ctx.rank,), global_shape=(2 * n + 1,))

    def mismatch():
        with ckptio.create(path, ctx.comm, backend=ctx.backend) as ck:
            dt = np.float32 if ctx.rank == n - 1 and n > 1 else np.float64
            ck.write("mm", np.zeros(2, dt), offset=(2 * ctx.rank,), global_shape=(2 * n + (1 if n == 1 else 0),))

    def uncovered():
        with ckptio.create(path, ctx.comm, backend=ctx.backend) as ck:
            ck.write("hole", np.zeros(1), offset=(2 * ctx.rank,), global_shape=(2 * n,))

    def outside():
        with ckptio.create(path, ctx.comm, backend=ctx.backend) as ck:
            ck.write("out", np.zeros(2), offset=(2 * ctx.rank + 1,), global_shape=(2 * n,))

    if n > 1:
        expect_error(ctx, ckptio.DeclarationError, ["'ov'", "overlaps", "rank"], overlap)
    expect_error(ctx, ckptio.DeclarationError, ["'mm'"], mismatch)
    expect_error(ctx, ckptio.DeclarationError, ["'hole'", "written by no rank"], uncovered)
    expect_error(ctx, ckptio.DeclarationError, ["'out'", "outside", f"rank {n - 1}"], outside)
    assert not os.path.exists(path), "a failed checkpoint must not appear at its final name"
    leftovers = [f for f in os.listdir(ctx.outdir) if "ckptio-tmp" in f]
    assert not leftovers, leftovers


@case
def bad_read_requests_raise_on_every_rank(ctx: Ctx) -> None:
    path = ctx.path("reads")
    with ckptio.create(path, ctx.comm, backend=ctx.backend) as ck:
        ck.write("x", np.zeros((2, 2)), offset=(2 * ctx.rank, 0), global_shape=(2 * ctx.size, 2))
    with ckptio.open(path, ctx.comm) as ck:
        expect_error(ctx, ckptio.ReadRequestError, ["'nope'"], lambda: ck.read("nope"))
        bad = (0, 3) if ctx.rank == 0 else (0, 0)
        expect_error(ctx, ckptio.ReadRequestError, ["'x'", "outside", "rank 0"],
                     lambda: ck.read("x", offset=bad, shape=(1, 1)))
        np.testing.assert_array_equal(ck.read("x"), np.zeros((2 * ctx.size, 2)))  # still usable


# ---------------------------------------------------------------------------------------- N-to-M cases
NM_SHAPES = {"line": (37,), "plane": (13, 10), "cube": (7, 6, 5)}


def write_nm(ctx: Ctx) -> None:
    """Write 1-D, 2-D and 3-D variables decomposed along different axes by ``ctx.size`` writers."""
    path = os.path.join(ctx.outdir, f"nm_{ctx.backend}_w{ctx.size}")
    with ckptio.create(path, ctx.comm, backend=ctx.backend, attrs={"writers": ctx.size}) as ck:
        for axis_name, shape in NM_SHAPES.items():
            axis = len(shape) - 1  # writers split the last axis
            s, c = split(shape[axis], ctx.size, ctx.rank)
            index = [slice(None)] * len(shape)
            index[axis] = slice(s, s + c)
            offset = [0] * len(shape)
            offset[axis] = s
            ck.write(axis_name, np.ascontiguousarray(expected(shape, "<f8")[tuple(index)]), offset=tuple(offset),
                     global_shape=shape)
        if ctx.caps.segments:
            ck.write("seg", np.arange(ctx.rank + 1, dtype=np.int32) + 10 * ctx.rank)
            ck.write("seg_rows", _segment_rows(ctx.rank))


def _segment_rows(writer: int) -> np.ndarray:
    """Writer ``writer``'s N-d segment for the N-to-M cases: ``writer % 3`` rows of shape (2, 3)."""
    n = writer % 3
    return np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3) - 100 * writer


def read_nm(ctx: Ctx, writers: int) -> None:
    """Read with ``ctx.size`` readers splitting the FIRST axis unevenly (a different decomposition)."""
    path = os.path.join(ctx.outdir, f"nm_{ctx.backend}_w{writers}")
    with ckptio.open(path, ctx.comm) as ck:
        assert ck.attrs["writers"] == writers
        for name, shape in NM_SHAPES.items():
            s, c = split(shape[0], ctx.size, ctx.rank, shift=1)
            got = ck.read(name, offset=(s, *[0] * (len(shape) - 1)), shape=(c, *shape[1:]))
            np.testing.assert_array_equal(got, expected(shape, "<f8")[s:s + c], err_msg=name)
        if ctx.caps.segments:
            got = ck.read("seg")
            first, last = ctx.rank * writers // ctx.size, (ctx.rank + 1) * writers // ctx.size
            want = np.concatenate([np.arange(w + 1, dtype=np.int32) + 10 * w for w in range(first, last)]
                                  or [np.zeros(0, np.int32)])
            np.testing.assert_array_equal(got, want)
            want = np.concatenate([_segment_rows(w) for w in range(first, last)] or [np.zeros((0, 2, 3), np.float32)])
            np.testing.assert_array_equal(ck.read("seg_rows"), want)


def _waiting_create(mode: str, stage_dir: str | None) -> Callable:
    """``ckptio.create`` in async or staged mode whose close() also waits, so cases can read right after."""
    real = ckptio.api.create

    def create(path, comm, **kw):
        writer = real(path, comm, mode="async" if mode == "async" else "sync", stage_dir=stage_dir, **kw)
        background_close = writer.close

        def close() -> None:
            background_close()
            writer.wait()

        writer.close = close
        return writer

    return create


def run_cases(ctx: Ctx, selected: list[tuple[str, Callable]]) -> int:
    failed = 0
    for name, fn in selected:
        try:
            fn(ctx)
            outcome = None
        except Exception as exc:
            outcome = f"{type(exc).__name__}: {exc}".replace("\n", " | ")
            if os.environ.get("CKPTIO_TEST_TRACEBACK"):
                traceback.print_exc()
        # rank 0 learns every rank's outcome; every rank learns the first failure (or None)
        bad = coord.gather_and_plan(ctx.comm, f"case {name}: outcomes", lambda o=outcome: o,
                                    lambda outcomes: next(((r, o) for r, o in enumerate(outcomes) if o is not None),
                                                          None))
        ok = bad is None
        if ctx.rank == 0:
            if ok:
                print(f"CASE {name} PASS", flush=True)
            else:
                print(f"CASE {name} FAIL rank {bad[0]}: {bad[1]}", flush=True)
        failed += 0 if ok else 1
    if ctx.rank == 0:
        print(f"SUMMARY {len(selected) - failed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    from ckptio.coord.mpi import MPI

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--outdir", required=True)
    parser.add_argument("--case", action="append", help="run only these cases")
    parser.add_argument("--write-nm", action="store_true")
    parser.add_argument("--read-nm", type=int, metavar="WRITERS")
    parser.add_argument("--mode", choices=("sync", "async", "staged"), default="sync",
                        help="write every checkpoint of the cases in this mode (waiting for it at close)")
    args = parser.parse_args(argv)
    if args.mode != "sync":
        stage = os.path.join(args.outdir, "stage") if args.mode == "staged" else None
        coord.run(MPI.COMM_WORLD, "rank 0 makes the stage directory",
                  lambda: os.makedirs(stage, exist_ok=True) if stage and MPI.COMM_WORLD.Get_rank() == 0 else None)
        ckptio.create = _waiting_create(args.mode, stage)
    ctx = Ctx(MPI.COMM_WORLD, args.backend, args.outdir)
    if args.write_nm:
        return run_cases(ctx, [("write_nm", write_nm)])
    if args.read_nm:
        return run_cases(ctx, [(f"read_nm_from_{args.read_nm}", lambda c: read_nm(c, args.read_nm))])
    selected = [(n, f) for n, f in CASES if not args.case or n in args.case]
    return run_cases(ctx, selected)


if __name__ == "__main__":
    sys.exit(main())
