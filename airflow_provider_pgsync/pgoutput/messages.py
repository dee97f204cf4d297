"""The messages of PostgreSQL's pgoutput logical replication protocol, versions 1 and 2.

One frozen dataclass per message of "Logical Replication Message Formats" in the
PostgreSQL documentation, holding the fields as they are on the wire: LSNs as
:class:`LSN`, xids and OIDs as unsigned ints, timestamps as signed microseconds since
2000-01-01 UTC. ``xid`` is ``None`` on messages that carry one only inside a
Stream Start ... Stream Stop block (protocol version 2) when they are sent outside one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeAlias

from airflow_provider_pgsync.errors import DecodeError
from airflow_provider_pgsync.pgoutput.lsn import LSN

#: Midnight of 2000-01-01 UTC, the epoch of PostgreSQL timestamps.
PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)

#: The kind letters of a TupleData column, as byte values.
KIND_NULL = ord("n")
KIND_UNCHANGED = ord("u")
KIND_TEXT = ord("t")
KIND_BINARY = ord("b")


def pg_timestamp(micros: int) -> datetime:
    """An aware UTC datetime from PostgreSQL microseconds; OverflowError when out of range."""
    return PG_EPOCH + timedelta(microseconds=micros)


@dataclass(frozen=True, slots=True)
class TupleData:
    """The columns of one row: a kind letter (n, u, t, b) and raw bytes or None per column."""

    kinds: bytes
    values: tuple[bytes | None, ...]

    def __len__(self) -> int:
        return len(self.kinds)

    def kind(self, i: int) -> str:
        """The kind letter of column ``i``: ``n``, ``u``, ``t`` or ``b``."""
        return chr(self.kinds[i])

    def is_null(self, i: int) -> bool:
        """Whether column ``i`` is SQL NULL."""
        return self.kinds[i] == KIND_NULL

    def is_unchanged(self, i: int) -> bool:
        """Whether column ``i`` is an unchanged TOASTed value that was not sent."""
        return self.kinds[i] == KIND_UNCHANGED

    def text(self, i: int) -> str | None:
        """Column ``i`` in text format as str; None when null or unchanged TOAST.

        Raises DecodeError (tag None, offset inside the value) when the bytes are not
        UTF-8, and ValueError when the column was sent in binary format.
        """
        kind = self.kinds[i]
        value = self.values[i]
        if value is None:
            return None
        if kind != KIND_TEXT:
            raise ValueError(f"column {i} is in binary format; use values[{i}]")
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            reason = f"column {i} is not valid UTF-8 at byte {exc.start} of its value"
            raise DecodeError(reason, tag=None, offset=exc.start) from None


@dataclass(frozen=True, slots=True)
class Begin:
    """'B': the start of a transaction."""

    final_lsn: LSN
    commit_ts: int
    xid: int

    @property
    def commit_time(self) -> datetime:
        """commit_ts as an aware UTC datetime; OverflowError for out-of-range values."""
        return pg_timestamp(self.commit_ts)


@dataclass(frozen=True, slots=True)
class Commit:
    """'C': the end of a transaction."""

    flags: int
    commit_lsn: LSN
    end_lsn: LSN
    commit_ts: int

    @property
    def commit_time(self) -> datetime:
        """commit_ts as an aware UTC datetime; OverflowError for out-of-range values."""
        return pg_timestamp(self.commit_ts)


@dataclass(frozen=True, slots=True)
class Origin:
    """'O': the replication origin the transaction came from."""

    commit_lsn: LSN
    name: str


@dataclass(frozen=True, slots=True)
class RelationColumn:
    """One column of a Relation message."""

    flags: int
    name: str
    type_oid: int
    type_modifier: int

    @property
    def is_key(self) -> bool:
        """Whether the column is part of the replica identity key."""
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True)
class Relation:
    """'R': the schema of a table, sent before its first change (and after a DDL)."""

    xid: int | None
    relation_id: int
    namespace: str
    relation_name: str
    replica_identity: str
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True, slots=True)
class Type:
    """'Y': the name of a non-built-in data type used by a following Relation."""

    xid: int | None
    type_id: int
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Insert:
    """'I': one inserted row."""

    xid: int | None
    relation_id: int
    new_tuple: TupleData


@dataclass(frozen=True, slots=True)
class Update:
    """'U': one updated row; key_tuple or old_tuple present when the identity allows it."""

    xid: int | None
    relation_id: int
    old_tuple: TupleData | None
    key_tuple: TupleData | None
    new_tuple: TupleData


@dataclass(frozen=True, slots=True)
class Delete:
    """'D': one deleted row, identified by its key_tuple or its old_tuple."""

    xid: int | None
    relation_id: int
    old_tuple: TupleData | None
    key_tuple: TupleData | None


@dataclass(frozen=True, slots=True)
class Truncate:
    """'T': a TRUNCATE of one or more tables."""

    xid: int | None
    options: int
    relation_ids: tuple[int, ...]

    @property
    def cascade(self) -> bool:
        """Whether CASCADE was given."""
        return bool(self.options & 1)

    @property
    def restart_identity(self) -> bool:
        """Whether RESTART IDENTITY was given."""
        return bool(self.options & 2)


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    """'M': a message written with pg_logical_emit_message()."""

    xid: int | None
    flags: int
    lsn: LSN
    prefix: str
    content: bytes

    @property
    def transactional(self) -> bool:
        """Whether the message was emitted as part of a transaction."""
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True)
class StreamStart:
    """'S': the start of a block of changes of an in-progress transaction."""

    xid: int
    first_segment: bool


@dataclass(frozen=True, slots=True)
class StreamStop:
    """'E': the end of a block of changes of an in-progress transaction."""


@dataclass(frozen=True, slots=True)
class StreamCommit:
    """'c': the commit of a streamed transaction."""

    xid: int
    flags: int
    commit_lsn: LSN
    end_lsn: LSN
    commit_ts: int

    @property
    def commit_time(self) -> datetime:
        """commit_ts as an aware UTC datetime; OverflowError for out-of-range values."""
        return pg_timestamp(self.commit_ts)


@dataclass(frozen=True, slots=True)
class StreamAbort:
    """'A': the abort of a streamed (sub)transaction; subxid == xid for the whole one."""

    xid: int
    subxid: int


Message: TypeAlias = (
    Begin
    | Commit
    | Origin
    | Relation
    | Type
    | Insert
    | Update
    | Delete
    | Truncate
    | LogicalMessage
    | StreamStart
    | StreamStop
    | StreamCommit
    | StreamAbort
)

#: The message classes, for isinstance checks.
MESSAGE_TYPES: tuple[type, ...] = (
    Begin,
    Commit,
    Origin,
    Relation,
    Type,
    Insert,
    Update,
    Delete,
    Truncate,
    LogicalMessage,
    StreamStart,
    StreamStop,
    StreamCommit,
    StreamAbort,
)
