"""The facts the pgsync sensors read from PostgreSQL: one SQL statement each, run sync or async.

The sync functions serve a sensor's ``poke`` (on a ``PgReplicationHook`` connection),
the ``a``-prefixed ones its trigger (on a psycopg ``AsyncConnection``); both pairs run
the same statements and turn rows into the same values of ``triggers.checks``.
Connections are in autocommit mode.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from airflow_provider_pgsync.errors import SourceUnavailableError
from airflow_provider_pgsync.hooks.postgres_state_store import state_from_row, state_query
from airflow_provider_pgsync.hooks.replication import CAPTURE_LOCK_CLASS
from airflow_provider_pgsync.source.names import validate_publication_name, validate_slot_name
from airflow_provider_pgsync.state.model import PipelineState, validate_pipeline_name
from airflow_provider_pgsync.triggers.checks import (
    PendingCount,
    SlotLag,
    classify_peek_error,
    message_limit,
)

# Capture holds this session lock while it peeks and advances (PgReplicationHook.capture_lock):
# taking it first, without waiting, keeps the sensor's peek from ever failing a running capture.
_TRY_CAPTURE_LOCK = sql.SQL("SELECT pg_try_advisory_lock(%s, hashtext(%s))")

_DATA_CHANGE_TAGS = sql.SQL(", ").join(sql.Literal(tag) for tag in b"IUDT")

# A bounded peek, counted on the server: only two numbers travel. Protocol 1 is enough to
# tell messages apart, and the count needs no text output settings.
_COUNT_PENDING = sql.SQL(
    "SELECT count(*) FILTER (WHERE get_byte(data, 0) IN ({}))::bigint, count(*)::bigint"
    " FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s,"
    " 'proto_version', '1', 'publication_names', %s)"
).format(_DATA_CHANGE_TAGS)

# The same figures as PgReplicationHook.slot_info (retained = current - restart_lsn), plus the
# confirmed position's distance and safe_wal_size. A standby has no current LSN: its replay LSN.
_SLOT_LAG = sql.SQL(
    """
    SELECT s.slot_name::text, s.active, s.wal_status, w.lsn::text, s.restart_lsn::text,
           s.confirmed_flush_lsn::text,
           pg_wal_lsn_diff(w.lsn, s.restart_lsn)::bigint,
           pg_wal_lsn_diff(w.lsn, s.confirmed_flush_lsn)::bigint,
           s.safe_wal_size
    FROM pg_replication_slots s,
         LATERAL (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                              ELSE pg_current_wal_lsn() END AS lsn) w
    WHERE s.slot_name = %s
    """
)


def _capture_busy(slot_name: str) -> PendingCount:
    return PendingCount(busy=f"a capture of slot {slot_name} holds its advisory lock")


def _count_params(slot_name: str, publication_name: str, min_changes: int) -> tuple[str, int, str]:
    return (
        validate_slot_name(slot_name),
        message_limit(min_changes),
        validate_publication_name(publication_name),
    )


def _peek_failed(exc: psycopg.Error, slot_name: str, publication_name: str) -> PendingCount:
    if isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None:
        raise SourceUnavailableError(
            f"lost the connection to the source while peeking slot {slot_name}: {str(exc).strip()}"
        ) from exc
    outcome = classify_peek_error(
        exc.sqlstate, str(exc), slot_name=slot_name, publication_name=publication_name
    )
    if isinstance(outcome, PendingCount):
        return outcome
    raise outcome from exc


def count_pending(
    conn: psycopg.Connection[Any], slot_name: str, publication_name: str, min_changes: int
) -> PendingCount:
    """Count the slot's pending changes with a bounded peek, unless capture or another session holds it."""
    params = _count_params(slot_name, publication_name, min_changes)
    locked = conn.execute(_TRY_CAPTURE_LOCK, (CAPTURE_LOCK_CLASS, slot_name)).fetchone()
    if not locked or not locked[0]:
        return _capture_busy(slot_name)
    try:
        row = conn.execute(_COUNT_PENDING, params).fetchone()
    except psycopg.Error as exc:
        return _peek_failed(exc, slot_name, publication_name)
    assert row is not None  # an aggregate returns one row
    return PendingCount(changes=int(row[0]), messages=int(row[1]))


async def acount_pending(
    conn: psycopg.AsyncConnection[Any], slot_name: str, publication_name: str, min_changes: int
) -> PendingCount:
    """``count_pending`` on an async connection."""
    params = _count_params(slot_name, publication_name, min_changes)
    cur = await conn.execute(_TRY_CAPTURE_LOCK, (CAPTURE_LOCK_CLASS, slot_name))
    locked = await cur.fetchone()
    if not locked or not locked[0]:
        return _capture_busy(slot_name)
    try:
        cur = await conn.execute(_COUNT_PENDING, params)
        row = await cur.fetchone()
    except psycopg.Error as exc:
        return _peek_failed(exc, slot_name, publication_name)
    assert row is not None
    return PendingCount(changes=int(row[0]), messages=int(row[1]))


def _slot_lag(row: tuple[Any, ...] | None) -> SlotLag | None:
    return None if row is None else SlotLag(*row)


def read_slot_lag(conn: psycopg.Connection[Any], slot_name: str) -> SlotLag | None:
    """The slot's position, status and lag figures, or None when there is no slot of that name."""
    return _slot_lag(conn.execute(_SLOT_LAG, (validate_slot_name(slot_name),)).fetchone())


async def aread_slot_lag(conn: psycopg.AsyncConnection[Any], slot_name: str) -> SlotLag | None:
    """``read_slot_lag`` on an async connection."""
    cur = await conn.execute(_SLOT_LAG, (validate_slot_name(slot_name),))
    return _slot_lag(await cur.fetchone())


async def aload_state(conn: psycopg.AsyncConnection[Any], pipeline: str, *, schema: str) -> PipelineState:
    """The pipeline's state from ``<schema>.pipeline_state`` (as ``PostgresStateStore.load`` reads it).

    A missing table or row gives a fresh state at version 0, like the store; unlike the
    store, this never creates the table.
    """
    validate_pipeline_name(pipeline)
    try:
        cur = await conn.execute(state_query(schema), (pipeline,))
    except psycopg.errors.UndefinedTable:
        return PipelineState(pipeline)
    return state_from_row(pipeline, await cur.fetchone(), schema=schema)
