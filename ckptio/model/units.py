"""Byte sizes as users write them (``64M``, ``64MiB``, ``1G``, ``1048576``): one parser for every place ckptio
reads a size (``buffer_bytes=``, ``CKPTIO_BUFFER_BYTES``, ``ckptio plan --buffer``) and one for counts
(``CKPTIO_AGGREGATORS``). Pure, no MPI.

Units are binary (``K`` = 1024, ``M`` = 1024**2, ``G``, ``T``, ``P``), with or without ``B``/``iB``
(``64M`` = ``64MB`` = ``64MiB``), any case; a fraction is allowed with a unit when it makes whole bytes
(``1.5G``). Anything else, a negative or (unless allowed) a zero size, is a :class:`ckptio.DeclarationError`
whose message names ``what`` (the argument or variable the value came from).
"""

from __future__ import annotations

import argparse
import operator
import re
from collections.abc import Callable
from fractions import Fraction

from ckptio.errors import DeclarationError

_SCALE = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_SIZE = re.compile(r"\s*([+-]?)(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:I?B)?\s*", re.IGNORECASE)
EXAMPLES = "examples: 64M, 64MiB, 1G, 1048576"


def parse_size(value: object, what: str, *, allow_zero: bool = False) -> int:
    """``value`` (an integer, or a string such as ``"64M"``) as a number of bytes; DeclarationError naming
    ``what`` when it is not a size, is negative, or is zero and ``allow_zero`` is false."""
    if isinstance(value, bool):
        raise DeclarationError(f"{what}={value!r} is not a size ({EXAMPLES})")
    if isinstance(value, str):
        m = _SIZE.fullmatch(value)
        if m is None or (m.group(3) == "" and "." in m.group(2)):
            raise DeclarationError(f"{what}={value!r} is not a size ({EXAMPLES})")
        exact = Fraction(m.group(2)) * _SCALE[m.group(3).upper()]
        if exact.denominator != 1:
            raise DeclarationError(f"{what}={value!r} is not a whole number of bytes")
        nbytes = -int(exact) if m.group(1) == "-" else int(exact)
    else:
        try:
            nbytes = operator.index(value)  # int, numpy integers; not float
        except TypeError:
            raise DeclarationError(f"{what}={value!r} is not a size ({EXAMPLES})") from None
    if nbytes < 0 or (nbytes == 0 and not allow_zero):
        raise DeclarationError(f"{what}={value!r} must be {'zero or ' if allow_zero else ''}a positive size")
    return nbytes


def parse_count(value: object, what: str) -> int:
    """``value`` (an integer or a string of digits) as a positive count; DeclarationError naming ``what``."""
    problem = DeclarationError(f"{what}={value!r} must be a positive integer")
    if isinstance(value, str):
        if not re.fullmatch(r"\s*\d+\s*", value):
            raise problem
        count = int(value)
    elif isinstance(value, bool):
        raise problem
    else:
        try:
            count = operator.index(value)
        except TypeError:
            raise problem from None
    if count <= 0:
        raise problem
    return count


def _argparse_type(parse: Callable[[str, str], int], what: str) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            return parse(text, what)
        except DeclarationError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def argparse_size(what: str) -> Callable[[str], int]:
    """An argparse ``type=`` that parses a size with :func:`parse_size` (errors become usage errors)."""
    return _argparse_type(parse_size, what)


def argparse_count(what: str) -> Callable[[str], int]:
    """An argparse ``type=`` for a positive count, :func:`parse_count` (errors become usage errors)."""
    return _argparse_type(parse_count, what)


def format_bytes(n: float, digits: int = 2) -> str:
    """A byte count for people: ``512 B``, ``1.50 KiB`` ... ``TiB`` (binary units; ``digits`` after the point)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.{digits}f} {unit}"
        n /= 1024
    return f"{n:.{digits}f} TiB"
