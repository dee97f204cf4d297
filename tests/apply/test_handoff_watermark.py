"""A hand-off that finds nothing to apply still moves the destination's watermark past every
captured change of the table: the next apply of the Ready table must not re-apply changes the
base already holds (a table without a key would get those rows twice; one with a key would fail
on rows it already has)."""

from __future__ import annotations

import pytest

from airflow_provider_pgsync.apply.run import apply_table
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.state.phases import DataSync, Ready
from airflow_provider_pgsync.state.store import update_state
from tests.capture.conftest import MakePipeline, Pipeline
from tests.conftest import Database
from tests.support.replica import copy_base, exported_snapshot, rows

TABLES = {
    "keyless": ("public.bag", ["CREATE TABLE bag (k text, n int)", "ALTER TABLE bag REPLICA IDENTITY FULL"]),
    "keyed": ("public.kv", ["CREATE TABLE kv (k text PRIMARY KEY, n int)"]),
}


def _apply(pipeline: Pipeline, replica: Database, table: str) -> None:
    state = pipeline.state()
    destination = PostgresDestination(replica.conninfo, name="replica")
    try:
        changelog = Changelog(pipeline.settings.changelog_uri)
        result = apply_table(changelog, state, state.table(table), destination)
    finally:
        destination.close()
    assert result.phase == Ready(), getattr(result.phase, "reason", result)
    if state.table(table).phase != Ready():
        update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(table, Ready()))


@pytest.mark.parametrize("kind", sorted(TABLES))
def test_a_handoff_with_nothing_to_apply_leaves_the_watermark_past_the_base(
    make_pipeline: MakePipeline, database: Database, replica: Database, kind: str
) -> None:
    table, ddl = TABLES[kind]
    name = table.split(".")[1]
    pipeline = make_pipeline(ddl, [table])
    database.execute(f"INSERT INTO {name} SELECT 'k' || g, 1 FROM generate_series(1, 20) g")  # noqa: S608
    pipeline.capture_until_idle()  # every captured change is older than the snapshot below
    source = database.connect(autocommit=False)
    source.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    done = exported_snapshot(source)
    replica.execute(ddl[0])
    copy_base(source, replica, table)
    source.close()
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(table, DataSync()))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(table, done))
    pipeline.capture_until_idle()  # capture passes the snapshot: the hand-off makes the table Ready
    _apply(pipeline, replica, table)
    assert rows(replica, table) == rows(database, table)

    database.execute(f"INSERT INTO {name} VALUES ('later', 2)")  # noqa: S608
    pipeline.capture_until_idle()
    _apply(pipeline, replica, table)
    assert rows(replica, table) == rows(database, table)
    assert len(rows(replica, table)) == 21
