"""The baseline's exported snapshot (DESIGN §2 rule 5): opened, described, held, released.

Helpers of ``PgReplicationHook.baseline_snapshot``; each takes an open psycopg connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import TableRef


@dataclass(frozen=True)
class BaselineSnapshot:
    """An exported snapshot with ``pg_current_snapshot()``'s parts and the baseline LSN."""

    snapshot: str
    xmin: int
    xmax: int
    xip: tuple[int, ...]
    baseline_lsn: LSN


def parse_snapshot(text: str) -> tuple[int, int, tuple[int, ...]]:
    """``(xmin, xmax, xip)`` of ``pg_snapshot`` text ``xmin:xmax:xip,...``."""
    xmin, xmax, xip = text.split(":")
    return int(xmin), int(xmax), tuple(int(x) for x in xip.split(",") if x)


def export_snapshot(conn: psycopg.Connection[Any], table: TableRef) -> BaselineSnapshot:
    """Start the REPEATABLE READ transaction of a baseline on ``conn`` and export its snapshot.

    The table is locked in ACCESS SHARE mode first (like pg_dump): a rewrite (TRUNCATE,
    VACUUM FULL, ALTER TABLE ... TYPE) is not MVCC-safe and would show an older snapshot an
    empty table, so none may commit between the snapshot and the end of the baseline.
    ``LOCK`` takes no snapshot: the next statement is the transaction's first to take one,
    and it records the snapshot id, the snapshot's xids and the WAL insert position together.
    """
    conn.autocommit = False
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.read_only = True
    try:
        conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS SHARE MODE").format(table.identifier))
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        raise ConfigError(f"table {table} does not exist in the source; check the table name") from None
    row = conn.execute(
        "SELECT pg_export_snapshot(), pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text"
    ).fetchone()
    assert row is not None  # a SELECT without FROM returns one row
    xmin, xmax, xip = parse_snapshot(row[1])
    return BaselineSnapshot(snapshot=row[0], xmin=xmin, xmax=xmax, xip=xip, baseline_lsn=LSN.parse(row[2]))
