"""ckptio: checkpoint/restart I/O for parallel simulation codes.

Write distributed N-d arrays, per-rank variable-length segments and attributes into one shared file with
collective MPI-IO (native format), parallel HDF5 or PnetCDF; restart on any rank count through two-phase
aggregated reads. See README.md and the documentation in docs/.
"""

from .api import create, open
from .async_io import wait_all
from .catalog import latest
from .errors import (
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
from .meta import __version__
from .pagealign import empty
from .reader import Reader, VariableInfo
from .series import Series
from .writer import Writer
from .xarray_series import open_series

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
