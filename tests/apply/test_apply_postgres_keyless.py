"""Capture, then apply into a PostgreSQL replica a table without a key (REPLICA IDENTITY FULL):
identical rows, NULLs, types without equality, TOASTed values kept by updates, a TRUNCATE,
in large batches and in small ones; the replica ends with the source's rows as a multiset."""

from __future__ import annotations

import pytest

from airflow_provider_pgsync.apply.run import apply_table
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.phases import DataSync, Ready, SyncDone
from airflow_provider_pgsync.state.store import update_state
from tests.capture.conftest import MakePipeline
from tests.conftest import Database
from tests.support.replica import rows

TABLE = "public.bag"
DDL = [
    "CREATE TABLE bag (k int, label text, doc text, j json, p point, n numeric)",
    "ALTER TABLE bag ALTER COLUMN doc SET STORAGE EXTERNAL",
    "ALTER TABLE bag REPLICA IDENTITY FULL",
]
WORK = [
    # identical rows in pairs, NULLs, a TOASTed value, json and point (no equality operator)
    [
        "INSERT INTO bag SELECT g % 50, CASE WHEN g % 3 = 0 THEN NULL ELSE 'l' || (g % 50) END,"
        " CASE WHEN g % 10 = 0 THEN repeat('t', 5000) || g % 50 END, json_build_object('g', g % 50),"
        " point(g % 50, 0), (g % 50) / 4.0 FROM generate_series(1, 400) g",
    ],
    # one of two identical rows updated, one deleted; TOASTed values left alone (unchanged TOAST)
    [
        "UPDATE bag SET label = 'one' WHERE ctid IN (SELECT min(ctid) FROM bag WHERE k % 5 = 0 GROUP BY k)",
        "DELETE FROM bag WHERE ctid IN (SELECT max(ctid) FROM bag WHERE k % 7 = 1 GROUP BY k)",
        "UPDATE bag SET n = n + 1 WHERE k % 4 = 2",
        "INSERT INTO bag SELECT k, label, doc, j, p, n FROM bag WHERE k % 9 = 3",  # more duplicates
    ],
    # inserted, changed and deleted within one transaction; values equal as numbers, not as text
    [
        "INSERT INTO bag VALUES (1000, NULL, NULL, NULL, NULL, 1.0), (1000, NULL, NULL, NULL, NULL, 1.00)",
        "UPDATE bag SET n = 2 WHERE k = 1000 AND n::text = '1.00'",
        "DELETE FROM bag WHERE k = 1000 AND n::text = '1.0'",
        "INSERT INTO bag VALUES (1001, '', '', '{}', '(0,0)', 0)",
        "DELETE FROM bag WHERE k = 1001",
        "INSERT INTO bag VALUES (1001, '', '', '{}', '(0,0)', 0)",
    ],
    [
        "DELETE FROM bag WHERE k % 6 = 5",
        "UPDATE bag SET doc = doc || 'x' WHERE doc IS NOT NULL AND k % 2 = 0",
    ],
    [
        "TRUNCATE bag",
        "INSERT INTO bag SELECT g % 3, 'after', NULL, NULL, NULL, 0 FROM generate_series(1, 9) g",
    ],
    [
        "DELETE FROM bag WHERE ctid = (SELECT min(ctid) FROM bag WHERE k = 1)",
        "UPDATE bag SET k = -k WHERE k = 2",
    ],
]


@pytest.mark.parametrize("batch_rows", [5, 1_000_000])
def test_a_keyless_table_reaches_the_source_exactly(
    make_pipeline: MakePipeline, database: Database, replica: Database, batch_rows: int
) -> None:
    pipeline = make_pipeline(DDL, [TABLE])
    snapshot = database.execute(
        "SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint,"
        " pg_current_wal_insert_lsn()::text FROM pg_current_snapshot() s"
    )[0]
    # the baseline: the empty table, before every change
    done = SyncDone("00000003-00000002-1", LSN.parse(snapshot[2]), snapshot[0], snapshot[1], ())
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(TABLE, DataSync()))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(TABLE, done))

    for i, statements in enumerate(WORK):
        database.transaction(*statements)
        if i % 2 and i < len(WORK) - 1:  # some batches hold several transactions, some one
            continue
        pipeline.capture_until_idle()
        state = pipeline.state()
        destination = PostgresDestination(replica.conninfo, name="replica")
        if i == 0:  # the baseline's table, with the columns capture saw
            destination.open_table(TableRef.parse(TABLE), state.table(TABLE).columns, 0)
        try:
            result = apply_table(
                Changelog(pipeline.settings.changelog_uri),
                state,
                state.table(TABLE),
                destination,
                batch_rows=batch_rows,
            )
        finally:
            destination.close()
        assert result.phase == Ready(), getattr(result.phase, "reason", result)
        if i == 0:
            update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(TABLE, Ready()))
        assert rows(replica, TABLE) == rows(database, TABLE), f"after transaction {i}"
