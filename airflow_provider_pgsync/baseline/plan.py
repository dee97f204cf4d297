"""Planning a baseline: the table's ``SELECT`` that every partition reads; pure logic."""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import sql

from airflow_provider_pgsync.baseline.partitions import CTID_COLUMN
from airflow_provider_pgsync.source.publication import PublishedTable
from airflow_provider_pgsync.typemap.spark import ColumnRead


def base_query(table: PublishedTable, reads: Sequence[ColumnRead], condition: str = "") -> sql.Composed:
    """The table as the subquery each partition reads: ``ctid`` and each column as its read
    projects it, with the publication's row filter (so base and stream hold the same rows)
    and, for a backfill, its ``condition`` (SQL the user wrote, checked by the operator)."""
    items = [sql.SQL("ctid AS {}").format(sql.Identifier(CTID_COLUMN))]
    items += [
        sql.SQL("{} AS {}").format(
            sql.SQL(r.select).format(col=sql.Identifier(r.name)), sql.Identifier(r.name)
        )
        for r in reads
    ]
    conditions = [sql.SQL("({})").format(sql.SQL(c)) for c in (table.row_filter, condition) if c]
    where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("")
    return sql.SQL("(SELECT {} FROM {}{}) AS pgsync_base").format(
        sql.SQL(", ").join(items), table.table.identifier, where
    )
