"""Rows of PostgreSQL text as the CSV that ``COPY ... FROM STDIN (FORMAT csv)`` reads, and the COPY itself."""

from __future__ import annotations

from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.csv as pcsv
from psycopg import sql


def copy_text(rows: pa.Table) -> memoryview:
    """``rows`` as PostgreSQL's CSV: every value quoted, which tells '' (quoted) from NULL
    (nothing). pyarrow writes it into its own buffer without holding the GIL, so it can be
    written in a worker thread while the server runs a statement."""
    # without its empty chunks: pyarrow 26 writes a table whose first chunk is empty as NULs
    rows = pa.Table.from_batches([b for b in rows.to_batches() if b.num_rows], schema=rows.schema)
    sink = pa.BufferOutputStream()
    pcsv.write_csv(rows, sink, pcsv.WriteOptions(include_header=False, quoting_style="all_valid"))
    return memoryview(sink.getvalue())


def copy_rows(
    conn: psycopg.Connection[Any], target: sql.Composable, names: list[str], rows: pa.Table
) -> None:
    """``rows`` (PostgreSQL text) into the ``names`` columns of ``target`` with COPY; the
    server parses the values."""
    copy_csv(conn, target, names, copy_text(rows))


def copy_csv(
    conn: psycopg.Connection[Any], target: sql.Composable, names: list[str], data: bytes | memoryview
) -> None:
    """CSV rows (``copy_text``) into the ``names`` columns of ``target`` with COPY."""
    with conn.cursor().copy(
        sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
            target, sql.SQL(", ").join(map(sql.Identifier, names))
        )
    ) as copy:
        copy.write(data)
