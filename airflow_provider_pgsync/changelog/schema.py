"""The Arrow schema of a changelog segment: change metadata columns, old keys, row columns.

A segment of a table with columns ``c1..cn`` has, in this order:

- ``_op`` ``string`` not null: ``I``, ``U``, ``D`` or ``T`` (truncate; row columns null). The
  ``T`` row that starts a schema version whose change has ``outside`` (its segment metadata) is
  a marker, not a TRUNCATE: rows of the table changed outside the stream there (a partition
  attached with rows, detached or truncated: ``source/partition_events.py``); apply never hands
  it to a destination (``apply/run.py``: the table goes back to baseline)
- ``_commit_lsn`` ``uint64`` not null: the LSN of the transaction's commit record
- ``_seq`` ``int64`` not null: position of the change inside its transaction
- ``_xid`` ``int64`` not null: the 64-bit transaction id (epoch << 32 | xid) of the
  change's transaction, which capture widens from pgoutput's 32 bits when it writes the
  segment (the transaction is recent then); the segment's metadata says ``xid_bits: 64``.
  Segments written before hold the 32-bit xids and no ``xid_bits`` key;
  ``Changelog.read_changes`` widens them against a reference the caller gives.
- ``_commit_ts`` ``timestamp[us, UTC]`` not null
- ``_unchanged`` ``list<string>``: names of columns sent as unchanged TOAST
- ``_old_key_<c>`` ``string``, one per key column ``c``: the old key of an UPDATE that
  carried one, or the key of a DELETE
- ``c1..cn`` ``string``: the values in PostgreSQL's text output format, exactly as
  pgoutput sends them; type OIDs and modifiers live in the segment's ``pgsync`` metadata.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo

OP = "_op"
COMMIT_LSN = "_commit_lsn"
SEQ = "_seq"
XID = "_xid"
COMMIT_TS = "_commit_ts"
UNCHANGED = "_unchanged"
OLD_KEY_PREFIX = "_old_key_"

#: The change metadata columns that start every segment, in order.
RESERVED: tuple[str, ...] = (OP, COMMIT_LSN, SEQ, XID, COMMIT_TS, UNCHANGED)

#: The values of ``_op``.
OPS: frozenset[str] = frozenset({"I", "U", "D", "T"})

_META_FIELDS: tuple[pa.Field, ...] = (
    pa.field(OP, pa.string(), nullable=False),
    pa.field(COMMIT_LSN, pa.uint64(), nullable=False),
    pa.field(SEQ, pa.int64(), nullable=False),
    pa.field(XID, pa.int64(), nullable=False),
    pa.field(COMMIT_TS, pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field(UNCHANGED, pa.list_(pa.string()), nullable=True),
)


def old_key_column(column: str) -> str:
    """The name of the column holding the old value of key column ``column``."""
    return OLD_KEY_PREFIX + column


def key_columns(columns: Sequence[ColumnInfo]) -> list[str]:
    """The names of the key columns, in Relation order."""
    return [c.name for c in columns if c.is_key]


def segment_schema(columns: Sequence[ColumnInfo], *, table: TableRef | str | None = None) -> pa.Schema:
    """The Arrow schema of a segment of a table with ``columns`` (in Relation order).

    Raises ConfigError when a source column has the exact name of a changelog column
    (one of RESERVED or ``_old_key_<key column>``) or two columns share a name;
    ``table`` only names the table in that message.
    """
    where = f"table {table}" if table is not None else "a table"
    names = [c.name for c in columns]
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigError(
                f"{where} has two columns named {name!r}; a changelog segment needs unique names"
            )
        seen.add(name)
    keys = key_columns(columns)
    generated = [*RESERVED, *(old_key_column(k) for k in keys)]
    for name in names:
        if name in generated:
            raise ConfigError(
                f"column {name!r} of {where} has the name of a changelog column "
                f"({', '.join(RESERVED)} or {OLD_KEY_PREFIX}<key column>), so its changes cannot be "
                "captured; nothing was captured. Rename the column in the source, or leave it out with "
                "the table's columns in the pipeline's config. The table's changes already in the slot "
                "still have that column: take the table out of the pipeline (remove it from the "
                "pipeline's tables, run the setup DAG, then the teardown DAG with param tables naming "
                "it), run the cdc DAG once (it leaves those changes out), then add the table back and "
                "run the setup DAG, which baselines it again"
            )
    fields = [
        *_META_FIELDS,
        *(pa.field(old_key_column(k), pa.string(), nullable=True) for k in keys),
        *(pa.field(name, pa.string(), nullable=True) for name in names),
    ]
    return pa.schema(fields)
