"""Which ranks write parallel HDF5's cached metadata: rank 0 alone (:func:`metadata_from_rank_0`).

Why: by default parallel HDF5 spreads the writes of its metadata cache over every rank at each sync point (the
"distributed" strategy). A rank whose write fails there (EIO or a file size limit on one client) returns from
the flush without the barrier the others wait in, and the job hangs: ckptio's agreements cannot reach a rank
stuck inside the library (found by ``tests/faults/test_one_client_write_error.py``: under ROMIO, whose one
aggregator wrote all the data, the limited rank's first failing write was its share of the metadata at the
close). With ``H5AC_METADATA_WRITE_STRATEGY__PROCESS_0_ONLY`` only rank 0 writes metadata, so a write error on
any other rank can no longer happen inside HDF5's flush.

h5py does not expose the setting (its CacheConfig wraps the struct without that field), so this calls
``H5Fget_mdc_config``/``H5Fset_mdc_config`` through ctypes with ``H5AC_cache_config_t`` as declared in
H5ACpublic.h of HDF5 1.10 to 1.14 (version 1; ``hbool_t`` a C ``bool``), under h5py's lock. The layout is
checked before anything is set: only for those versions, with room behind the struct, and only where the struct
HDF5 filled has its parallel fields (at the end) in the ranges HDF5 accepts; the strategy is read back after it
is set. Local.
"""

from __future__ import annotations

import ctypes
from typing import Any

PROCESS_0_ONLY = 0  # H5AC_METADATA_WRITE_STRATEGY__PROCESS_0_ONLY
DISTRIBUTED = 1  # H5AC_METADATA_WRITE_STRATEGY__DISTRIBUTED (HDF5's default)
_MAX_TRACE_FILE_NAME_LEN = 1024
_MIN_DIRTY, _MAX_DIRTY = 512, 32 * 1024 * 1024  # H5AC__MIN/MAX_DIRTY_BYTES_THRESHOLD (H5ACprivate.h)
SUPPORTED = {(1, 10), (1, 12), (1, 14)}  # HDF5 versions whose H5ACpublic.h declares the struct below


class CacheConfig(ctypes.Structure):
    """``H5AC_cache_config_t`` (H5ACpublic.h; ``hbool_t`` is C99 ``bool`` since HDF5 1.10)."""

    _fields_ = [
        ("version", ctypes.c_int),
        ("rpt_fcn_enabled", ctypes.c_bool),
        ("open_trace_file", ctypes.c_bool),
        ("close_trace_file", ctypes.c_bool),
        ("trace_file_name", ctypes.c_char * (_MAX_TRACE_FILE_NAME_LEN + 1)),
        ("evictions_enabled", ctypes.c_bool),
        ("set_initial_size", ctypes.c_bool),
        ("initial_size", ctypes.c_size_t),
        ("min_clean_fraction", ctypes.c_double),
        ("max_size", ctypes.c_size_t),
        ("min_size", ctypes.c_size_t),
        ("epoch_length", ctypes.c_long),
        ("incr_mode", ctypes.c_int),
        ("lower_hr_threshold", ctypes.c_double),
        ("increment", ctypes.c_double),
        ("apply_max_increment", ctypes.c_bool),
        ("max_increment", ctypes.c_size_t),
        ("flash_incr_mode", ctypes.c_int),
        ("flash_multiple", ctypes.c_double),
        ("flash_threshold", ctypes.c_double),
        ("decr_mode", ctypes.c_int),
        ("upper_hr_threshold", ctypes.c_double),
        ("decrement", ctypes.c_double),
        ("apply_max_decrement", ctypes.c_bool),
        ("max_decrement", ctypes.c_size_t),
        ("epochs_before_eviction", ctypes.c_int),
        ("apply_empty_reserve", ctypes.c_bool),
        ("empty_reserve", ctypes.c_double),
        ("dirty_bytes_threshold", ctypes.c_size_t),
        ("metadata_write_strategy", ctypes.c_int),
    ]


class _Padded(ctypes.Structure):
    """The struct with room behind it: were HDF5's struct ever longer than this one, its writes land here."""

    _fields_ = [("config", CacheConfig), ("spare", ctypes.c_char * 4096)]


def _functions(h5py: Any) -> tuple[Any, Any] | None:
    """``H5Fget_mdc_config`` and ``H5Fset_mdc_config`` of the libhdf5 under h5py, or None where that HDF5 is not
    one whose struct this module declares (1.10 to 1.14) or the functions are not there."""
    if tuple(h5py.version.hdf5_version_tuple[:2]) not in SUPPORTED:
        return None
    try:
        lib = ctypes.CDLL(h5py.h5f.__file__)  # dlsym on it also searches its dependency libhdf5
        get, put = lib.H5Fget_mdc_config, lib.H5Fset_mdc_config
    except (OSError, AttributeError):
        return None
    for function in (get, put):
        function.argtypes = [ctypes.c_int64, ctypes.POINTER(CacheConfig)]  # hid_t is 64-bit since HDF5 1.10
        function.restype = ctypes.c_int
    return get, put


def plausible(config: CacheConfig) -> bool:
    """Whether a struct HDF5 filled looks like the layout above: its parallel fields, at the struct's end, in
    the ranges HDF5 accepts (H5ACprivate.h), and a fraction where a fraction belongs."""
    return (config.version == 1 and config.metadata_write_strategy in (PROCESS_0_ONLY, DISTRIBUTED)
            and _MIN_DIRTY <= config.dirty_bytes_threshold <= _MAX_DIRTY and 0.0 <= config.min_clean_fraction <= 1.0)


def _read(get: Any, file_id: int) -> _Padded | None:
    """The file's cache configuration (caller holds h5py's lock), None where HDF5 refused or it looks wrong."""
    padded = _Padded()
    padded.config.version = 1  # the version of the struct the caller passes (HDF5 checks it, never writes it)
    if get(file_id, ctypes.byref(padded.config)) < 0 or not plausible(padded.config):
        return None
    return padded


def metadata_from_rank_0(h5py: Any, file_id: int) -> bool:
    """Every rank of the open parallel file ``file_id``, right after its creation: HDF5's metadata written by
    rank 0 only from the next sync point on. True where the file's configuration reads back so; False (nothing
    changed) where the functions or a plausible struct are not there. Nothing is agreed between ranks: the same
    library, file and call give the same answer on every rank."""
    functions = _functions(h5py)
    if functions is None:
        return False
    get, put = functions
    from h5py import _objects

    with _objects.phil:
        padded = _read(get, file_id)
        if padded is None:
            return False
        padded.config.metadata_write_strategy = PROCESS_0_ONLY
        padded.config.set_initial_size = False  # change nothing else (True would resize the cache and its stats)
        if put(file_id, ctypes.byref(padded.config)) < 0:
            return False
        again = _read(get, file_id)
    return again is not None and again.config.metadata_write_strategy == PROCESS_0_ONLY
