"""The PostgreSQL destination's backfill: staged rows (and absent keys) merged at the watermark.

A filter backfill's staging table is made the same way, empty, and filled by the backfill's
Spark job (``operators/baseline_destinations.ReplicaBackfills``).

``stage_backfill`` (called by ``PgBackfillOperator`` while it holds the snapshot) creates
``<control schema>.backfill_<id>`` with the table's columns typed as in the replica's table and
a ``_pgsync_absent`` flag, and fills it by ``COPY``: the rows the snapshot holds (flag false)
and the keys it holds no row of (flag true, only the key columns set). The server parses every
value as it parses apply's changes. ``backfill`` (called by apply) then, in one transaction
with the watermark: deletes the table's rows of the absent keys, and inserts or updates the
staged rows, both except for the keys touched since the snapshot (staged in a temporary table
typed like the table's key); ``apply/backfill.py`` says why that is exact. A table whose
identity is the whole row is a multiset: its "keys" are rows, and each staged row not touched
ends up held as many times as the snapshot holds it (0 for an absent row). ``discard_backfill``
drops the staging table once every destination took the backfill.

Functions of a ``PostgresDestination``; its methods of the same names call them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import psycopg
import pyarrow as pa
from psycopg import sql

from airflow_provider_pgsync.apply.backfill import TouchedKeys
from airflow_provider_pgsync.apply.net import is_keyed
from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.changelog.schema import key_columns
from airflow_provider_pgsync.destinations import postgres_baseline
from airflow_provider_pgsync.destinations.pg_copy_text import copy_rows
from airflow_provider_pgsync.destinations.postgres_staging import key_join, stage
from airflow_provider_pgsync.errors import DestinationError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo

if TYPE_CHECKING:
    from airflow_provider_pgsync.destinations.postgres import PostgresDestination

STAGING_PREFIX = "backfill_"
ABSENT = "_pgsync_absent"
"""The staging table's flag of a key the snapshot holds no row of (its row is deleted)."""


def staging_table(destination: PostgresDestination, backfill_id: str) -> TableRef:
    """The staging table of backfill ``backfill_id`` in the destination's control schema."""
    folded = re.sub(r"[^a-z0-9]+", "_", backfill_id.lower()).strip("_")[:50]
    return TableRef(destination.control_schema, STAGING_PREFIX + folded)


def stage_backfill(
    destination: PostgresDestination,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    backfill_id: str,
    rows: pa.Table,
    absent: pa.Table,
) -> str:
    """Create and fill the staging table of ``backfill_id`` (see the module docstring); its
    qualified name as text (the backfill's location in this destination)."""
    names = [c.name for c in columns]
    if ABSENT in names:
        raise DestinationError(
            f"destination {destination.name}: table {table} has a column named {ABSENT}, which a "
            "backfill's staging table uses; rebaseline the table instead of backfilling it"
        )
    staging = staging_table(destination, backfill_id)
    conn = destination._conn
    try:
        with conn.transaction():
            # a table has one backfill pending at most: a staging table of another one of this
            # table is stale (its backfill went with a rebaseline)
            for stale in _staging_tables(destination, table) | {staging.name}:
                conn.execute(
                    sql.SQL("DROP TABLE IF EXISTS {}").format(
                        sql.Identifier(destination.control_schema, stale)
                    )
                )
            conn.execute(
                sql.SQL("CREATE TABLE {} AS SELECT false AS {}, {} FROM {} WITH NO DATA").format(
                    staging.identifier,
                    sql.Identifier(ABSENT),
                    sql.SQL(", ").join(map(sql.Identifier, names)),
                    table.identifier,
                )
            )
            conn.execute(
                sql.SQL(
                    "ALTER TABLE {} ALTER COLUMN {} SET DEFAULT false, ALTER COLUMN {} SET NOT NULL"
                ).format(staging.identifier, sql.Identifier(ABSENT), sql.Identifier(ABSENT))
            )
            conn.execute(
                sql.SQL("COMMENT ON TABLE {} IS {}").format(
                    staging.identifier, sql.Literal(f"pgsync backfill {backfill_id} of {table}")
                )
            )
            if rows.num_rows:
                copy_rows(destination._conn, staging.identifier, names, rows.select(names))
            if absent.num_rows:
                keys = key_columns(columns)
                flagged = absent.select(keys).add_column(0, ABSENT, pa.array(["t"] * absent.num_rows))
                copy_rows(destination._conn, staging.identifier, [ABSENT, *keys], flagged)
    except psycopg.OperationalError:
        raise
    except psycopg.Error as exc:
        raise DestinationError(
            f"destination {destination.name}: staging backfill {backfill_id} of table {table} failed: "
            f"{exc.diag.message_primary or exc}; nothing was staged. Check that the table exists in "
            "the destination with the source's columns (else rebaseline it)"
        ) from exc
    return str(staging)


