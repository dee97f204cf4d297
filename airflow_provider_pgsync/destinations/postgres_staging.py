"""Rows staged for one statement of the PostgreSQL destination: temporary tables typed like the
table they join (dropped at commit), filled by ``COPY``, and the join on the key."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from psycopg import sql

from airflow_provider_pgsync.destinations.pg_copy_text import copy_rows
from airflow_provider_pgsync.source.names import TableRef

if TYPE_CHECKING:
    from airflow_provider_pgsync.destinations.postgres import PostgresDestination


def stage(
    destination: PostgresDestination, table: TableRef, names: list[str], data: pa.Table
) -> sql.Identifier:
    """A new temporary table (dropped at commit) of ``names`` typed as in ``table``, holding
    ``data``."""
    staged = new_stage(destination, table, names)
    copy_rows(destination._conn, staged, names, data)
    return staged


def new_stage(
    destination: PostgresDestination,
    table: TableRef,
    names: list[str],
    *,
    extra: sql.Composable | None = None,
    loose: Sequence[str] = (),
) -> sql.Identifier:
    """A new empty temporary table (dropped at commit) of ``names`` typed as in ``table``
    (the ``loose`` ones as their domain's base type), after an ``extra`` column (SQL
    ``<value> AS <name>``) if given."""
    destination._staged += 1
    staged = sql.Identifier(f"pgsync_stage_{destination._staged}")
    selected = sql.SQL(", ").join(
        sql.SQL("CASE WHEN false THEN {0} END AS {0}").format(sql.Identifier(n))
        if n in loose
        else sql.Identifier(n)
        for n in names
    )
    if extra is not None:
        selected = sql.SQL("{}, {}").format(extra, selected)
    destination._conn.execute(
        sql.SQL("CREATE TEMPORARY TABLE {} ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA").format(
            staged, selected, table.identifier
        )
    )
    return staged


def key_join(keys: list[str]) -> sql.Composed:
    """``t.k1 = s.k1 AND ...``: the target ``t`` and a staged table ``s`` on the key."""
    return sql.SQL(" AND ").join(sql.SQL("t.{0} = s.{0}").format(sql.Identifier(k)) for k in keys)
