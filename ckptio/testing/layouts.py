"""The checkpoints the storage contract suite (:mod:`ckptio.testing.contract`) writes. Pure: no MPI, no files.

A :class:`Layout` is every rank's declarations, a function of the rank count and of the backend's capabilities,
so every rank knows every rank's blocks and the values a read must return: N-d blocks on several ranks (several
per rank, one a strided view of a halo'd array), a 3-D variable cut along its last axis, per-rank segments (an
empty one too), a 0-d variable, zero-size blocks, a variable with no elements, the optional dtypes the backend
supports, a big-endian one, compressed blocks where the backend compresses, every kind of attribute value the
backend accepts, and, with more than one rank, a rank with no block at all. Values are random bit patterns (NaN
payloads, negative zeros): a round trip must be bit-identical, not merely equal. :func:`prepare` turns a rank's
declarations into what the engine's declare phase makes of them.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ckptio.backends.base import Backend
from ckptio.errors import CapabilityError
from ckptio.model import codec as codecs
from ckptio.model import memsel, varmeta
from ckptio.model import meta as metamod
from ckptio.model.declared import declaration
from ckptio.model.plan import pack_declarations, plan_packed
from ckptio.model.variable_plan import VariablePlan


def values(name: str, shape: tuple[int, ...], dtype: str, smooth: bool = False) -> np.ndarray:
    """The global values of a variable: random bit patterns (``smooth``: a compressible ramp), the same on every
    rank and in every run."""
    dt = np.dtype(dtype)
    n = math.prod(shape)
    if smooth:
        return (np.arange(n) % 17).astype(dt).reshape(shape)
    raw = np.random.default_rng(zlib.crc32(name.encode())).integers(0, 256, n * dt.itemsize, dtype=np.uint8)
    return (raw % 2 if dt.kind == "b" else raw).view(dt).reshape(shape)


def split(n: int, parts: int, index: int) -> tuple[int, int]:
    """[start, end) of piece ``index`` of ``n`` in ``parts`` uneven pieces."""
    weights = [i % 3 + 1 for i in range(parts)]
    bounds = [sum(weights[:i]) * n // sum(weights) for i in range(parts + 1)]
    return bounds[index], bounds[index + 1]


@dataclass(frozen=True)
class Declared:
    """One block one rank declares, as ``Writer.write`` would: the array and where it goes (``offset`` and
    ``global_shape`` None: a per-rank segment)."""

    var: str
    data: np.ndarray
    offset: tuple[int, ...] | None = None
    global_shape: tuple[int, ...] | None = None


@dataclass
class Layout:
    """One checkpoint of the suite: every rank's declarations, the global values, attributes, descriptions."""

    nprocs: int
    expected: dict[str, np.ndarray] = field(default_factory=dict)  # every variable's global values
    blocks: list[list[Declared]] = field(default_factory=list)  # per rank
    attrs: dict[str, Any] = field(default_factory=dict)
    described: dict[str, dict[str, Any]] = field(default_factory=dict)
    compression: dict[str, tuple[str, int]] = field(default_factory=dict)  # variable -> (codec, level)

    def __post_init__(self) -> None:
        self.blocks = [[] for _ in range(self.nprocs)]

    def variable(self, name: str, shape: tuple[int, ...], dtype: str, smooth: bool = False) -> np.ndarray:
        self.expected[name] = values(name, shape, dtype, smooth)
        return self.expected[name]

    def block(self, rank: int, name: str, data: np.ndarray, offset: tuple[int, ...]) -> None:
        self.blocks[rank].append(Declared(name, data, offset, self.expected[name].shape))

    def segment(self, rank: int, name: str, rows: np.ndarray) -> None:
        self.blocks[rank].append(Declared(name, rows))


# The checkpoint's attributes: each kind of JSON value; the backend's check_attr decides about the unusual ones
ATTRS = {"step": 7, "time": 0.25, "name": "contract", "flags": [1, 2, 3], "on": True, "mixed": ["a", 1.5],
         "nothing": None}
UNUSUAL_ATTRS = {"nested": [[1, 2], ["a", None]], "nul": "a\x00b", "surrogate": "\udc80", "long": list(range(8200)),
                 "empty_list": [], "big": 2**62, "nan": float("nan")}


def storable_attrs(backend: Backend) -> dict[str, Any]:
    """:data:`ATTRS` and those of :data:`UNUSUAL_ATTRS` that ``check_attr`` accepts (a refusal must be a
    CapabilityError, checked by the contract's capability case), normalized as the Writer does."""
    out = dict(ATTRS)
    for key, value in UNUSUAL_ATTRS.items():
        try:
            backend.check_attr(key, value)
        except CapabilityError:
            continue
        out[key] = value
    return metamod.normalize_attrs(out)


