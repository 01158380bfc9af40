"""``ckptio dump PATH VAR [--slice "3:5,:,0"]``: print one variable (or a numpy-style slice of it) like numpy does,
after a header with its dtype, shape, dimension names and attributes (``units``, ...; ``--json``: ``dims``, ``attrs``).

Only the bounding box of the slice is read (one process, COMM_SELF); steps and integer indices are applied to
it afterwards. Exit: 0 printed, 1 damaged checkpoint, 2 missing file / not a checkpoint / unknown variable /
bad slice.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from ckptio.errors import CheckpointError, CorruptCheckpointError, IncompleteCheckpointError
from ckptio.tools.commands.common import (
    EXIT_DIFFERENT,
    EXIT_OK,
    UsageError,
    error_exit,
    guarded,
    jsonable,
    open_serial,
    read_box,
    variable_or_error,
)

NAME = "dump"


def parse_slice(text: str | None, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...],
                                                                   tuple[slice | int, ...]]:
    """Pure: a numpy-style slice text (``"3:5,:,0"``, ``"-1"``, ``"::2"``, ``"..."`` not supported) for an array of
    ``shape`` -> (offset, shape) of the box to read and, per axis, the positions to take from that box (an int
    drops the axis; see :func:`apply_local`). UsageError if invalid."""
    if text is None or not text.strip():
        return (0,) * len(shape), tuple(shape), ()
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > len(shape):
        raise UsageError(f"slice {text!r} has {len(parts)} indices but the variable has {len(shape)} dimension(s) "
                         f"{tuple(shape)}")
    parts += [":"] * (len(shape) - len(parts))
    offset, box, local = [], [], []
    for axis, (part, n) in enumerate(zip(parts, shape, strict=True)):
        try:
            if ":" in part:
                fields = part.split(":")
                if len(fields) > 3:
                    raise ValueError
                start, stop, step = (int(f) if f.strip() else None for f in [*fields, "", ""][:3])
                if step == 0:
                    raise UsageError(f"slice {text!r}: step 0 on axis {axis}")
                lo, hi, st = slice(start, stop, step).indices(n)
                picked = range(lo, hi, st)
                if len(picked) == 0:
                    offset.append(0)
                    box.append(0)
                    local.append(np.zeros(0, np.intp))
                    continue
                first, last = min(picked[0], picked[-1]), max(picked[0], picked[-1])
                offset.append(first)
                box.append(last - first + 1)
                local.append(np.asarray(picked, dtype=np.intp) - first)
            else:
                i = int(part)
                if not -n <= i < n:
                    raise UsageError(f"slice {text!r}: index {i} is out of range for axis {axis} of size {n}")
                i %= n
                offset.append(i)
                box.append(1)
                local.append(0)
        except ValueError:
            raise UsageError(f"slice {text!r}: {part!r} on axis {axis} is not an index or start:stop:step") from None
    return tuple(offset), tuple(box), tuple(local)


def apply_local(box: np.ndarray, local: tuple[np.ndarray | int, ...]) -> np.ndarray:
    """Pure: take the positions ``local`` (from :func:`parse_slice`) of each axis of ``box``, last axis first so
    the axis numbers stay valid while integer indices drop axes."""
    out = box
    for axis in reversed(range(len(local))):
        out = np.take(out, local[axis], axis=axis)
    return out


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(NAME, help="print one variable or a slice of it", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path")
    p.add_argument("variable")
    p.add_argument("--slice", dest="slice_text", metavar="SLICE", help='numpy-style, e.g. "3:5,:,0"')
    p.add_argument("--json", action="store_true", help="print one JSON document with the values as lists")
    p.add_argument("--full", action="store_true", help="print every element (numpy elides large arrays)")
    p.set_defaults(func=run)


@guarded(NAME)
def run(args: argparse.Namespace) -> int:
    try:
        with open_serial(args.path) as reader:
            info = variable_or_error(reader, args.variable)
            offset, shape, local = parse_slice(args.slice_text, info.shape)
            data = apply_local(read_box(reader, args.variable, offset, shape), local)
    except UsageError as exc:
        return error_exit(NAME, exc)
    except (CorruptCheckpointError, IncompleteCheckpointError) as exc:
        print(f"ckptio {NAME}: {exc}", file=sys.stderr)
        return EXIT_DIFFERENT
    except (CheckpointError, OSError) as exc:
        return error_exit(NAME, exc)
    dims, attrs = list(info.dims), dict(info.attrs)
    if args.json:
        json.dump({"path": args.path, "variable": args.variable, "dtype": str(info.dtype),
                   "shape": list(info.shape), "dims": dims, "attrs": attrs, "slice": args.slice_text,
                   "data": jsonable(np.asarray(data))}, sys.stdout)
        print()
        return EXIT_OK
    where = f"[{args.slice_text}]" if args.slice_text else ""
    print(f"{args.variable}{where}  dtype {info.dtype}  shape {np.shape(data)} (of {info.shape})"
          + (f"  dims ({', '.join(dims)})" if dims else ""))
    if attrs:
        print("attributes  " + ", ".join(f"{k}={v!r}" for k, v in attrs.items()))
    opts = {"threshold": sys.maxsize} if args.full else {}
    print(np.array2string(np.asarray(data), separator=", ", **opts))
    return EXIT_OK
