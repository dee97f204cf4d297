"""The rows of a key list as PostgreSQL text, read in a backfill's exported snapshot.

One ``COPY (SELECT ...) TO STDOUT`` on the connection holding the snapshot, with capture's
text settings (``TEXT_OUTPUT``), so every value is the very text pgoutput sends for a change
(as ``baseline_rows.py`` reads a baseline). The keys travel as ``psycopg.sql`` literals (text
arrays; COPY takes no parameters) and are parsed by the server as the key columns' types:
each key is looked up with the key's equality (``unnest`` of the arrays, ``LEFT JOIN LATERAL``
the table at that key, under the publication's row filter), so a key whose row the snapshot
does not hold, or whose row the row filter leaves out, comes back as absent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from airflow_provider_pgsync.baseline.plan import condition_sql, row_filter
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.hooks.catalog import relation_oid
from airflow_provider_pgsync.source.key_list import KeyList
from airflow_provider_pgsync.source.publication import PublishedTable
from airflow_provider_pgsync.source.text_output import TEXT_OUTPUT
from airflow_provider_pgsync.state.model import ColumnInfo


def key_rows(
    conn: psycopg.Connection[Any], table: PublishedTable, columns: Sequence[ColumnInfo], keys: KeyList
) -> tuple[pa.Table, pa.Table]:
    """``(rows, absent)`` in ``conn``'s open transaction: the rows of ``keys`` (one string column
    per ``columns``, each row once) and the keys without a row (string key columns, as the
    key's type writes them). When the keys are whole rows (a table whose identity is the row),
    ``rows`` holds each one as many times as the snapshot does (``multiset_rows``). ConfigError
    when a value is not text of its column's type."""
    if conn.autocommit:
        raise RuntimeError("key_rows reads inside the backfill's snapshot transaction")
    names = [c.name for c in columns]
    whole = sorted(keys.columns) == sorted(names)
    # the exact type for a whole row (numeric(6,2) makes '1.5' the 1.50 it holds); a key's type
    # without its modifier (a cast to varchar(5) or numeric(6,2) would cut or round a value
    # given, and find another row)
    types = _column_types(conn, table, keys.columns, modifiers=whole)
    width = len(keys.columns)
    given = [
        sql.SQL("u.{}::{}").format(sql.Identifier(f"c{i}"), sql.SQL(types[k]))
        for i, k in enumerate(keys.columns)
    ]
    arrays = sql.SQL("unnest({}) AS u({})").format(
        sql.SQL(", ").join(sql.SQL("{}::text[]").format(sql.Literal(keys.column(i))) for i in range(width)),
        sql.SQL(", ").join(sql.Identifier(f"c{i}") for i in range(width)),
    )
    published = row_filter(table)
    kept = [sql.SQL("({})").format(condition_sql(published))] if published is not None else []
    if whole:
        query = _multiset_query(table, keys, given, arrays, kept)
    else:
        match = [sql.SQL("t.{} = {}").format(sql.Identifier(k), given[i]) for i, k in enumerate(keys.columns)]
        query = sql.SQL(
            "COPY (SELECT {given}, {found} FROM {arrays}"
            " LEFT JOIN LATERAL (SELECT {columns} FROM {table} AS t WHERE {match}) AS f ON true) TO STDOUT"
        ).format(
            given=sql.SQL(", ").join(given),  # as the key's type writes it: the text a change carries
            found=sql.SQL(", ").join(sql.SQL("f.{}").format(sql.Identifier(n)) for n in names),
            arrays=arrays,
            columns=sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(n)) for n in names),
            table=table.table.identifier,
            match=sql.SQL(" AND ").join(match + kept),
        )
    for statement in TEXT_OUTPUT:
        conn.execute(statement)
    at = [names.index(k) for k in keys.columns]
    present: dict[tuple[str | None, ...], list[tuple[str | None, ...]]] = {}
    absent: dict[tuple[str | None, ...], None] = {}
    try:
        with conn.transaction(), conn.cursor() as cursor, cursor.copy(query) as copy:
            copy.set_types(["text"] * (width + (1 if whole else len(names))))
            for row in copy.rows():
                requested, found = tuple(row[:width]), tuple(row[width:])
                if whole:  # the row, and how many times the snapshot holds it
                    count = int(found[0])
                    if count:
                        present.setdefault(
                            requested, [tuple(requested[keys.columns.index(n)] for n in names)] * count
                        )
                    else:
                        absent[requested] = None
                elif found[at[0]] is None:  # a key column is never NULL in a row found
                    absent[requested] = None
                else:
                    present.setdefault(tuple(found[i] for i in at), [found])
    except (psycopg.DataError, psycopg.errors.UndefinedFunction) as exc:
        problem = exc.diag.message_primary or str(exc).splitlines()[0]
        raise ConfigError(
            f"backfill_keys of table {table.table}: a value is not text of its column's type "
            f"({problem}); give each value as PostgreSQL writes it, e.g. '17' for an integer"
        ) from None
    found_rows = [r for copies in present.values() for r in copies]
    rows = pa.table({n: pa.array([r[i] for r in found_rows], pa.string()) for i, n in enumerate(names)})
    missing = pa.table({k: pa.array([r[i] for r in absent], pa.string()) for i, k in enumerate(keys.columns)})
    return rows, missing


