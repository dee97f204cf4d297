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
    per ``columns``, each row once) and the keys without a row (string key columns, as given).
    ConfigError naming the key column when a value is not text of its type."""
    if conn.autocommit:
        raise RuntimeError("key_rows reads inside the backfill's snapshot transaction")
    names = [c.name for c in columns]
    width = len(keys.columns)
    types = _key_types(conn, table, keys.columns)
    match = [
        sql.SQL("t.{} = u.{}::{}").format(sql.Identifier(k), sql.Identifier(f"c{i}"), sql.SQL(types[k]))
        for i, k in enumerate(keys.columns)
    ]
    published = row_filter(table)
    if published is not None:
        match.append(sql.SQL("({})").format(condition_sql(published)))
    query = sql.SQL(
        "COPY (SELECT {requested}, {found} FROM unnest({arrays}) AS u({aliases})"
        " LEFT JOIN LATERAL (SELECT {columns} FROM {table} AS t WHERE {match}) AS f ON true) TO STDOUT"
    ).format(
        # as the key's type writes it: the text a change of that key carries
        requested=sql.SQL(", ").join(
            sql.SQL("u.{}::{}").format(sql.Identifier(f"c{i}"), sql.SQL(types[k]))
            for i, k in enumerate(keys.columns)
        ),
        found=sql.SQL(", ").join(sql.SQL("f.{}").format(sql.Identifier(n)) for n in names),
        arrays=sql.SQL(", ").join(
            sql.SQL("{}::text[]").format(sql.Literal(keys.column(i))) for i in range(width)
        ),
        aliases=sql.SQL(", ").join(sql.Identifier(f"c{i}") for i in range(width)),
        columns=sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(n)) for n in names),
        table=table.table.identifier,
        match=sql.SQL(" AND ").join(match),
    )
    for statement in TEXT_OUTPUT:
        conn.execute(statement)
    at = [names.index(k) for k in keys.columns]
    present: dict[tuple[str | None, ...], tuple[str | None, ...]] = {}
    absent: list[tuple[str | None, ...]] = []
    try:
        with conn.transaction(), conn.cursor() as cursor, cursor.copy(query) as copy:
            copy.set_types(["text"] * (width + len(names)))
            for row in copy.rows():
                requested, values = row[:width], row[width:]
                if values[at[0]] is None:  # a key column is never NULL in a row found
                    absent.append(requested)
                else:
                    present.setdefault(tuple(values[i] for i in at), values)
    except (psycopg.DataError, psycopg.errors.UndefinedFunction) as exc:
        problem = exc.diag.message_primary or str(exc).splitlines()[0]
        raise ConfigError(
            f"backfill_keys of table {table.table}: a value is not text of its key column's type "
            f"({problem}); give each value as PostgreSQL writes it, e.g. '17' for an integer"
        ) from None
    rows = pa.table({n: pa.array([r[i] for r in present.values()], pa.string()) for i, n in enumerate(names)})
    missing = pa.table({k: pa.array([r[i] for r in absent], pa.string()) for i, k in enumerate(keys.columns)})
    return rows, missing


def _key_types(conn: psycopg.Connection[Any], table: PublishedTable, names: Sequence[str]) -> dict[str, str]:
    """Each key column's type without its modifier (a cast to ``varchar(5)`` or ``numeric(6,2)``
    would cut or round a value given, and find another row)."""
    found = conn.execute(
        "SELECT attname::text, format_type(atttypid, NULL) FROM pg_attribute"
        " WHERE attrelid = %s AND attname = ANY(%s) AND NOT attisdropped",
        (relation_oid(conn, table.table), list(names)),
    ).fetchall()
    return {str(r[0]): str(r[1]) for r in found}
