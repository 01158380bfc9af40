"""ckptio: checkpoint/restart I/O for parallel simulation codes.

Write distributed N-d arrays, per-rank variable-length segments and attributes into one shared file with
collective MPI-IO (native format), parallel HDF5 or PnetCDF; restart on any rank count through two-phase
aggregated reads. See README.md and the documentation in docs/.
"""

from ckptio.api import create, latest, open
from ckptio.errors import (
    CapabilityError,
    CheckpointError,
    CheckpointIOError,
    CheckpointNotFoundError,
    ClosedCheckpointError,
    CollectiveError,
    CorruptCheckpointError,
    DeclarationError,
    FormatVersionError,
    IncompleteCheckpointError,
    ReadRequestError,
    RewrittenCheckpointError,
    UnknownFormatError,
)
from ckptio.model.meta import __version__
from ckptio.model.pagealign import empty
from ckptio.reader import Reader, VariableInfo
from ckptio.series import Series
from ckptio.tiers.async_io import wait_all
from ckptio.tools.xarray_series import open_series
from ckptio.writer import Writer

__all__ = [
    "CapabilityError",
    "CheckpointError",
    "CheckpointIOError",
    "CheckpointNotFoundError",
    "ClosedCheckpointError",
    "CollectiveError",
    "CorruptCheckpointError",
    "DeclarationError",
    "FormatVersionError",
    "IncompleteCheckpointError",
    "ReadRequestError",
    "Reader",
    "RewrittenCheckpointError",
    "Series",
    "UnknownFormatError",
    "VariableInfo",
    "Writer",
    "__version__",
    "create",
    "empty",
    "latest",
    "open",
    "open_series",
    "wait_all",
]
