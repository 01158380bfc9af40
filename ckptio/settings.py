"""The one table of ckptio's ``CKPTIO_*`` environment variables: read and checked here, nowhere else.

Each setting has a default, a check and a scope. A *collective* setting changes what a collective operation
does (which MPI calls the restart makes, how the file is split between aggregators, the hints every rank passes
to ``MPI_File_open``): the collective entry points compare :func:`collective_snapshot` between ranks in their
first agreed phase, so a job whose ranks see different values fails on every rank with an error naming the
variable and the ranks, instead of hanging (issue 23: ``CKPTIO_READ_IO=posix`` on one rank and ``mpiio`` on
another hung the restart). A bad value is a :class:`~ckptio.DeclarationError` naming the variable, raised by
whatever reads it (inside an agreed phase for the collective ones). Local, no MPI.

Test-only switches (``CKPTIO_FAULT``, ``CKPTIO_TEST_*``) stay with the code they drive (``ckptio.engine.faults``).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ckptio.errors import DeclarationError
from ckptio.model.agreement import first_difference, groups_text, ranks_by_value


@dataclass(frozen=True)
class Setting:
    """One ``CKPTIO_*`` variable: ``parse`` turns its text (the default when unset or blank) into its value or
    raises ValueError; ``collective``: every rank must see the same value."""

    name: str
    default: str
    parse: Callable[[str], Any]
    collective: bool
    doc: str


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in allowed:
            raise ValueError(f"expected one of {', '.join(repr(a) for a in allowed)}")
        return value

    return parse


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise ValueError("expected a finite number of seconds >= 0")
    return value


def _verbatim(text: str) -> str:
    return text


def _optional_count(text: str) -> int | None:
    """``""`` -> None (automatic); otherwise a positive integer."""
    if not text.strip():
        return None
    if not text.strip().isdigit() or int(text) <= 0:
        raise ValueError("expected a positive integer (or nothing: the automatic choice)")
    return int(text)


def _size(text: str, allow_zero: bool = False) -> int:
    """A size in bytes (64M, 1G, ...: ckptio.model.units); ValueError, so get() names the variable."""
    from ckptio.model.units import parse_size

    try:
        return parse_size(text.strip(), "size", allow_zero=allow_zero)
    except Exception as exc:  # DeclarationError
        raise ValueError(str(exc)) from None


def _optional_size(text: str) -> int | None:
    """``""`` -> None (the default); otherwise a size in bytes (:func:`_size`)."""
    return _size(text) if text.strip() else None


def parse_signals(text: str) -> tuple[int, ...]:
    """``"USR1,TERM"`` -> ``(SIGUSR1, SIGTERM)``; ``""``/``"none"`` -> ``()``."""
    out = []
    for word in (w.strip() for w in text.split(",")):
        if not word or word.lower() == "none":
            continue
        name = word.upper() if word.upper().startswith("SIG") else "SIG" + word.upper()
        number = getattr(signal, name, None)
        if not isinstance(number, signal.Signals) or number in (signal.SIGKILL, signal.SIGSTOP):
            raise ValueError(f"CKPTIO_EXIT_SIGNALS: {word!r} is not a signal a process can catch (e.g. USR1,TERM)")
        out.append(int(number))
    return tuple(out)



TABLE: dict[str, Setting] = {s.name: s for s in (
    Setting("CKPTIO_READ_IO", "posix", _choice("posix", "mpiio"), True,
            "restart aggregators read with independent preads (posix) or one collective MPI Read_all per round"),
    Setting("CKPTIO_READ_THREAD", "1", _choice("0", "1"), True,
            "1: the restart reads round k+1 in a helper thread while round k is verified and sent; 0: no thread"),
    Setting("CKPTIO_BUFFER_BYTES", "", _verbatim, True,
            "restart buffer per aggregator and round (a size: 64M, 1G, ...; parsed by ckptio.model.units)"),
    Setting("CKPTIO_AGGREGATORS", "", _verbatim, True, "restart aggregator count (overrides the automatic choice)"),
    Setting("CKPTIO_WRITE_IO", "posix", _choice("posix", "mpiio", "write_all"), True,
            "native checkpoints: ckptio's write aggregators write their file domains with pwritev (posix) or "
            "MPI_File_write_at on their sub-communicator (mpiio); write_all: one collective MPI_File_write_all, "
            "MPI-IO's own collective buffering (before issue 29)"),
    Setting("CKPTIO_READ_BACK", "auto", _choice("auto", "always"), True,
            "auto: where a client's write error may have been lost (HDF5, PnetCDF and CKPTIO_WRITE_IO=write_all "
            "under Open MPI's OMPIO on 3 ranks or more), the planning rank reads back the extents too small to leave "
            "a hole, and on a file system that shows no holes (CephFS) the whole checkpoint is read back and its "
            "checksums compared before the commit (ckptio.engine.commit); always: every checkpoint is read back"),
    Setting("CKPTIO_WRITE_AGGREGATORS", "", _optional_count, True,
            "write aggregator count (overrides the automatic choice, as does an explicit cb_nodes hint)"),
    Setting("CKPTIO_WRITE_BUFFER_BYTES", "", _optional_size, True,
            "write buffer per aggregator and round (a size: 64M, 1G, ...; default 64 MiB), two per aggregator"),
    Setting("CKPTIO_WRITEBACK_BYTES", "4M", lambda text: _size(text, allow_zero=True), True,
            "a native checkpoint's write aggregator (CKPTIO_WRITE_IO posix or mpiio) starts the write-back of what "
            "it wrote every this many bytes (sync_file_range; a smaller value than 64K is taken as 64K), an HDF5 or "
            "PnetCDF checkpoint's ranks that of the whole file after each library step (PnetCDF: each group of "
            "variables of this many bytes), so the disk works while the rest is copied; 0: only the final fsync "
            "(ckptio.backends.writeback)"),
    Setting("CKPTIO_WRITE_THREAD", "1", _choice("0", "1"), True,
            "1: a write aggregator writes round k in a helper thread while round k+1 is exchanged; 0: no thread"),
    Setting("CKPTIO_HINTS", "", _verbatim, True, "MPI-IO hints 'key=value;key=value' (see ckptio.coord.hints)"),
    Setting("CKPTIO_SIGNAL_GRACE", "60", _seconds, False,
            "seconds a signal may stay held inside a collective operation (Writer.close, a read) before the "
            "process ends itself with status 128 + signal, because other ranks left (see ckptio.coord); 0: wait"),
    Setting("CKPTIO_EXIT_SIGNALS", "USR1,TERM", parse_signals, False,
            "the signals after which Series.should_exit() becomes true (e.g. USR1,TERM; 'none': none)"),
    Setting("CKPTIO_EXIT_MARGIN", "30", _seconds, False,
            "seconds kept free before the batch job's end, beyond the last checkpoint's duration (ckptio.tiers.batch)"),
    Setting("CKPTIO_LAYOUT", "set", _verbatim, False,
            "stripe layout on file systems that take one: set, inherit or off (ckptio.engine.fslayout; an unknown "
            "value is recorded in the checkpoint and taken as set: a layout never fails a checkpoint)"),
    Setting("CKPTIO_RECYCLE_SECONDS", "60", _seconds, False,
            "seconds the memory of a restart's returned arrays (4 MiB and more) is kept, pages mapped, for the next "
            "read after the caller dropped them (ckptio.engine.restart_memory); 0: returned to the system at once"),
    Setting("CKPTIO_EXIT_STATUS_ON_LOST_FAILURE", "1", _choice("0", "1"), False,
            "1: a background failure nobody asked about makes the exit status 1 where that is safe"),
)}


def raw(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The text of setting ``name`` (its default when unset or blank). Local."""
    text = (os.environ if environ is None else environ).get(name, "")
    return text if text.strip() else TABLE[name].default


