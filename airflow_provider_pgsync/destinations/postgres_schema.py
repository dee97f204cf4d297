"""Following a source table's column changes in a PostgreSQL replica, exactly or not at all."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import sql

from airflow_provider_pgsync.apply.destination import SchemaAnswer
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo
from airflow_provider_pgsync.state.schema_diff import SchemaDiff

log = logging.getLogger(__name__)


def change_replica_schema(
    conn: psycopg.Connection[Any],
    table: TableRef,
    diff: SchemaDiff,
    *,
    type_of: Callable[[ColumnInfo], str],
    before_drop: Callable[[str], None] = lambda name: None,
) -> SchemaAnswer:
    """Apply ``diff`` to the replica's ``table`` in one transaction, or answer Rebaseline.

    Exact in place: renames (values kept), drops, additions (older rows get the value the
    source gives them: the column's missing value, else NULL) and widening type changes
    without USING (int to bigint, a longer varchar, varchar to text). Rebaseline: unknown column
    identities, a key change, and rows the source rewrote without WAL (a volatile default, a
    type change with USING or a narrowing one). ``type_of`` gives a column's type in the
    replica (making the source's type there first, outside the transaction: a label added to
    an enum is usable once committed); ``before_drop`` runs before a column is dropped.
    """
    why = diff.unproven or diff.rows_rewritten
    if not why and diff.key_changed:
        why = "the replica identity key changed"
    if not why and not diff.widenings_only:
        why = "a column's type changed in a way that may change its values"
    if why:
        log.warning("replica table %s goes back to baseline: %s (%s)", table, diff.describe(), why)
        return SchemaAnswer.REBASELINE
    have = _column_names(conn, table)
    if have == {c.name for c in diff.new} and have != {c.name for c in diff.old}:
        log.info("replica table %s has the new columns already: %s", table, diff.describe())
        return SchemaAnswer.CONTINUE  # done by an earlier run whose next batch failed
    alter = sql.SQL("ALTER TABLE {} ").format(table.identifier)
    types = {c.attnum: sql.SQL(type_of(c)) for c in [*diff.added, *(new for _, new in diff.retyped)]}
    with conn.transaction():
        for column in diff.dropped:
            before_drop(column.name)
            conn.execute(alter + sql.SQL("DROP COLUMN IF EXISTS {}").format(sql.Identifier(column.name)))
        # through temporary names, so that swapped names (a <-> b) never collide
        rename = sql.SQL("RENAME COLUMN {} TO {}")
        for old, _ in diff.renamed:
            temporary = sql.Identifier(f"pgsync_rename_{old.attnum}")
            conn.execute(alter + rename.format(sql.Identifier(old.name), temporary))
        for old, new in diff.renamed:
            temporary = sql.Identifier(f"pgsync_rename_{old.attnum}")
            conn.execute(alter + rename.format(temporary, sql.Identifier(new.name)))
        for _, new in diff.retyped:
            conn.execute(
                alter
                + sql.SQL("ALTER COLUMN {} TYPE {}").format(sql.Identifier(new.name), types[new.attnum])
            )
        for column in diff.added:
            name, kind = sql.Identifier(column.name), types[column.attnum]
            if column.missing is None:
                conn.execute(alter + sql.SQL("ADD COLUMN {} {}").format(name, kind))
                continue
            # a constant default fills the rows there (no rewrite), then goes: the source's
            # default is the source's business, the replica only keeps its values
            fill = sql.SQL("{}::{}").format(sql.Literal(column.missing), kind)
            conn.execute(alter + sql.SQL("ADD COLUMN {} {} DEFAULT {}").format(name, kind, fill))
            conn.execute(alter + sql.SQL("ALTER COLUMN {} DROP DEFAULT").format(name))
    log.info("replica table %s follows the source: %s", table, diff.describe())
    return SchemaAnswer.CONTINUE


def follow_by_name(
    conn: psycopg.Connection[Any],
    table: TableRef,
    old: Sequence[ColumnInfo],
    new: Sequence[ColumnInfo],
    *,
    type_of: Callable[[ColumnInfo], str],
    before_drop: Callable[[str], None] = lambda name: None,
) -> SchemaAnswer:
    """Without column identities: added columns are added (with the source's type), dropped
    ones dropped (Continue); a changed type or key needs the table rebaselined. ``type_of`` and
    ``before_drop`` as for ``change_replica_schema``."""
    before = {c.name: c for c in old}
    after = {c.name: c for c in new}
    for name in before.keys() & after.keys():
        a, b = before[name], after[name]
        if (a.type_oid, a.type_modifier, a.is_key) != (b.type_oid, b.type_modifier, b.is_key):
            return SchemaAnswer.REBASELINE
    if [c.name for c in old if c.is_key] != [c.name for c in new if c.is_key]:
        return SchemaAnswer.REBASELINE
    # types made before the transaction: a label added to an enum is usable once committed
    added = [(c, type_of(c)) for c in new if c.name not in before]
    with conn.transaction():
        for column, type_sql in added:
            conn.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
                    table.identifier, sql.Identifier(column.name), sql.SQL(type_sql)
                )
            )
        for column in old:
            if column.name not in after:
                # the source dropped the generated columns reading it too (DROP ... CASCADE)
                before_drop(column.name)
                conn.execute(
                    sql.SQL("ALTER TABLE {} DROP COLUMN IF EXISTS {}").format(
                        table.identifier, sql.Identifier(column.name)
                    )
                )
    return SchemaAnswer.CONTINUE


def _column_names(conn: psycopg.Connection[Any], table: TableRef) -> set[str]:
    """The replica table's columns, generated ones left out (changes never carry them)."""
    rows = conn.execute(
        "SELECT attname::text FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass(%s)"
        " AND attnum > 0 AND NOT attisdropped AND attgenerated = ''",
        (table.identifier.as_string(conn),),
    ).fetchall()
    return {str(r[0]) for r in rows}
