"""The rows of a PostgreSQL database as the tests compare them, and the test's own baselines
and apply runs into a PostgreSQL replica (test-only)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from airflow_provider_pgsync.apply.destination import Destination
from airflow_provider_pgsync.apply.run import apply_table
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.hooks.catalog import column_infos
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.phases import DataSync, SyncDone
from airflow_provider_pgsync.state.store import update_state
from tests.capture.conftest import Pipeline
from tests.conftest import Database


def column_names(database: Database, table: str) -> list[str]:
    with database.connect() as conn:
        found = conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
            " AND NOT attisdropped ORDER BY attnum",
            (table,),
        ).fetchall()
    return [r[0] for r in found]


def rows(database: Database, table: str) -> list[tuple[str | None, ...]]:
    """The table's rows as text, sorted (a multiset for tables without a key)."""
    names = column_names(database, table)
    with database.connect() as conn:
        conn.execute("SET TimeZone = 'UTC'")
        query = sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(n)) for n in names),
            TableRef.parse(table).identifier,
        )
        return sorted(conn.execute(query).fetchall(), key=lambda r: tuple((v is None, v or "") for v in r))


def exported_snapshot(conn: psycopg.Connection) -> SyncDone:  # type: ignore[type-arg]
    """The hand-off a baseline reading in ``conn``'s REPEATABLE READ snapshot records."""
    row = conn.execute(
        "SELECT pg_export_snapshot(), pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint,"
        " ARRAY(SELECT pg_snapshot_xip(s)::text::bigint), pg_current_wal_insert_lsn()::text"
        " FROM pg_current_snapshot() s"
    ).fetchone()
    assert row is not None
    return SyncDone(row[0], LSN.parse(row[4]), row[1], row[2], tuple(row[3]))


def copy_base(source: psycopg.Connection, replica: Database, table: str) -> None:  # type: ignore[type-arg]
    """The test's baseline: the table as ``source``'s open snapshot sees it, into the replica."""
    ident = TableRef.parse(table).identifier
    with (
        replica.connect() as out,
        out.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(ident)) as sink,
        source.cursor().copy(sql.SQL("COPY {} TO STDOUT").format(ident)) as data,
    ):
        for block in data:
            sink.write(block)


def empty_baseline(source: Database, replica: Database, name: str, table: str, lineage: str) -> None:
    """A real baseline of the empty ``table`` into the PostgreSQL destination ``name`` on
    ``replica``: the table made, its lineage and identity recorded, as the baseline's swap does."""
    ref = TableRef.parse(table)
    with source.connect() as conn:
        columns = column_infos(conn, ref)
    destination = PostgresDestination(replica.conninfo, name=name)
    try:
        staging = destination.prepare_baseline(ref, columns, lineage)
        destination.finish_baseline(ref, staging, lineage, columns)
    finally:
        destination.close()


def apply_all(pipeline: Pipeline, replica: Database) -> dict[str, object]:
    """One apply run of every table into the replica; records the phases; returns them."""
    return apply_into(pipeline, PostgresDestination(replica.conninfo, name="replica"))


def apply_into(pipeline: Pipeline, destination: Destination) -> dict[str, object]:
    """One apply run of every table into ``destination`` (closed after); records the phases."""
    state = pipeline.state()
    try:
        results = {
            key: apply_table(Changelog(pipeline.settings.changelog_uri), state, ts, destination, batch_rows=7)
            for key, ts in state.tables.items()
        }
    finally:
        destination.close()

    def record(current: PipelineState) -> PipelineState:
        for key, result in results.items():
            if result.phase != current.tables[key].phase:
                current = current.with_table_phase(key, result.phase)
        return current

    update_state(pipeline.store, pipeline.name, record)
    return {key: r.phase for key, r in results.items()}


def empty_capture_baseline(pipeline: Pipeline, database: Database, table: str) -> None:
    """The baseline of an empty table: nothing to copy, every later transaction applies."""
    xmax, lsn = database.execute(
        "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_insert_lsn()::text"
    )[0]
    done = SyncDone("00000003-00000002-1", LSN.parse(str(lsn)), int(str(xmax)), int(str(xmax)))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(table, DataSync()))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(table, done))
