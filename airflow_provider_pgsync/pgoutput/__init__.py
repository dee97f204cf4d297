"""Pure-Python decoding of PostgreSQL's pgoutput logical replication protocol (v1, v2)."""

from __future__ import annotations

from airflow_provider_pgsync.errors import DecodeError
from airflow_provider_pgsync.pgoutput.decoder import (
    SUPPORTED_VERSIONS,
    PgOutputDecoder,
    decode_message,
)
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.pgoutput.messages import (
    MESSAGE_TYPES,
    PG_EPOCH,
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Relation,
    RelationColumn,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    Type,
    Update,
    pg_timestamp,
)

__all__ = [
    "LSN",
    "MESSAGE_TYPES",
    "PG_EPOCH",
    "SUPPORTED_VERSIONS",
    "Begin",
    "Commit",
    "DecodeError",
    "Delete",
    "Insert",
    "LogicalMessage",
    "Message",
    "Origin",
    "PgOutputDecoder",
    "Relation",
    "RelationColumn",
    "StreamAbort",
    "StreamCommit",
    "StreamStart",
    "StreamStop",
    "Truncate",
    "TupleData",
    "Type",
    "Update",
    "decode_message",
    "pg_timestamp",
]