def backfill(
    destination: PostgresDestination,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    location: str,
    touched: TouchedKeys,
    upto: Key,
) -> int:
    """Merge the staging table at ``location`` into ``table`` with watermark ``upto`` in one
    transaction (see the module docstring); the rows written or deleted."""
    staging = _staged(destination, location)
    conn = destination._conn
    names = [c.name for c in columns]
    keys = key_columns(columns)
    others = [n for n in names if n not in keys]
    changed = 0
    with conn.transaction():
        staged_names = _columns(conn, staging)
        if staged_names is None:
            raise DestinationError(
                f"destination {destination.name}: the staged rows of a backfill of {table} ({location}) "
                "are gone; run the backfill again"
            )
        if sorted(n for n in staged_names if n != ABSENT) != sorted(names):
            raise DestinationError(
                f"destination {destination.name}: the backfill staged in {location} has columns "
                f"{', '.join(n for n in staged_names if n != ABSENT)}, table {table} now "
                f"{', '.join(names)}: the table's columns changed since; run the backfill again"
            )
        if not touched.truncated and not is_keyed(columns):
            changed += _multiset(destination, table, names, staging, touched.keys, ABSENT in staged_names)
        elif not touched.truncated:  # after a TRUNCATE the stream holds every row there is
            newer = _newer(destination, table, keys, touched.keys)
            if ABSENT in staged_names:
                changed += conn.execute(
                    sql.SQL("DELETE FROM {} AS t USING {} AS s WHERE s.{} AND {} AND {}").format(
                        table.identifier, staging.identifier, sql.Identifier(ABSENT), key_join(keys), newer
                    )
                ).rowcount
            present = (
                sql.SQL("NOT s.{}").format(sql.Identifier(ABSENT))
                if ABSENT in staged_names
                else sql.SQL("true")
            )
            changed += conn.execute(
                sql.SQL(
                    "INSERT INTO {} ({}) SELECT {} FROM {} AS s WHERE {} AND {}"
                    " ON CONFLICT ({}) DO UPDATE SET {}"
                ).format(
                    table.identifier,
                    sql.SQL(", ").join(map(sql.Identifier, names)),
                    sql.SQL(", ").join(sql.SQL("s.{}").format(sql.Identifier(n)) for n in names),
                    staging.identifier,
                    present,
                    newer,
                    sql.SQL(", ").join(map(sql.Identifier, keys)),
                    sql.SQL(", ").join(
                        sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n)) for n in others
                    ),
                )
            ).rowcount
        destination.write_watermark(table, upto)
    return changed


def discard_backfill(destination: PostgresDestination, location: str) -> None:
    """Drop the staging table at ``location``."""
    staging = _staged(destination, location)
    with destination._conn.transaction():
        destination._conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(staging.identifier))
        # the partitions a filter backfill's Spark job recorded copying into it
        destination._conn.execute(
            sql.SQL("DELETE FROM {} WHERE staging = %s").format(
                sql.Identifier(destination.control_schema, postgres_baseline.PARTS_TABLE)
            ),
            (location,),
        )