def standard_layout(nprocs: int, backend: Backend) -> Layout:
    """The suite's main checkpoint (see the module docstring); with more than one rank, the last has no block."""
    caps = backend.capabilities
    writers = max(1, nprocs - 1)
    lay = Layout(nprocs, attrs=storable_attrs(backend))
    plane = lay.variable("plane", (64, 40), "<f8")
    lay.described["plane"] = varmeta.declare("plane", 2, ["y", "x"], {"units": "m"}, 0)
    cube = lay.variable("cube", (3, 4, 5 * writers + 1), "<i4")
    for w in range(writers):
        lo, hi = split(64, writers, w)
        mid = (lo + hi) // 2
        halo = np.zeros((mid - lo + 2, 42), plane.dtype)
        halo[1:-1, 1:-1] = plane[lo:mid]
        lay.block(w, "plane", halo[1:-1, 1:-1], (lo, 0))  # a strided view, written in place
        lay.block(w, "plane", plane[mid:hi].copy(), (mid, 0))
        lay.block(w, "plane", plane[lo:lo].copy(), (lo, 0))  # a zero-size block
        a, b = split(cube.shape[2], writers, w)
        lay.block(w, "cube", cube[:, :, a:b].copy(), (0, 0, a))
    lay.block(0, "scalar", lay.variable("scalar", (), "<f8").copy(), ())
    lay.block(0, "empty", lay.variable("empty", (0, 3), "<f4").copy(), (0, 0))
    optional = {"flags": ("|b1", caps.bool_dtype), "wave": ("<c8", caps.complex_dtypes), "half": ("<f2", caps.float16),
                "counts": ("<u2", caps.unsigned_dtypes), "big": (">i4", True)}
    for name, (dtype, supported) in optional.items():
        if supported:
            g = lay.variable(name, (3 * writers,), dtype)
            for w in range(writers):
                lay.block(w, name, g[3 * w:3 * w + 3].copy(), (3 * w,))
    if caps.segments:
        lengths = [(2, 0, 3, 1)[w % 4] for w in range(writers)]
        rows = lay.variable("particles", (sum(lengths), 2), "<f4")
        for w in range(writers):
            start = sum(lengths[:w])
            lay.segment(w, "particles", rows[start:start + lengths[w]].copy())
    if caps.compression:
        packed = lay.variable("packed", (50 * writers,), "<f8", smooth=True)
        lay.compression["packed"] = ("zstd", 1)
        for w in range(writers):
            lay.block(w, "packed", packed[50 * w:50 * w + 50].copy(), (50 * w,))
    return lay


def last_rank_layout(nprocs: int, backend: Backend) -> Layout:
    """Only the last rank has blocks (the planning rank none): every rank must still make the same steps."""
    lay = Layout(nprocs, attrs={"step": 1})
    lay.block(nprocs - 1, "line", lay.variable("line", (10,), "<i8").copy(), (0,))
    lay.block(nprocs - 1, "scalar", lay.variable("scalar", (), "<f8").copy(), ())
    return lay


def attrs_only_layout(nprocs: int, backend: Backend) -> Layout:
    """No variable at all, only attributes."""
    return Layout(nprocs, attrs={"step": 2, "note": "no variables"})


@dataclass
class Prepared:
    """One rank's blocks as the engine's declare phase leaves them: each declaration (with its checksum, and its
    stored size and codec when compressed) and what is handed to ``write`` (the elements, a strided view kept as
    a view, or the compressed bytes)."""

    decls: list[dict[str, Any]]
    stored: list[np.ndarray]


def prepare(layout: Layout, rank: int) -> Prepared:
    """Local: rank ``rank``'s declarations of ``layout``, prepared as :func:`ckptio.engine.write.prepare_blocks`."""
    out = Prepared([], [])
    for b in layout.blocks[rank]:
        data = memsel.gathered(b.data)
        decl = {**declaration(b.var, data, b.offset, b.global_shape, rank), "checksum": memsel.checksum(data)}
        if b.var in layout.compression:
            codec, level = layout.compression[b.var]
            data = np.frombuffer(codecs.compress(np.ascontiguousarray(data), codec, level), np.uint8)
            decl = {**decl, "stored_nbytes": int(data.nbytes), "codec": f"{codec}:{level}"}
        out.decls.append(decl)
        out.stored.append(data)
    return out


def whole_plan(layout: Layout) -> dict[str, VariablePlan]:
    """Pure, any rank: the write plan of every rank's blocks (what the planning rank plans)."""
    return plan_packed([pack_declarations(prepare(layout, r).decls) for r in range(layout.nprocs)])
