"""Per-block compression for the native format: zstandard, optionally after a byte shuffle.

The byte shuffle groups the i-th byte of every element together (as HDF5's shuffle filter and Blosc do), which
makes the slowly varying exponent bytes of floating point data compress well. Codec names stored in the index:
``"zstd"`` and ``"zstd+shuffle"``; the level is recorded beside them.
"""

from __future__ import annotations

import numpy as np
import zstandard

from ckptio.errors import CorruptCheckpointError, DeclarationError

CODECS = ("zstd", "zstd+shuffle")


def parse_compression(spec: object) -> tuple[str, int] | None:
    """``None``/``False`` -> no compression; ``"zstd"``, ``"zstd+shuffle"``, optionally ``":LEVEL"``."""
    if spec in (None, False, "", "none"):
        return None
    if spec is True:
        return ("zstd+shuffle", 3)
    if not isinstance(spec, str):
        raise DeclarationError(f"compression={spec!r}: expected e.g. 'zstd', 'zstd+shuffle' or 'zstd:5'")
    name, _, level = spec.partition(":")
    if name not in CODECS:
        raise DeclarationError(f"compression={spec!r}: unknown codec {name!r} (known: {', '.join(CODECS)})")
    if level and not level.lstrip("-").isdigit():
        raise DeclarationError(f"compression={spec!r}: level must be an integer")
    return (name, int(level) if level else 3)


def compress(array: np.ndarray, codec: str, level: int) -> bytes:
    """Compress a C-contiguous array's bytes."""
    raw = array.reshape(-1).view(np.uint8)
    if codec == "zstd+shuffle" and array.dtype.itemsize > 1:
        raw = raw.reshape(-1, array.dtype.itemsize).T.copy().reshape(-1)
    return zstandard.ZstdCompressor(level=level).compress(raw.tobytes() if not raw.flags.c_contiguous else raw.data)


def decompress(data: bytes | memoryview, codec: str, dtype: np.dtype, count: int, where: str) -> np.ndarray:
    """Inverse of :func:`compress`; ``codec`` as recorded (``"zstd+shuffle:5"``); ``where`` names the block."""
    codec = codec.split(":")[0]
    nbytes = count * dtype.itemsize
    try:
        raw = zstandard.ZstdDecompressor().decompress(bytes(data), max_output_size=nbytes)
    except zstandard.ZstdError as exc:
        raise CorruptCheckpointError(f"{where}: compressed data cannot be decoded ({exc})") from None
    if len(raw) != nbytes:
        raise CorruptCheckpointError(f"{where}: decompressed to {len(raw)} bytes, expected {nbytes}")
    flat = np.frombuffer(raw, dtype=np.uint8)
    if codec == "zstd+shuffle" and dtype.itemsize > 1:
        flat = flat.reshape(dtype.itemsize, -1).T.copy().reshape(-1)
    return flat.view(dtype)