def _staging_tables(destination: PostgresDestination, table: TableRef) -> set[str]:
    """The names of the backfill staging tables of ``table`` in the control schema."""
    found = destination._conn.execute(
        "SELECT c.relname::text, obj_description(c.oid, 'pg_class') FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'"
        " AND starts_with(c.relname::text, %s)",
        (destination.control_schema, STAGING_PREFIX),
    ).fetchall()
    return {str(name) for name, comment in found if str(comment or "").endswith(f" of {table}")}


def _staged(destination: PostgresDestination, location: str) -> TableRef:
    """The staging table ``location`` names; DestinationError unless it is one of this
    destination's (a location from the state never names another table)."""
    staging = TableRef.parse(location)
    if staging.schema != destination.control_schema or not staging.name.startswith(STAGING_PREFIX):
        raise DestinationError(
            f"destination {destination.name}: {location!r} is not a backfill staging table of its "
            f"control schema {destination.control_schema}; run the backfill again"
        )
    return staging


def _multiset(
    destination: PostgresDestination,
    table: TableRef,
    names: list[str],
    staging: TableRef,
    touched: pa.Table,
    flagged: bool,
) -> int:
    """A table whose identity is the row: each staged row (and absent row) not touched since
    the snapshot is held as many times as the snapshot holds it: the table's equal rows are
    deleted and the staged copies inserted. Rows are equal as ``postgres_keyless.py`` compares
    them (column by column by their text), here as the text of a row of texts (hash joins)."""
    conn = destination._conn

    def text(alias: str) -> sql.Composed:
        return sql.SQL("ROW({})::text").format(
            sql.SQL(", ").join(
                sql.SQL("{}.{}::text").format(sql.Identifier(alias), sql.Identifier(n)) for n in names
            )
        )

    newer: sql.Composable = sql.SQL("true")
    if touched.num_rows:
        staged = stage(destination, table, names, touched.select(names))
        newer = sql.SQL("{} NOT IN (SELECT {} FROM {} AS n)").format(text("s"), text("n"), staged)
    deleted = conn.execute(
        sql.SQL("DELETE FROM {} AS t WHERE {} IN (SELECT {} FROM {} AS s WHERE {})").format(
            table.identifier, text("t"), text("s"), staging.identifier, newer
        )
    ).rowcount
    present = sql.SQL("NOT s.{}").format(sql.Identifier(ABSENT)) if flagged else sql.SQL("true")
    inserted = conn.execute(
        sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} AS s WHERE {} AND {}").format(
            table.identifier,
            sql.SQL(", ").join(map(sql.Identifier, names)),
            sql.SQL(", ").join(sql.SQL("s.{}").format(sql.Identifier(n)) for n in names),
            staging.identifier,
            present,
            newer,
        )
    ).rowcount
    return deleted + inserted


def _columns(conn: psycopg.Connection[tuple[object, ...]], staging: TableRef) -> list[str] | None:
    """The staging table's columns; None when it does not exist."""
    found = conn.execute("SELECT to_regclass(%s)::oid", (staging.identifier.as_string(conn),)).fetchone()
    if found is None or found[0] is None:
        return None
    rows = conn.execute(
        "SELECT attname::text FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped"
        " ORDER BY attnum",
        (found[0],),
    ).fetchall()
    return [str(r[0]) for r in rows]


def _newer(
    destination: PostgresDestination, table: TableRef, keys: list[str], touched: pa.Table
) -> sql.Composable:
    """The condition on staged row ``s`` that its key was not touched since the snapshot (the
    touched keys staged in a temporary table typed like ``table``'s key)."""
    if touched.num_rows == 0:
        return sql.SQL("true")
    newer = stage(destination, table, keys, touched.select(keys))
    return sql.SQL("NOT EXISTS (SELECT FROM {} AS n WHERE {})").format(
        newer, sql.SQL(" AND ").join(sql.SQL("n.{0} = s.{0}").format(sql.Identifier(k)) for k in keys)
    )
