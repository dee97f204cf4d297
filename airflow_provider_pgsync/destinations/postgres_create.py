"""Creating a replica's table: the source's column types and its generated columns.

Generated columns (``GENERATED ALWAYS AS (expression) STORED``) are not sent by pgoutput, so
changes never carry them: the replica's table has them as generated columns with the source's
expression (``pg_get_expr`` of the source's default), each after the column it follows in the
source, and computes them itself; the baseline's ``COPY`` and apply name only the other
columns. A generated column whose expression reads a column the pipeline does not replicate
(a publication's column list) is left out, and so is one the replica cannot make (its
expression calls a function the replica lacks), each with a WARNING. A generated column added
to the source later is in no change either: ``open_table`` adds it to the replica's table (at
its end) once the replica has the columns it reads. A column dropped in the replica takes the
generated columns reading it along, as the source's ``DROP COLUMN ... CASCADE`` did.

A function of a ``PostgresDestination`` (its connection, types and source catalog).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from airflow_provider_pgsync.apply.net import is_keyed
from airflow_provider_pgsync.destinations.pg_ddl_lock import lock_ddl
from airflow_provider_pgsync.destinations.pg_typedefs import GeneratedColumn, place_generated
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo

if TYPE_CHECKING:
    from airflow_provider_pgsync.destinations.postgres import PostgresDestination

log = logging.getLogger(__name__)


def create_table(
    destination: PostgresDestination,
    table: TableRef,
    target: TableRef,
    columns: Sequence[ColumnInfo],
    extra: Sequence[sql.Composable] = (),
    *,
    if_not_exists: bool = False,
) -> None:
    """Create ``target`` (``table`` or its staging table) with ``columns`` in the source's
    types, the source's generated columns of ``table`` among them, and ``extra`` items (a key),
    in one transaction (a savepoint of the caller's, if any)."""
    conn = destination._conn
    items: list[sql.Composable] = []
    plain: list[sql.Composable] = []
    generated: list[str] = []
    for column in placed(destination, table, columns):  # types made before the transaction
        if isinstance(column, GeneratedColumn):
            type_sql = destination._types.column_type(
                table, column.name, column.type_oid, column.type_modifier
            )
            items.append(
                sql.SQL("{} {} GENERATED ALWAYS AS ({}) STORED").format(
                    sql.Identifier(column.name), sql.SQL(type_sql), sql.SQL(column.expression)
                )
            )
            generated.append(column.name)
        else:
            item = sql.SQL("{} {}").format(
                sql.Identifier(column.name), sql.SQL(destination.new_type(table, column))
            )
            items.append(item)
            plain.append(item)
    create = sql.SQL("CREATE TABLE {}{} ({}) WITH (fillfactor = {})")
    if_missing = sql.SQL(" IF NOT EXISTS") if if_not_exists else sql.SQL("")
    # a table without a key never has a row updated in place (apply deletes old rows and copies
    # new ones in): room left on its pages would stay empty, so it is packed
    fillfactor = sql.Literal(destination.fillfactor if is_keyed(columns) else 100)
    with conn.transaction():
        lock_ddl(conn)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(target.schema)))
        try:
            with conn.transaction():
                conn.execute(
                    create.format(
                        if_missing, target.identifier, sql.SQL(", ").join([*items, *extra]), fillfactor
                    )
                )
        except psycopg.Error as exc:
            if not generated:
                raise
            log.warning(
                "destination %s: table %s is created without its generated column(s) %s: %s; create "
                "what their expressions use in the destination database and rebaseline the table",
                destination.name,
                table,
                ", ".join(generated),
                exc.diag.message_primary or exc,
            )
            conn.execute(
                create.format(if_missing, target.identifier, sql.SQL(", ").join([*plain, *extra]), fillfactor)
            )


def placed(
    destination: PostgresDestination, table: TableRef, columns: Sequence[ColumnInfo]
) -> list[ColumnInfo | GeneratedColumn]:
    """``columns`` with the source's generated columns of ``table`` in their places (none
    without a source catalog)."""
    if destination._source is None:
        return list(columns)
    by_name = {c.name: c for c in columns}
    order, left_out = place_generated([c.name for c in columns], destination._source.columns(table))
    for column in left_out:
        log.warning(
            "destination %s: generated column %s of table %s is left out: its expression uses "
            "columns the pipeline does not replicate (%s)",
            destination.name,
            column.name,
            table,
            ", ".join(column.uses),
        )
    return [by_name[c] if isinstance(c, str) else c for c in order]


def drop_generated_using(destination: PostgresDestination, table: TableRef, column: str) -> None:
    """Drop the generated columns of the replica's ``table`` whose expression reads ``column``
    (which is about to be dropped: the source's ``DROP COLUMN ... CASCADE`` dropped them)."""
    rows = destination._conn.execute(
        "SELECT g.attname::text FROM pg_attrdef d"
        " JOIN pg_attribute g ON g.attrelid = d.adrelid AND g.attnum = d.adnum AND g.attgenerated = 's'"
        " JOIN pg_depend p ON p.classid = 'pg_attrdef'::regclass AND p.objid = d.oid"
        " AND p.refclassid = 'pg_class'::regclass AND p.refobjid = d.adrelid"
        " JOIN pg_attribute r ON r.attrelid = p.refobjid AND r.attnum = p.refobjsubid"
        " WHERE d.adrelid = to_regclass(%s) AND r.attname = %s AND r.attnum <> g.attnum",
        (table.identifier.as_string(destination._conn), column),
    ).fetchall()
    for (name,) in rows:
        destination._conn.execute(
            sql.SQL("ALTER TABLE {} DROP COLUMN IF EXISTS {}").format(table.identifier, sql.Identifier(name))
        )
        log.info(
            "destination %s: generated column %s of %s dropped with the column %s it reads",
            destination.name,
            name,
            table,
            column,
        )


def add_new_generated(destination: PostgresDestination, table: TableRef) -> None:
    """Add to the replica's existing ``table`` the source's generated columns it lacks whose
    expression reads only columns it has: a generated column added to the source later is in
    no change (pgoutput leaves it out), so it is looked up here, at the end of the table."""
    if destination._source is None:
        return
    conn = destination._conn
    have = {
        str(r[0])
        for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0"
            " AND NOT attisdropped",
            (table.identifier.as_string(conn),),
        ).fetchall()
    }
    for _, column in destination._source.columns(table):
        if column is None or column.name in have or not set(column.uses) <= have:
            continue
        type_sql = destination._types.column_type(table, column.name, column.type_oid, column.type_modifier)
        try:
            with conn.transaction():
                conn.execute(
                    sql.SQL("ALTER TABLE {} ADD COLUMN {} {} GENERATED ALWAYS AS ({}) STORED").format(
                        table.identifier,
                        sql.Identifier(column.name),
                        sql.SQL(type_sql),
                        sql.SQL(column.expression),
                    )
                )
        except psycopg.Error as exc:
            log.warning(
                "destination %s: the source's new generated column %s of table %s could not be added: %s; "
                "create what its expression uses in the destination database",
                destination.name,
                column.name,
                table,
                exc.diag.message_primary or exc,
            )
            continue
        log.info(
            "destination %s: generated column %s added to %s as in the source",
            destination.name,
            column.name,
            table,
        )
