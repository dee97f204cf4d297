"""The PostgreSQL destination's control tables in its control schema: ``watermarks``, one row per
(destination, table) with the key of the last change applied, written in the transaction of the
batch it ends, the lineage of the baseline the table holds and the table's OID (its identity,
``postgres_guard.py``); the writes others made to the tables (``foreign_writes``, and the guard
trigger's function); and the baseline's parts table (``postgres_baseline.py``)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.destinations import postgres_baseline, postgres_guard
from airflow_provider_pgsync.destinations.pg_ddl_lock import lock_ddl
from airflow_provider_pgsync.source.names import TableRef


def watermarks_table(control_schema: str) -> sql.Composed:
    """The watermarks table of ``control_schema`` (SQL)."""
    return sql.SQL("{}.watermarks").format(sql.Identifier(control_schema))


def ensure_control_tables(conn: psycopg.Connection[Any], control_schema: str) -> None:
    """The control tables; a NULL ``commit_lsn`` is a baselined table with no change applied
    yet, ``lineage`` the baseline its table holds (None: made by ``open_table``), ``relid`` the
    table's OID (None: recorded by an earlier version)."""
    watermarks = watermarks_table(control_schema)
    with conn.transaction():
        lock_ddl(conn)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(control_schema)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (destination text, table_key text, commit_lsn numeric(20),"
                " seq bigint, lineage text, relid oid, PRIMARY KEY (destination, table_key))"
            ).format(watermarks)
        )
        postgres_baseline.ensure_parts_table(conn, control_schema)
        postgres_guard.ensure_guard(conn, control_schema)
        old = conn.execute(
            "SELECT NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = %s::regclass"
            " AND attname = 'relid' AND NOT attisdropped)",
            (watermarks.as_string(conn),),
        ).fetchone()
        if old and old[0]:  # made by an earlier version: altered once (it locks the table)
            conn.execute(
                sql.SQL(
                    "ALTER TABLE {} ADD COLUMN IF NOT EXISTS lineage text,"
                    " ADD COLUMN IF NOT EXISTS relid oid,"
                    " ALTER COLUMN commit_lsn DROP NOT NULL, ALTER COLUMN seq DROP NOT NULL"
                ).format(watermarks)
            )


def read_watermark(
    conn: psycopg.Connection[Any], control_schema: str, destination: str, table: TableRef
) -> tuple[Any, ...] | None:
    """The (commit_lsn, seq) row of ``table`` in ``destination``, None when it has none."""
    return conn.execute(
        sql.SQL("SELECT commit_lsn, seq FROM {} WHERE destination = %s AND table_key = %s").format(
            watermarks_table(control_schema)
        ),
        (destination, str(table)),
    ).fetchone()


def write_watermark(
    conn: psycopg.Connection[Any], control_schema: str, destination: str, table: TableRef, upto: Key
) -> None:
    """Record ``upto`` as the watermark of ``table`` in ``destination`` (in the caller's transaction)."""
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (destination, table_key, commit_lsn, seq) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (destination, table_key)"  # the lineage stays as it is
            " DO UPDATE SET commit_lsn = EXCLUDED.commit_lsn, seq = EXCLUDED.seq"
        ).format(watermarks_table(control_schema)),
        (destination, str(table), upto[0], upto[1]),
    )


def read_identity(
    conn: psycopg.Connection[Any], control_schema: str, destination: str, table: TableRef
) -> tuple[str | None, int | None] | None:
    """The (lineage, OID) the watermark row of ``table`` in ``destination`` records, None when
    it has no row."""
    row = conn.execute(
        sql.SQL("SELECT lineage, relid FROM {} WHERE destination = %s AND table_key = %s").format(
            watermarks_table(control_schema)
        ),
        (destination, str(table)),
    ).fetchone()
    if row is None:
        return None
    return (None if row[0] is None else str(row[0])), (None if row[1] is None else int(row[1]))


def write_identity(
    conn: psycopg.Connection[Any], control_schema: str, destination: str, table: TableRef, relid: int
) -> None:
    """Record ``relid`` as the OID of ``table`` in ``destination`` (a row with no watermark yet
    when it has none)."""
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (destination, table_key, relid) VALUES (%s, %s, %s)"
            " ON CONFLICT (destination, table_key) DO UPDATE SET relid = EXCLUDED.relid"
        ).format(watermarks_table(control_schema)),
        (destination, str(table), relid),
    )
