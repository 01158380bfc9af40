"""Open ckptio checkpoints with xarray's own engines, without ckptio's bookkeeping (serial, one process, no MPI).

What each format shows to a tool that does not know ckptio (issue 27, item 9), file format version 2:

* **HDF5** (``engine="netcdf4"`` or ``"h5netcdf"``): only the user's variables. ckptio's items are the ``/ckptio``
  group (metadata document, block table, block checksums), which xarray does not open (it reads the root
  group); h5py and ``h5ls`` do show it, as a group of its own. The checkpoint's attributes are root attributes.
* **netCDF** (CDF-5, ``engine="netcdf4"``): classic netCDF has no groups, so ckptio's items are variables of the
  root: :data:`BOOKKEEPING` (the metadata document, its checksum, the completion mark, the block table and its
  checksums) with their dimensions ``ckptio_*``, and the global attributes ``ckptio_format_version``,
  ``ckptio_version`` and ``ckptio_note``. They are part of the format (ckptio reads them to restart), so they
  stay in the file; :func:`open_dataset` drops them.
* **native** (MPI-IO): only ``engine="ckptio"`` reads it, and it shows only the user's variables.

Attributes: every global attribute whose name starts with ``ckptio`` is ckptio's, in every format
(:func:`is_bookkeeping_attr`): the netCDF ones above, and ``ckptio_series_seq``, the commit counter older ckptio
versions wrote into the checkpoint's attributes (HDF5 root attributes and ``ck.attrs``; ckptio no longer writes it,
and the netCDF writer never stored a ``ckptio*`` attribute natively). :func:`open_dataset` and
``engine="ckptio"`` hide them, so a checkpoint shows the same attributes whatever its format.

Variable names starting with ``ckptio`` are reserved (``write()`` refuses them), so dropping every such variable
never drops a user's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

#: The variables ckptio keeps for itself in a netCDF checkpoint of format version 2. Pass them as
#: ``drop_variables=`` to ``xr.open_dataset`` (their ``ckptio_*`` dimensions then disappear too). HDF5
#: checkpoints keep theirs in the ``/ckptio`` group, which xarray does not show; dropping absent names is harmless.
BOOKKEEPING: tuple[str, ...] = ("ckptio_blocks", "ckptio_block_checksums", "ckptio_metadata_checksum",
                                "ckptio_complete", "ckptio_metadata")

#: The prefix of ckptio's names. Variable names starting with it are reserved; global attributes starting with
#: it are ckptio's (see the module docstring).
PREFIX = "ckptio"


def is_bookkeeping_variable(name: str) -> bool:
    """True for a variable ckptio wrote for itself (any format version): names starting with ``ckptio``."""
    return name.lower().startswith(PREFIX)


def is_bookkeeping_attr(name: str) -> bool:
    """True for a global attribute that is ckptio's, not the user's: names starting with ``ckptio``."""
    return name.startswith(PREFIX)


def user_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """``attrs`` without ckptio's own attributes (:func:`is_bookkeeping_attr`)."""
    return {k: v for k, v in attrs.items() if not is_bookkeeping_attr(k)}


def without_bookkeeping(dataset: Any) -> Any:
    """Serial: an ``xarray.Dataset`` (opened by any engine) without ckptio's variables and global attributes."""
    ours = [name for name in dataset.variables if is_bookkeeping_variable(str(name))]
    out = dataset.drop_vars(ours) if ours else dataset
    out.attrs = user_attrs(out.attrs)
    return out


def open_dataset(path: str | os.PathLike, *, drop_variables: str | Iterable[str] | None = None,
                 **kwargs: Any) -> Any:
    """Serial (this process alone, no communicator): ``xr.open_dataset(path, **kwargs)`` with xarray's own engine
    (``engine=`` as you choose: ``"netcdf4"``, ``"h5netcdf"``, or none to let xarray pick; a native checkpoint is
    claimed by ``engine="ckptio"``), without ckptio's bookkeeping: the :data:`BOOKKEEPING` variables are passed as
    ``drop_variables`` (with yours), any other ``ckptio*`` variable is dropped, and the global attributes of
    :func:`is_bookkeeping_attr` are removed. As lazy as the engine is; close it (or use ``with``) as usual."""
    import xarray as xr

    mine = [drop_variables] if isinstance(drop_variables, str) else list(drop_variables or ())
    dataset = xr.open_dataset(os.fspath(path), drop_variables=[*BOOKKEEPING, *mine], **kwargs)
    return without_bookkeeping(dataset)