def _multiset_query(
    table: PublishedTable,
    keys: KeyList,
    given: Sequence[sql.Composable],
    arrays: sql.Composable,
    kept: Sequence[sql.Composable],
) -> sql.Composed:
    """Each given whole row (as its types write it) and how many equal rows the table holds.
    Rows are equal as the PostgreSQL destination compares rows without a key: column by column
    by their text (NULL only equal to NULL; types without an equality operator, e.g. json, too),
    here as the text of a row of texts, so one hash join over one scan of the table counts them."""
    row_text = sql.SQL("ROW({})::text").format(
        sql.SQL(", ").join(sql.SQL("t.{}::text").format(sql.Identifier(k)) for k in keys.columns)
    )
    given_text = sql.SQL("ROW({})::text").format(
        sql.SQL(", ").join(sql.SQL("({})::text").format(g) for g in given)
    )
    return sql.SQL(
        "COPY (WITH g AS (SELECT {given}, {given_text} AS r FROM {arrays}),"
        " n AS (SELECT {row_text} AS r, count(*) AS c FROM {table} AS t"
        " WHERE {row_text} IN (SELECT r FROM g){kept} GROUP BY 1)"
        " SELECT {columns}, coalesce(n.c, 0) FROM g LEFT JOIN n ON n.r = g.r) TO STDOUT"
    ).format(
        given=sql.SQL(", ").join(
            sql.SQL("{} AS {}").format(v, sql.Identifier(f"g{i}")) for i, v in enumerate(given)
        ),
        given_text=given_text,
        arrays=arrays,
        row_text=row_text,
        table=table.table.identifier,
        kept=sql.SQL("").join(sql.SQL(" AND ") + k for k in kept),
        columns=sql.SQL(", ").join(
            sql.SQL("g.{}").format(sql.Identifier(f"g{i}")) for i in range(len(given))
        ),
    )


def _column_types(
    conn: psycopg.Connection[Any], table: PublishedTable, names: Sequence[str], *, modifiers: bool
) -> dict[str, str]:
    """Each column's type, with its modifier or without."""
    found = conn.execute(
        "SELECT attname::text, format_type(atttypid, CASE WHEN %s THEN atttypmod END) FROM pg_attribute"
        " WHERE attrelid = %s AND attname = ANY(%s) AND NOT attisdropped",
        (modifiers, relation_oid(conn, table.table), list(names)),
    ).fetchall()
    return {str(r[0]): str(r[1]) for r in found}