def get(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The checked value of setting ``name``; DeclarationError naming the variable and its value. Local."""
    setting = TABLE[name]
    text = raw(name, environ)
    try:
        return setting.parse(text)
    except ValueError as exc:
        raise DeclarationError(f"{name}={text!r}: {exc} ({setting.doc})") from None


def collective_snapshot(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Local: the collective settings as this rank sees them, each checked (raises DeclarationError) and written
    as its parsed value (JSON text), so that one value spelt two ways (``64MiB`` and ``67108864``, ``POSIX`` and
    ``posix``) is the same setting. Compared between ranks by the collective entry points (:func:`check_same`)."""
    return {name: json.dumps(get(name, environ), sort_keys=True, default=str)
            for name, setting in TABLE.items() if setting.collective}


def check_same(snapshots: list[Mapping[str, str]], where: str) -> None:
    """Rank 0: DeclarationError naming the first variable whose value differs between ranks, with every value and
    the ranks that see it (unset, blank and the default's own text are one setting: the default, named as such,
    or "not set" where the default is nothing)."""
    found = first_difference(snapshots)
    if found is not None:
        name = found[0]
        default = json.dumps(get(name, {}), sort_keys=True, default=str)

        def shown(value: str) -> str:
            if value != default:
                return value
            return "not set" if not TABLE[name].default.strip() else f"{value} (the default)"

        groups = groups_text(ranks_by_value([s[name] for s in snapshots]), shown)
        raise DeclarationError(f"{where}: {name} differs between ranks ({groups}); it changes what the collective "
                               "I/O does, so every rank must see the same value (export it to the whole job)")
