"""A baseline's rows as PostgreSQL text, read in the baseline's own snapshot transaction, for
destinations that take their baseline through the protocol (``Destination.load_baseline``).

The rows come from ``COPY (SELECT <published columns> FROM <table> WHERE <row filter>) TO
STDOUT`` in text format on the connection that holds the exported snapshot, with the text
settings capture's peek uses (``TEXT_OUTPUT``): every value is its type's output function
under UTC, ISO dates, postgres intervals, exact floats and hex bytea, i.e. the very text
pgoutput sends for a change (a ``::text`` cast would differ: ``true`` for ``t``, ``char(n)``
without its padding). psycopg parses the COPY stream (escapes, ``\\N``) with every column
loaded as text; rows are handed on in batches of ``chunk_rows``, so memory stays bounded.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from airflow_provider_pgsync.baseline.plan import where_clause
from airflow_provider_pgsync.source.publication import PublishedTable
from airflow_provider_pgsync.source.text_output import TEXT_OUTPUT
from airflow_provider_pgsync.state.model import ColumnInfo

CHUNK_ROWS = 50_000


def text_query(table: PublishedTable, columns: Sequence[ColumnInfo]) -> sql.Composed:
    """The ``SELECT`` of the table's published ``columns`` and rows (its row filter)."""
    names = sql.SQL(", ").join(sql.Identifier(c.name) for c in columns)
    return sql.SQL("SELECT {} FROM {}{}").format(names, table.table.identifier, where_clause(table))


def text_batches(
    conn: psycopg.Connection[Any],
    table: PublishedTable,
    columns: Sequence[ColumnInfo],
    *,
    chunk_rows: int = CHUNK_ROWS,
) -> Generator[pa.RecordBatch, None, None]:
    """The table's rows in ``conn``'s open transaction (the baseline's snapshot) as record
    batches of string columns named after ``columns``, at most ``chunk_rows`` rows each."""
    if conn.autocommit:
        raise RuntimeError("text_batches reads inside the baseline's snapshot transaction")
    for statement in TEXT_OUTPUT:
        conn.execute(statement)
    schema = pa.schema([pa.field(c.name, pa.string()) for c in columns])
    query = sql.SQL("COPY ({}) TO STDOUT").format(text_query(table, columns))
    with conn.cursor() as cursor, cursor.copy(query) as copy:
        copy.set_types(["text"] * len(columns))
        chunk: list[tuple[Any, ...]] = []
        for row in copy.rows():
            chunk.append(row)
            if len(chunk) >= chunk_rows:
                yield _batch(schema, chunk)
                chunk = []
        if chunk:
            yield _batch(schema, chunk)


def _batch(schema: pa.Schema, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    arrays = [pa.array([row[i] for row in rows], type=pa.string()) for i in range(len(schema))]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
