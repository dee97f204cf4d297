"""The PostgreSQL destination's baseline: a staging table filled by the Spark job, swapped in.

``prepare_baseline`` creates an empty staging table in the destination's control schema,
named after the baseline's lineage, with the source's column types and generated columns
(``postgres_create.py``) and no key (rows
load fastest into a bare heap). The baseline's Spark tasks copy their ctid ranges into it
(``baseline/pg_copy.py``), each recording its partition in ``<control schema>.baseline_parts``
in the same transaction as its rows, so a retried task finds its partition done instead of
copying it twice. ``finish_baseline`` then adds the primary key, analyzes the table and, in
one transaction, drops the table it replaces, moves the staging table into place, gives it the
guard trigger (``postgres_guard.py``) and resets the table's watermark row ("no change applied
yet", recording the lineage and the table's OID): a reader sees the old table or the new one.
``discard_baseline`` drops what a failed job left.

Functions of a ``PostgresDestination`` (its connection and types); its methods of the same
names call them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from airflow_provider_pgsync.apply.net import is_keyed
from airflow_provider_pgsync.changelog.schema import key_columns
from airflow_provider_pgsync.destinations import postgres_guard
from airflow_provider_pgsync.destinations.pg_ddl_lock import lock_ddl
from airflow_provider_pgsync.errors import DestinationError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo

if TYPE_CHECKING:
    from airflow_provider_pgsync.destinations.postgres import PostgresDestination

STAGING_PREFIX = "baseline_"
PARTS_TABLE = "baseline_parts"
"""Per staging table, the partitions the Spark tasks have copied (committed with their rows)."""


def staging_name(lineage: str) -> str:
    """The staging table's name for ``lineage``: ``baseline_<lineage folded to [a-z0-9_]>``,
    with a hash of the lineage instead when that would be long (names stay within 63 bytes
    with room for a ``_pkey`` suffix)."""
    folded = re.sub(r"[^a-z0-9]+", "_", lineage.lower()).strip("_")
    if not folded or len(folded) > 40 or folded != lineage.lower().replace("-", "_"):
        folded = f"{folded[:24]}_{hashlib.sha256(lineage.encode()).hexdigest()[:12]}".lstrip("_")
    return STAGING_PREFIX + folded


def parts_table(destination: PostgresDestination) -> str:
    """``<control schema>.baseline_parts`` as SQL text (what the Spark job is given)."""
    return str(TableRef(destination.control_schema, PARTS_TABLE))


def ensure_parts_table(conn: psycopg.Connection[tuple[object, ...]], control_schema: str) -> None:
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (staging text, part integer, rows bigint NOT NULL,"
            " PRIMARY KEY (staging, part))"
        ).format(sql.Identifier(control_schema, PARTS_TABLE))
    )


def prepare_baseline(
    destination: PostgresDestination, table: TableRef, columns: Sequence[ColumnInfo], lineage: str
) -> str:
    """Create the empty staging table of ``lineage`` (dropping one an earlier attempt left, and
    staging tables of earlier failed baselines of ``table``); its qualified name as SQL text."""
    conn = destination._conn
    staging = TableRef(destination.control_schema, staging_name(lineage))
    with conn.transaction():
        for stale in _staging_tables(destination, table) | {str(staging)}:
            _drop(destination, TableRef.parse(stale))
        # the source's types and generated columns (destinations/postgres_create.py)
        destination.create_table(table, staging, columns)
        conn.execute(
            sql.SQL("COMMENT ON TABLE {} IS {}").format(staging.identifier, sql.Literal(_comment(table)))
        )
    return str(staging)


def finish_baseline(
    destination: PostgresDestination,
    table: TableRef,
    staging: str,
    lineage: str,
    columns: Sequence[ColumnInfo],
) -> None:
    """Key and analyze the filled staging table, then make it ``table`` in one transaction with
    the table's watermark reset to "no change applied yet" of ``lineage``."""
    conn = destination._conn
    staged = TableRef.parse(staging)
    pkey = _pkey_name(staged.name)
    try:
        # one transaction: the key's index is built and the statistics gathered before the
        # replaced table is locked (by its DROP), and a failure leaves everything as it was
        with conn.transaction():
            if is_keyed(columns):
                conn.execute(
                    sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY ({})").format(
                        staged.identifier,
                        sql.Identifier(pkey),
                        sql.SQL(", ").join(map(sql.Identifier, key_columns(columns))),
                    )
                )
            conn.execute(sql.SQL("ANALYZE {}").format(staged.identifier))
            lock_ddl(conn)
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(table.schema)))
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table.identifier))
            conn.execute(
                sql.SQL("ALTER TABLE {} SET SCHEMA {}").format(
                    staged.identifier, sql.Identifier(table.schema)
                )
            )
            moved = TableRef(table.schema, staged.name)
            conn.execute(
                sql.SQL("ALTER TABLE {} RENAME TO {}").format(moved.identifier, sql.Identifier(table.name))
            )
            if is_keyed(columns):
                conn.execute(
                    sql.SQL("ALTER TABLE {} RENAME CONSTRAINT {} TO {}").format(
                        table.identifier,
                        sql.Identifier(pkey),
                        sql.Identifier(_free_pkey_name(destination, table)),
                    )
                )
            conn.execute(sql.SQL("COMMENT ON TABLE {} IS NULL").format(table.identifier))
            # the table's identity, and the trigger that tells writes of others to it
            postgres_guard.install_trigger(conn, destination.control_schema, table)
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (destination, table_key, commit_lsn, seq, lineage, relid)"
                    " VALUES (%s, %s, NULL, NULL, %s, to_regclass(%s)) ON CONFLICT (destination, table_key)"
                    " DO UPDATE SET commit_lsn = NULL, seq = NULL, lineage = EXCLUDED.lineage,"
                    " relid = EXCLUDED.relid"
                ).format(destination._watermarks),
                (destination.name, str(table), lineage, table.identifier.as_string(conn)),
            )
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE staging = %s").format(
                    sql.Identifier(destination.control_schema, PARTS_TABLE)
                ),
                (staging,),
            )
    except psycopg.Error as exc:
        raise DestinationError(
            f"destination {destination.name}: the baseline of {table} (lineage {lineage}) could not be "
            f"swapped in from {staging}: {exc.diag.message_primary or exc}"
            + (f" ({exc.diag.message_detail})" if exc.diag.message_detail else "")
            + "; the table is as it was: fix the cause and rebaseline it"
        ) from exc


