"""Other batches of keyed tables in the PostgreSQL destination, step by step (``apply/net.py``'s
``net_steps``): a TRUNCATE; or deletes, inserts-or-updates of whole rows, then in-place updates
that leave columns sent as unchanged TOAST alone, their values carried from the rows the
destination holds. Values travel as text arrays, cast to the replica's types by the server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from psycopg import sql

from airflow_provider_pgsync.apply.net import KeyValues, NetStep, Present, Truncate, Values
from airflow_provider_pgsync.changelog.schema import key_columns
from airflow_provider_pgsync.errors import DestinationError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo

if TYPE_CHECKING:
    from airflow_provider_pgsync.destinations.postgres import PostgresDestination


def apply_step(
    destination: PostgresDestination, table: TableRef, columns: Sequence[ColumnInfo], step: NetStep | Truncate
) -> None:
    """One step of a batch's net effect (``net_steps``), in the caller's transaction."""
    if isinstance(step, Truncate):
        destination._conn.execute(sql.SQL("TRUNCATE {}").format(table.identifier))
        return
    keys = key_columns(columns)
    present = list(step.present())
    for key, state in present:  # before the deletes: the old rows still hold the values
        if state.carry_from is not None:
            _carry(destination, table, columns, key, state)
    if step.deletes:
        _delete(destination, table, columns, keys, step.deletes)
    whole = [s.values for _, s in present if not s.unchanged]
    if whole:
        _upsert(destination, table, columns, keys, whole)
    partial: dict[frozenset[str], list[Values]] = {}
    for _, state in present:
        if state.unchanged:
            partial.setdefault(state.unchanged, []).append(state.values)
    for unchanged, rows in partial.items():
        _update(destination, table, columns, keys, unchanged, rows)


def _carry(
    destination: PostgresDestination,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    key: KeyValues,
    state: Present,
) -> None:
    """Fill ``state``'s unchanged columns from the destination's row at ``carry_from``."""
    assert state.carry_from is not None
    keys = key_columns(columns)
    wanted = sorted(state.unchanged)
    row = destination._conn.execute(
        sql.SQL("SELECT {} FROM {} WHERE {}").format(
            sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(n)) for n in wanted),
            table.identifier,
            _key_match(destination, table, columns, keys),
        ),
        list(state.carry_from),
    ).fetchone()
    if row is None:
        raise DestinationError(
            f"destination {destination.name}: table {table} has no row with key {state.carry_from}, whose "
            f"unchanged values the row with key {key} keeps: the destination lost rows; rebaseline it"
        )
    state.values.update(zip(wanted, row, strict=True))
    state.unchanged = frozenset()
    state.carry_from = None


def _delete(
    destination: PostgresDestination,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    keys: list[str],
    rows: list[KeyValues],
) -> None:
    destination._conn.execute(
        sql.SQL("DELETE FROM {} WHERE ({}) IN (SELECT {} FROM {})").format(
            table.identifier,
            sql.SQL(", ").join(map(sql.Identifier, keys)),
            _casts(destination, table, columns, keys),
            _unnest(len(keys)),
        ),
        [[row[i] for row in rows] for i in range(len(keys))],
    )


def _upsert(
    destination: PostgresDestination,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    keys: list[str],
    rows: list[Values],
) -> None:
    names = [c.name for c in columns]
    others = [n for n in names if n not in keys]
    destination._conn.execute(
        sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT ({}) DO UPDATE SET {}").format(
            table.identifier,
            sql.SQL(", ").join(map(sql.Identifier, names)),
            _casts(destination, table, columns, names),
            _unnest(len(names)),
            sql.SQL(", ").join(map(sql.Identifier, keys)),
            sql.SQL(", ").join(
                sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(n), sql.Identifier(n)) for n in others
            ),
        ),
        [[row[n] for row in rows] for n in names],
    )


def _update(
    destination: PostgresDestination,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    keys: list[str],
    unchanged: frozenset[str],
    rows: list[Values],
) -> None:
    """Update rows in place, leaving the ``unchanged`` columns as the destination has them."""
    names = [c.name for c in columns if c.name not in unchanged]
    others = [n for n in names if n not in keys]
    if others:
        count = destination._conn.execute(
            sql.SQL("UPDATE {} AS t SET {} FROM (SELECT {} FROM {}) AS v WHERE {}").format(
                table.identifier,
                sql.SQL(", ").join(
                    sql.SQL("{} = v.{}").format(sql.Identifier(n), sql.Identifier(f"c{names.index(n)}"))
                    for n in others
                ),
                _casts(destination, table, columns, names, aliases=True),
                _unnest(len(names)),
                sql.SQL(" AND ").join(
                    sql.SQL("t.{} = v.{}").format(sql.Identifier(k), sql.Identifier(f"c{names.index(k)}"))
                    for k in keys
                ),
            ),
            [[row[n] for row in rows] for n in names],
        ).rowcount
    else:
        count = destination._conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE ({}) IN (SELECT {} FROM {})").format(
                table.identifier,
                sql.SQL(", ").join(map(sql.Identifier, keys)),
                _casts(destination, table, columns, keys),
                _unnest(len(keys)),
            ),
            [[row[k] for row in rows] for k in keys],
        ).fetchone()[0]  # type: ignore[index]
    if count != len(rows):
        raise DestinationError(
            f"destination {destination.name}: table {table} lacks {len(rows) - count} of {len(rows)} rows "
            "that the source updated keeping unchanged TOAST values: the destination lost rows; "
            "rebaseline it"
        )


def _casts(
    destination: PostgresDestination,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    names: list[str],
    *,
    aliases: bool = False,
) -> sql.Composed:
    """``c0::type0, c1::type1, ...`` over the unnest's columns, for ``names`` in order."""
    by_name = {c.name: c for c in columns}
    items = []
    for i, name in enumerate(names):
        cast = sql.SQL("{}::{}").format(
            sql.Identifier(f"c{i}"), sql.SQL(destination._type(table, by_name[name]))
        )
        items.append(sql.SQL("{} AS {}").format(cast, sql.Identifier(f"c{i}")) if aliases else cast)
    return sql.SQL(", ").join(items)


def _key_match(
    destination: PostgresDestination, table: TableRef, columns: Sequence[ColumnInfo], keys: list[str]
) -> sql.Composed:
    by_name = {c.name: c for c in columns}
    return sql.SQL(" AND ").join(
        sql.SQL("{} = %s::{}").format(sql.Identifier(k), sql.SQL(destination._type(table, by_name[k])))
        for k in keys
    )


def _unnest(width: int) -> sql.Composed:
    """``unnest(%s::text[], ...) AS u(c0, c1, ...)``: rows from one text array per column."""
    return sql.SQL("unnest({}) AS u({})").format(
        sql.SQL(", ").join(sql.SQL("%s::text[]") for _ in range(width)),
        sql.SQL(", ").join(sql.Identifier(f"c{i}") for i in range(width)),
    )
