"""MPI-IO hint policy: striping and collective buffering for every file ckptio creates or reads.

The rule comes from the FLASH restart study on TACC Stampede: a 250 GB restart file striped over 2 Lustre OSTs
and read by 7,000+ ranks at once made the object servers unresponsive. The fix was to set the stripe count from
the code, ``striping_factor = min(nprocs, 80)``, and to let a few aggregator ranks do the file I/O
(collective buffering). Defaults, lowest precedence first, then overrides:

1. ckptio's defaults (:data:`DEFAULTS` plus the two values that depend on ``nprocs``, plus
   :data:`ROMIO_DEFAULTS` where ROMIO is the MPI-IO layer: MPICH-family libraries, or Open MPI with
   ``OMPI_MCA_io=romio321``);
2. the ``hints=`` argument of :func:`ckptio.create` / :func:`ckptio.open`;
3. the environment variable ``CKPTIO_HINTS="key=value;key=value"`` (like ROMIO's hints file), so a job
   script can change striping or buffering without recompiling.

``striping_factor``/``striping_unit`` only take effect when a file is *created* on a file system that
understands them (Lustre, GPFS via ROMIO's drivers); elsewhere MPI ignores them. Both what was requested
and what ``MPI_File_get_info`` reports back are recorded in the checkpoint.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from ckptio.errors import DeclarationError
from ckptio.model.units import parse_count

MAX_STRIPE_COUNT = 80
DEFAULT_STRIPING_UNIT = 1 << 20
ENV_HINTS = "CKPTIO_HINTS"
ENV_AGGREGATORS = "CKPTIO_AGGREGATORS"

DEFAULTS: dict[str, str] = {
    "striping_unit": str(DEFAULT_STRIPING_UNIT),
    "romio_cb_write": "enable",
    "romio_cb_read": "enable",
    "cb_buffer_size": str(16 << 20),
    "romio_ds_write": "disable",
}

# ROMIO only: ``cb_config_list`` says which hosts may hold collective-buffering aggregators and how many each;
# "*:1" = at most one per node, so the cb_nodes aggregators spread over cb_nodes nodes instead of filling the
# first node (ROMIO's default places them in rank order, e.g. all 80 on the first two nodes of a 7,000-rank job,
# whose network links then carry every byte). ckptio's restart aggregators are chosen one per node the same way.
# OMPIO has no such hint (it picks aggregators by its own grouping), so ckptio passes it only where ROMIO runs.
ROMIO_DEFAULTS: dict[str, str] = {"cb_config_list": "*:1"}

# The hints with a fixed set of values that ckptio sets or documents, and those values (ROMIO takes its switches in
# lower case, PnetCDF any case): any other value is a DeclarationError instead of being ignored by the library
# (PnetCDF took nc_in_place_swap="false" as "auto" and swapped the caller's arrays in place: an outside trial).
ENUMERATED: dict[str, tuple[str, ...]] = {
    **{key: ("enable", "disable", "automatic") for key in ("romio_cb_write", "romio_cb_read", "romio_ds_write",
                                                         "romio_ds_read")},
    "romio_no_indep_rw": ("true", "false"),
    "nc_in_place_swap": ("enable", "disable", "auto"),
}

# Added by backends whose every file access is collective (the native one): ROMIO then opens the file on the
# cb_nodes aggregators only ("deferred open"), so a 7,000-rank job does not send 7,000 opens to the servers.
COLLECTIVE_ONLY_HINTS: dict[str, str] = {"romio_no_indep_rw": "true"}


def parse_hint_string(text: str) -> dict[str, str]:
    """Local: Parse ``"key=value;key=value"`` (also accepts newlines as separators, like a ROMIO hints file)."""
    out: dict[str, str] = {}
    for item in text.replace("\n", ";").split(";"):
        item = item.strip()
        if not item or item.startswith("#"):
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise DeclarationError(f"{ENV_HINTS}: cannot parse hint {item!r}; expected key=value")
        out[key.strip()] = value.strip()
    return out


def resolve_hints(
    nprocs: int, user: Mapping[str, object] | None = None, environ: Mapping[str, str] | None = None,
    romio: bool | None = None,
) -> dict[str, str]:
    """All hints for a job of ``nprocs`` ranks, as MPI wants them (strings). Local, the same on every rank.

    ``romio``: whether ROMIO is the MPI-IO layer (adds :data:`ROMIO_DEFAULTS`); None asks :func:`uses_romio`.
    """
    environ = os.environ if environ is None else environ
    romio = uses_romio(environ) if romio is None else romio
    user_hints = {str(k): str(v) for k, v in (user or {}).items()}
    env_hints = parse_hint_string(environ.get(ENV_HINTS, ""))
    overrides = {**user_hints, **env_hints}
    hints = dict(DEFAULTS)
    if romio:
        hints.update(ROMIO_DEFAULTS)
    hints["striping_factor"] = str(min(nprocs, MAX_STRIPE_COUNT))
    hints.update(overrides)
    for key in ("striping_factor", "striping_unit", "cb_nodes", "cb_buffer_size"):
        if key in hints and (not hints[key].isdigit() or int(hints[key]) <= 0):
            raise DeclarationError(f"hint {key}={hints[key]!r} must be a positive integer")
    for key, values in ENUMERATED.items():
        if key in hints:
            if hints[key].strip().lower() not in values:
                raise DeclarationError(f"hint {key}={hints[key]!r}: expected one of {', '.join(values)}")
            hints[key] = hints[key].strip().lower()
    if "cb_nodes" not in overrides:
        hints["cb_nodes"] = str(min(int(hints["striping_factor"]), nprocs))
    return hints


def difference(first: Mapping[str, str], other: Mapping[str, str]) -> str:
    """Local: the hints that differ between two resolved sets, as ``key=value`` of ``first`` against ``other``
    (``<unset>`` where one has no such hint), for an error message."""
    keys = sorted(k for k in first.keys() | other.keys() if first.get(k) != other.get(k))
    return ", ".join(f"{k}={first.get(k, '<unset>')!r} against {other.get(k, '<unset>')!r}" for k in keys)


def stripe_layout(hints: Mapping[str, str]) -> tuple[int, int]:
    """Local: (stripe count, stripe unit in bytes) that the hints ask for."""
    return int(hints["striping_factor"]), int(hints["striping_unit"])


def aggregator_override(hints_user: Mapping[str, object] | None,
                        environ: Mapping[str, str] | None = None) -> int | None:
    """Local: Aggregator count forced by the user: ``CKPTIO_AGGREGATORS``, else ``cb_nodes`` given explicitly."""
    environ = os.environ if environ is None else environ
    if environ.get(ENV_AGGREGATORS, "").strip():
        return parse_count(environ[ENV_AGGREGATORS], ENV_AGGREGATORS)
    explicit = {**{str(k): str(v) for k, v in (hints_user or {}).items()},
                **parse_hint_string(environ.get(ENV_HINTS, ""))}
    if "cb_nodes" in explicit:
        return parse_count(explicit["cb_nodes"], "hint cb_nodes")
    return None


def to_info(hints: Mapping[str, str]):
    """Local: An ``MPI.Info`` holding ``hints``; the caller frees it."""
    from ckptio.coord.mpi import MPI

    info = MPI.Info.Create()
    for key, value in hints.items():
        info.Set(key, value)
    return info


def read_hints(hints: Mapping[str, str], romio: bool | None = None) -> dict[str, str]:
    """Local: ``hints`` for the file the restart aggregators open together (``CKPTIO_READ_IO=mpiio``). ckptio
    already chose them (one per node first) and only they open the file, so under ROMIO each must also be an MPI-IO
    aggregator: the one-per-node ``cb_config_list`` of writes (:data:`ROMIO_DEFAULTS`) would funnel aggregators that
    share a node through one of them. ``romio`` None asks :func:`uses_romio`."""
    out = dict(hints)
    if uses_romio() if romio is None else romio:
        out["cb_config_list"] = "*:*"
    return out


def info_to_dict(info) -> dict[str, str]:
    """Local: Every key/value of an ``MPI.Info`` (what the MPI library reports as effective)."""
    if info is None:
        return {}
    return {info.Get_nthkey(i): info.Get(info.Get_nthkey(i)) for i in range(info.Get_nkeys())}


def uses_romio(environ: Mapping[str, str] | None = None) -> bool:
    """True when MPI-IO is ROMIO: any MPI but Open MPI (MPICH, Cray MPICH, Intel MPI, MVAPICH all use ROMIO),
    or Open MPI with ``OMPI_MCA_io`` selecting ROMIO (e.g. ``romio321``). Local. Never initialises MPI: if
    ``mpi4py.MPI`` was not imported yet (a pure planner run), the answer is False."""
    environ = os.environ if environ is None else environ
    if "mpi4py.MPI" not in sys.modules:
        return False
    from ckptio.coord.mpi import MPI

    if not MPI.Get_library_version().startswith("Open MPI"):
        return True
    return "romio" in environ.get("OMPI_MCA_io", "")


def io_component() -> str:
    """Local: Which MPI-IO implementation is in use, for the record (Open MPI: OMPIO or ROMIO)."""
    from ckptio.coord.mpi import MPI

    lib = MPI.Get_library_version().split("\n")[0].strip()
    if "Open MPI" in lib:
        return f"Open MPI io={os.environ.get('OMPI_MCA_io', 'default (ompio)')}"
    return lib


def library_rounds(hints: Mapping[str, str], nprocs: int, romio: bool | None = None) -> tuple[int, int]:
    """Local: (aggregators, bytes per aggregator and round) of Open MPI's OMPIO collective buffering for a file
    opened with ``hints`` by ``nprocs`` ranks: ``min(cb_nodes, nprocs)`` (OMPIO takes the hint's count) and half of
    ``cb_buffer_size`` (its round). HDF5's and PnetCDF's collective data writes are cut into calls of one round
    each from these (:mod:`ckptio.backends.collective_calls`: an aggregator whose write fails in one of several
    rounds leaves the other ranks waiting in the next). (0, 0), no cut, under ROMIO, which finishes its rounds
    after a failed write, and on 2 ranks or fewer, where OMPIO writes each rank's part on its own (its ``individual``
    component takes priority there: ``mca_fcoll_base_query_table``, Open MPI 4.1.4). The same on every rank: from
    the agreed hints, the job size and the launch's MPI-IO layer. ``romio`` None asks :func:`uses_romio`."""
    if nprocs <= 2 or (uses_romio() if romio is None else romio):
        return 0, 0
    aggregators = max(1, min(int(hints.get("cb_nodes", nprocs)), nprocs))
    return aggregators, int(hints.get("cb_buffer_size", DEFAULTS["cb_buffer_size"])) // 2