def discard_baseline(destination: PostgresDestination, staging: str) -> None:
    """Drop the staging table ``staging`` and its partition records (nothing when gone)."""
    with destination._conn.transaction():
        _drop(destination, TableRef.parse(staging))


def lineage(destination: PostgresDestination, table: TableRef) -> str | None:
    """The lineage of the base ``table`` holds in ``destination`` (None: none recorded)."""
    row = destination._conn.execute(
        sql.SQL("SELECT lineage FROM {} WHERE destination = %s AND table_key = %s").format(
            destination._watermarks
        ),
        (destination.name, str(table)),
    ).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def _drop(destination: PostgresDestination, staging: TableRef) -> None:
    destination._conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(staging.identifier))
    destination._conn.execute(
        sql.SQL("DELETE FROM {} WHERE staging = %s").format(
            sql.Identifier(destination.control_schema, PARTS_TABLE)
        ),
        (str(staging),),
    )


def _staging_tables(destination: PostgresDestination, table: TableRef) -> set[str]:
    """Staging tables for ``table`` left in the control schema (by their comment)."""
    rows = destination._conn.execute(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname LIKE %s"
        " AND obj_description(c.oid, 'pg_class') = %s",
        (destination.control_schema, STAGING_PREFIX + "%", _comment(table)),
    ).fetchall()
    return {str(TableRef(destination.control_schema, r[0])) for r in rows}


def _comment(table: TableRef) -> str:
    return f"pgsync baseline of {table}"


def _pkey_name(name: str, number: int = 0) -> str:
    """``<name>_pkey`` (``<name>_pkey<number>`` for a number) within 63 bytes, as PostgreSQL
    names a primary key it names itself."""
    suffix = f"_pkey{number or ''}"
    head = name.encode()[: 63 - len(suffix)].decode(errors="ignore")
    return f"{head}{suffix}"


def _free_pkey_name(destination: PostgresDestination, table: TableRef) -> str:
    """The first of ``<name>_pkey``, ``<name>_pkey1``, ... no relation of the table's schema has:
    two long table names cut to the same 58 bytes would otherwise claim one index name (the
    way PostgreSQL picks the name of a key it names itself)."""
    for number in range(1000):
        name = _pkey_name(table.name, number)
        taken = destination._conn.execute(
            "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = %s",
            (table.schema, name),
        ).fetchone()
        if taken is None:
            return name
    raise DestinationError(
        f"destination {destination.name}: no free name for the primary key of {table} "
        f"({_pkey_name(table.name)} to {_pkey_name(table.name, 999)} are taken); rename the table"
    )
