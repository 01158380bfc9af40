"""The block columns now live in :mod:`ckptio.model.block_table` (issue 24's model layer: pure data, one JSON
boundary). This name re-exports them until the write side, the reader and the backends import them from there."""

from .model.block_table import (
    COLUMNS,
    ENCODING_VERSION,
    USER_CHECKSUMS_NOTE,
    USER_TABLE_NOTE,
    BlockTable,
    as_table,
    decode,
    encode,
    encode_tables,
    stored_nbytes,
    user_table,
    user_table_shape,
)

__all__ = ["COLUMNS", "ENCODING_VERSION", "USER_CHECKSUMS_NOTE", "USER_TABLE_NOTE", "BlockTable", "as_table",
           "decode", "encode", "encode_tables", "stored_nbytes", "user_table", "user_table_shape"]