def collective_write_errors_lost(nprocs: int, romio: bool | None = None) -> bool:
    """Local: whether a collective MPI-IO write (``MPI_File_write_all`` and the like, which HDF5's and PnetCDF's
    collective data writes are) may return success on every rank while a write of the file failed on one: Open
    MPI's OMPIO on 3 ranks or more. Its collective components (``vulcan``, and ``dynamic_gen2`` on Lustre) print
    "fbtl_pwritev failed" and end with ``return OMPI_SUCCESS`` whatever failed (Open MPI 4.1.4,
    ``fcoll_vulcan_file_write_all.c``; measured: an aggregator's EIO lost its domain, every rank returned
    success); on 2 ranks or fewer its ``individual`` component, whose writes report their errors, takes over.
    ROMIO reports the error. The same on every rank of one launch (``romio`` None asks :func:`uses_romio`)."""
    return nprocs > 2 and "mpi4py.MPI" in sys.modules and not (uses_romio() if romio is None else romio)


def collective_write_hazard() -> str | None:
    """Why collective writes through HDF5 or PnetCDF are unsafe in this process, or None. Local; the answer is
    the same on every rank of one launch (one environment, one MPI_Init).

    Open MPI 4.1's OMPIO io component, in a process initialised below ``MPI_THREAD_MULTIPLE`` (what a C or
    Fortran host's ``MPI_Init`` gives), intermittently writes wrong bytes for the collective writes HDF5 and
    PnetCDF make (their derived file views): some ranks' data lands as zeros and only the checksums notice
    (tests/test_thread_levels.py; PnetCDF: the C round trip of tests/test_bindings.py failed 2 of 12
    four-rank runs). ROMIO (``OMPI_MCA_io=romio321``) and ``MPI_THREAD_MULTIPLE`` were correct in every run,
    and so were the native backend's collective writes of contiguous ranges. The io component cannot be
    queried through MPI, so OMPIO is assumed for Open MPI unless ``OMPI_MCA_io`` selects ROMIO.
    """
    from ckptio.coord.mpi import MPI

    if not MPI.Get_library_version().startswith("Open MPI"):
        return None
    if "romio" in os.environ.get("OMPI_MCA_io", ""):
        return None
    if MPI.Query_thread() >= MPI.THREAD_MULTIPLE:
        return None
    return ("Open MPI's OMPIO io component with a thread level below MPI_THREAD_MULTIPLE corrupts collective "
            "writes through derived file views")
