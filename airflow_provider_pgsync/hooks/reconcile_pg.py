"""The PostgreSQL sides of a reconciliation: the source in one snapshot, a replica in one
REPEATABLE READ transaction together with its watermark; row digests computed by the server.

Each value's text is its type's output text (``typemap.spark.output_text``) under the text
output settings capture uses (``TEXT_OUTPUT``: UTC, ISO dates, exact floats, hex bytea), so the
source and a replica give the same text for the same value, and the changelog's key texts
(the keys left out) are the same text too. The row text is ``reconcile.canonical``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.hooks.catalog import table_columns
from airflow_provider_pgsync.hooks.snapshot import parse_snapshot
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.reconcile.canonical import HASH_HEX, NULL_TEXT
from airflow_provider_pgsync.reconcile.compare import Aggregate, RowDigest
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.sessions import hold_open, set_statement_timeout
from airflow_provider_pgsync.source.text_output import TEXT_OUTPUT
from airflow_provider_pgsync.typemap.pgtypes import PgType
from airflow_provider_pgsync.typemap.spark import output_text


@dataclass(frozen=True)
class SourceSnapshot:
    """The snapshot the source is read in: ``pg_current_snapshot()``'s parts and the WAL
    insert position when it was taken (every transaction it saw committed before that)."""

    snapshot: str
    xmin: int
    xmax: int
    xip: tuple[int, ...]
    lsn: LSN


def open_source_snapshot(conn: psycopg.Connection[Any], tables: Sequence[TableRef]) -> SourceSnapshot:
    """Start the REPEATABLE READ, read-only transaction every source read of a reconciliation
    runs in (on ``conn``, autocommit until now) and describe its snapshot. The tables are locked
    in ACCESS SHARE mode first, as a baseline does: a rewrite (TRUNCATE, VACUUM FULL) is not
    MVCC-safe and would show the snapshot an empty table."""
    hold_open(conn)
    set_statement_timeout(conn, 0)
    conn.autocommit = False
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.read_only = True
    for statement in TEXT_OUTPUT:
        conn.execute(statement)
    if tables:
        try:
            conn.execute(
                sql.SQL("LOCK TABLE {} IN ACCESS SHARE MODE").format(
                    sql.SQL(", ").join(t.identifier for t in tables)
                )
            )
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName) as exc:
            raise ConfigError(
                f"a table to reconcile does not exist in the source: {exc.diag.message_primary}"
            ) from None
    row = conn.execute(
        "SELECT pg_export_snapshot(), pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text"
    ).fetchone()
    assert row is not None
    xmin, xmax, xip = parse_snapshot(row[1])
    return SourceSnapshot(snapshot=row[0], xmin=xmin, xmax=xmax, xip=xip, lsn=LSN.parse(row[2]))


def open_replica(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """``conn`` (autocommit) made fit for long reads: no idle or statement timeout."""
    hold_open(conn)
    set_statement_timeout(conn, 0)
    return conn


def begin_replica_read(conn: psycopg.Connection[Any]) -> None:
    """Start the REPEATABLE READ, read-only transaction a replica's watermark and rows are read
    in together (``conn`` from ``open_replica``, out of any transaction); ``rollback`` ends it."""
    conn.autocommit = False
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.read_only = True
    for statement in TEXT_OUTPUT:
        conn.execute(statement)


def replica_watermark(
    conn: psycopg.Connection[Any], control_schema: str, destination: str, table: TableRef
) -> tuple[int, int] | None:
    """The replica's watermark of ``table`` (None: nothing applied since its baseline, or no row)."""
    row = conn.execute(
        sql.SQL(
            "SELECT commit_lsn, seq FROM {}.watermarks WHERE destination = %s AND table_key = %s"
        ).format(sql.Identifier(control_schema)),
        (destination, str(table)),
    ).fetchone()
    return None if row is None or row[0] is None else (int(row[0]), int(row[1]))


def _value(name: str, pgtype: PgType) -> sql.Composed:
    text = sql.SQL(output_text("{col}", pgtype)).format(col=sql.Identifier(name))
    return sql.SQL(
        "CASE WHEN {col} IS NULL THEN {null} ELSE length({t})::text || ':' || {t} END"
    ).format(col=sql.Identifier(name), null=sql.Literal(NULL_TEXT), t=text)


def _row(columns: Sequence[tuple[str, PgType]]) -> sql.Composable:
    if not columns:
        return sql.Literal("")
    return sql.SQL(" || ',' || ").join(_value(n, t) for n, t in columns)


class PgSide:
    """One PostgreSQL side of a table (``reconcile.compare.Side``) on ``conn``, in its open
    transaction: the columns ``names`` (as the pipeline's state lists them), identified by
    ``keys`` (every column for a table without a key), leaving out the key texts ``left_out``."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        table: TableRef,
        names: Sequence[str],
        keys: Sequence[str],
        left_out: Sequence[str],
        *,
        where: str,
    ) -> None:
        typed = dict(table_columns(conn, table))
        absent = [n for n in names if n not in typed]
        if absent:
            raise ConfigError(
                f"table {table} in {where} has no column(s) {', '.join(map(repr, absent))}: it is not "
                "the table apply writes; rebaseline the table there"
            )
        columns = [(n, typed[n]) for n in names]
        key_columns = [(n, typed[n]) for n in keys]
        self._conn = conn
        self._left_out = list(left_out)
        # NOT IN over a subquery: a hashed lookup per row, however many keys are left out
        self._digests = sql.SQL(
            "SELECT kt, md5(kt) AS kh, md5(rt) AS rh FROM (SELECT {kt} AS kt, {rt} AS rt FROM {table}) r"
            " WHERE kt NOT IN (SELECT unnest(%(left_out)s::text[]))"
        ).format(kt=_row(key_columns), rt=_row(columns), table=table.identifier)

    def aggregates(self, length: int, within: Sequence[str] | None) -> dict[str, Aggregate]:
        query = sql.SQL(
            "SELECT left(kh, {length}), count(*), sum(('x' || left(rh, {hexes}))::bit({bits})::int8)"
            " FROM ({digests}) d {where} GROUP BY 1"
        ).format(
            length=sql.Literal(length),
            hexes=sql.Literal(HASH_HEX),
            bits=sql.Literal(HASH_HEX * 4),
            digests=self._digests,
            where=sql.SQL("WHERE left(kh, %(prefix)s) = ANY(%(within)s::text[])")
            if within
            else sql.SQL(""),
        )
        params = {
            "left_out": self._left_out,
            "within": list(within or []),
            "prefix": len(within[0]) if within else 0,
        }
        rows = self._conn.execute(query, params).fetchall()
        return {r[0]: Aggregate(int(r[1]), int(r[2])) for r in rows}

    def rows(self, length: int, buckets: Sequence[str]) -> list[RowDigest]:
        query = sql.SQL(
            "SELECT kt, rh FROM ({digests}) d WHERE left(kh, {length}) = ANY(%(buckets)s::text[])"
        ).format(digests=self._digests, length=sql.Literal(length))
        rows = self._conn.execute(
            query, {"left_out": self._left_out, "buckets": list(buckets)}
        ).fetchall()
        return [RowDigest(r[0], r[1]) for r in rows]
