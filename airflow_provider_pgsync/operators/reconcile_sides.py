"""How ``PgReconcileOperator`` compares the source with one destination, table by table:
wait for the destination to pass the source snapshot, read its watermark, find the keys to
leave out, compare (``reconcile.compare``). The lake's side runs in a Spark job
(``operators/reconcile_lake.py``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from airflow_provider_pgsync.changelog.schema import key_columns
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.errors import PgSyncError, ReconcileError
from airflow_provider_pgsync.hooks.catalog import column_infos
from airflow_provider_pgsync.hooks.reconcile_pg import (
    PgSide,
    SourceSnapshot,
    begin_replica_read,
    open_replica,
    replica_watermark,
)
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.reconcile.canonical import row_text
from airflow_provider_pgsync.reconcile.compare import compare, levels
from airflow_provider_pgsync.reconcile.result import TableResult
from airflow_provider_pgsync.reconcile.touched import LeftOut, left_out_keys
from airflow_provider_pgsync.reconcile.wait import Watermark, not_caught_up, not_ready
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo, PipelineState, TableState
from airflow_provider_pgsync.state.store import StateStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Run:
    """What every comparison of one reconciliation shares."""

    pipeline: str
    store: StateStore
    source: psycopg.Connection[Any]
    snapshot: SourceSnapshot
    changelog: Changelog
    sample_size: int
    wait_timeout: float
    poll_seconds: float

    def wait(
        self,
        table: str,
        destination: str,
        read: Callable[[], Watermark | None],
        undo: Callable[[], None],
    ) -> tuple[PipelineState, Watermark | None]:
        """Poll until ``destination`` has applied every change the snapshot saw of ``table``:
        ``read`` reads its watermark (starting the read the comparison uses), ``undo`` ends a
        read that came too early. ReconcileError naming table, destination and remedy on timeout."""
        deadline = time.monotonic() + self.wait_timeout
        while True:
            state = self.store.load(self.pipeline)
            refused = not_ready(state, table, destination)
            if refused is not None:
                raise ReconcileError(refused)
            watermark = read()
            why = not_caught_up(state, table, destination, self.snapshot.lsn, watermark)
            if why is None:
                return state, watermark
            undo()
            if time.monotonic() >= deadline:
                raise ReconcileError(
                    f"{table} in destination {destination} did not catch up with the source snapshot at "
                    f"{self.snapshot.lsn} within {self.wait_timeout:g} s ({why}): run capture and apply (the "
                    "cdc DAG) and reconcile again, or give a longer wait_timeout"
                )
            log.info("reconcile %s -> %s: waiting: %s", table, destination, why)
            time.sleep(self.poll_seconds)

    def left_out(
        self, state: PipelineState, table_state: TableState, watermark: Watermark | None
    ) -> LeftOut:
        snap = self.snapshot
        return left_out_keys(
            self.changelog,
            table_state,
            state.segments,
            xmin=snap.xmin,
            xmax=snap.xmax,
            xip=snap.xip,
            upto_lsn=watermark[0] if watermark is not None else 0,
        )


def columns_of(run: Run, table_state: TableState) -> list[ColumnInfo]:
    """The table's columns as the state knows them from capture, or (no change captured yet)
    as the source's catalog describes them in the snapshot."""
    if table_state.columns:
        return list(table_state.columns)
    return column_infos(run.source, table_state.source_table)


def estimated_rows(conn: psycopg.Connection[Any], table: TableRef) -> int:
    """The planner's estimate of the table's rows (sizes the bisection's levels)."""
    row = conn.execute(
        "SELECT reltuples::int8 FROM pg_class WHERE oid = %s::regclass",
        (table.identifier.as_string(conn),),
    ).fetchone()
    return max(int(row[0]) if row else 0, 0)


def error_result(table: str, destination: str, exc: Exception) -> TableResult:
    return TableResult(table=table, destination=destination, status="error", reason=str(exc))


def reconcile_postgres(
    run: Run, config: dict[str, Any], name: str, tables: Sequence[str]
) -> list[TableResult]:
    """Compare each of ``tables`` with the replica ``config`` describes (destination ``name``)."""
    conn_id = str(config.get("conn_id", ""))
    control = str(config.get("control_schema", "pgsync"))
    results = []
    try:
        replica = open_replica(PgReplicationHook(postgres_conn_id=conn_id).connect())
    except PgSyncError as exc:
        return [error_result(t, name, exc) for t in tables]
    try:
        for table in tables:
            try:
                results.append(_postgres_table(run, replica, control, name, table))
            except (PgSyncError, psycopg.Error) as exc:
                log.error("reconcile %s -> %s: %s", table, name, exc)
                results.append(error_result(table, name, exc))
            finally:
                replica.rollback()
    finally:
        replica.close()
    return results


def _postgres_table(
    run: Run, replica: psycopg.Connection[Any], control: str, name: str, table: str
) -> TableResult:
    def read() -> Watermark | None:
        begin_replica_read(replica)
        return replica_watermark(replica, control, name, table_ref)

    table_ref = run.store.load(run.pipeline).table(table).table
    state, watermark = run.wait(table, name, read, replica.rollback)
    table_state = state.table(table)
    columns = columns_of(run, table_state)
    names = [c.name for c in columns]
    keys = key_columns(columns) or names
    keyed = len(keys) < len(names)
    left = run.left_out(state, table_state, watermark)
    if left.truncated:
        raise ReconcileError(
            f"{table} was truncated in {name} by a transaction after the source snapshot: nothing to compare "
            "this time; reconcile again"
        )
    texts = sorted(row_text(k) for k in left.keys)
    source = PgSide(run.source, table_state.source_table, names, keys, texts, where="the source")
    destination = PgSide(replica, table_state.table, names, keys, texts, where=f"destination {name}")
    found = compare(
        source, destination, levels(estimated_rows(run.source, table_state.source_table)), keyed=keyed
    )
    return TableResult.from_differences(
        table, name, found, keys, left_out=len(left.keys), sample_size=run.sample_size
    )
