"""Plain batches of keyed tables in the PostgreSQL destination: three set statements.

A batch with no TRUNCATE, key change or unchanged TOAST (``apply/net.py``'s ``bulk_net``, the
common case) deletes and updates the rows the table holds in one MERGE joined with their keys
and rows staged by one ``COPY`` (a DELETE and an UPDATE before PostgreSQL 15), then copies the
new rows straight into the table; each COPY's text is written in a worker thread while the
server runs the statement before it. The counts are checked: a destination that lost a row, or
holds one the source inserted, is an error, not a silent repair.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import psycopg
import pyarrow as pa
from psycopg import sql

from airflow_provider_pgsync.apply.net import BulkNet
from airflow_provider_pgsync.changelog.schema import key_columns
from airflow_provider_pgsync.destinations.pg_copy_text import CopyText, copy_prepared, copy_text
from airflow_provider_pgsync.destinations.postgres_staging import key_join, new_stage, stage
from airflow_provider_pgsync.errors import DestinationError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo

if TYPE_CHECKING:
    from airflow_provider_pgsync.destinations.postgres import PostgresDestination


def apply_bulk(
    destination: PostgresDestination, table: TableRef, columns: Sequence[ColumnInfo], net: BulkNet
) -> None:
    """The rows the table holds deleted and updated by one statement joined with them staged
    by COPY (a MERGE; a DELETE and an UPDATE before PostgreSQL 15), then the new rows copied
    straight into the table. Each COPY's text is written in a worker thread while the
    server runs the statements before it. The counts are checked: a destination that lost
    a row, or holds one the source inserted, is an error, not a silent repair."""
    names = [c.name for c in columns]
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pgsync-copy") as pool:
        changed = pool.submit(_changed_text, names, key_columns(columns), net)
        inserts = pool.submit(copy_text, net.inserts) if net.inserts.num_rows else None
        try:
            if destination._conn.info.server_version >= 150000:
                _merge(destination, table, columns, net, changed.result())
            else:
                _delete_update(destination, table, columns, net)
            if inserts is not None:
                _copy_new(destination, table, names, inserts.result())
        finally:
            for pending in (changed, inserts):
                if pending is not None:
                    pending.cancel()


def _merge(
    destination: PostgresDestination,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    net: BulkNet,
    staged_text: CopyText,
) -> None:
    """Delete and update the rows the table holds in one join: the deleted keys and the updated
    rows staged together (``pgsync_op`` D or U), one MERGE."""
    expected = net.deletes.num_rows + net.updates.num_rows
    if not expected:
        return
    names = [c.name for c in columns]
    keys = key_columns(columns)
    others = [n for n in names if n not in keys]
    op = _free_name(names, "op")
    # a deleted key's other columns are staged NULL: they take their base type there (CASE
    # drops a domain, whose NOT NULL would refuse them); the UPDATE assigns the domain back
    staged = new_stage(
        destination, table, names, extra=sql.SQL("''::text AS {}").format(sql.Identifier(op)), loose=others
    )
    copy_prepared(destination._conn, staged, [op, *names], staged_text)
    count = destination._conn.execute(
        sql.SQL(
            "MERGE INTO {} AS t USING {} AS s ON {}"
            " WHEN MATCHED AND s.{} = 'D' THEN DELETE"
            # an UPDATE, not a DELETE and INSERT: a row whose indexed columns stay the same
            # gets its new version on the same page (HOT) without index entries
            " WHEN MATCHED THEN UPDATE SET {}"
        ).format(
            table.identifier,
            staged,
            key_join(keys),
            sql.Identifier(op),
            sql.SQL(", ").join(sql.SQL("{0} = s.{0}").format(sql.Identifier(n)) for n in others),
        )
    ).rowcount
    _check_count(destination, table, count, expected, "updated or deleted")


def _delete_update(
    destination: PostgresDestination, table: TableRef, columns: Sequence[ColumnInfo], net: BulkNet
) -> None:
    """``_merge`` for servers without MERGE: one DELETE and one UPDATE."""
    names = [c.name for c in columns]
    keys = key_columns(columns)
    others = [n for n in names if n not in keys]
    if net.deletes.num_rows:
        staged = stage(destination, table, keys, net.deletes)
        count = destination._conn.execute(
            sql.SQL("DELETE FROM {} AS t USING {} AS s WHERE {}").format(
                table.identifier, staged, key_join(keys)
            )
        ).rowcount
        _check_count(destination, table, count, net.deletes.num_rows, "deleted")
    if net.updates.num_rows:
        staged = stage(destination, table, names, net.updates)
        count = destination._conn.execute(
            sql.SQL("UPDATE {} AS t SET {} FROM {} AS s WHERE {}").format(
                table.identifier,
                sql.SQL(", ").join(sql.SQL("{0} = s.{0}").format(sql.Identifier(n)) for n in others),
                staged,
                key_join(keys),
            )
        ).rowcount
        _check_count(destination, table, count, net.updates.num_rows, "updated")


def _copy_new(
    destination: PostgresDestination, table: TableRef, names: list[str], rows_text: CopyText
) -> None:
    """The new rows (``copy_text``) into ``table``; a key it already holds is an error."""
    try:
        copy_prepared(destination._conn, table.identifier, names, rows_text)
    except psycopg.errors.UniqueViolation as exc:
        raise DestinationError(
            f"destination {destination.name}: table {table} already has a row the source inserted "
            f"({exc.diag.message_detail or exc}): the destination holds rows the source does "
            "not; rebaseline it"
        ) from exc


def _check_count(
    destination: PostgresDestination, table: TableRef, count: int, expected: int, done: str
) -> None:
    if count != expected:
        raise DestinationError(
            f"destination {destination.name}: table {table} lacks {expected - count} of {expected} rows "
            f"the source {done}: the destination lost rows; rebaseline it"
        )


def _changed_text(names: list[str], keys: list[str], net: BulkNet) -> CopyText:
    """The rows ``_merge`` stages: ``D`` and the key of each deleted row (NULL elsewhere),
    ``U`` and each updated row."""
    deletes = net.deletes
    for name in names:
        if name not in keys:
            deletes = deletes.append_column(name, pa.nulls(deletes.num_rows, pa.string()))
    tagged = [
        part.select(names).add_column(0, "op", pa.repeat(pa.scalar(op, pa.string()), part.num_rows))
        for op, part in (("D", deletes), ("U", net.updates))
        if part.num_rows
    ]
    if not tagged:
        return []
    return copy_text(pa.concat_tables([t.cast(tagged[-1].schema) for t in tagged]))


def _free_name(names: list[str], base: str) -> str:
    """A column name like ``pgsync_<base>`` that is none of ``names``."""
    name = f"pgsync_{base}"
    while name in names:
        name += "_"
    return name
