"""A backfill into the lake, end to end: real PostgreSQL, real Spark jobs (baseline, backfill,
the view read back), apply through ``PgApplyOperator``.

The lake loses a segment (its changes never reach the view), then a backfill of part of the
damaged rows repairs exactly those rows: rows changed after the backfill's snapshot keep their
newer values (an update, a delete, a key change, and a transaction still open when the snapshot
was taken), rows outside its condition stay as they were, and the table streams on throughout.
Refusals that need no Spark (a table not Ready, a bad condition, a table without a key) leave
state and lake untouched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.errors import ConfigError, StateError
from airflow_provider_pgsync.operators.backfill import PgBackfillOperator
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import DataSync, PipelineState, Ready, SyncDone
from airflow_provider_pgsync.state.store import update_state
from tests.apply.lake import baseline, cdc_into_lake, lake_session, sort_rows, view_query
from tests.capture.conftest import MakePipeline, Pipeline
from tests.conftest import Database
from tests.support.replica import rows

TABLE = "public.items"
DDL = ["CREATE TABLE items (id int PRIMARY KEY, name text, doc text)"]


def _backfill(pipeline: Pipeline, source_conn_id: str, condition: str | None, table: str = TABLE) -> Any:
    return PgBackfillOperator(
        task_id="backfill",
        pipeline=pipeline.name,
        table=table,
        backfill_filter=condition,
        postgres_conn_id=source_conn_id,
        state_backend="postgres",
        progress_seconds=2,
    ).execute({"ti": None})  # type: ignore[typeddict-item]


@pytest.mark.slow
def test_a_backfill_repairs_the_chosen_rows_and_keeps_newer_ones(
    make_pipeline: MakePipeline, database: Database, source_conn_id: str, lake: Path
) -> None:
    database.execute(DDL[0])
    database.execute(
        "INSERT INTO items SELECT g, 'item ' || g, repeat('d', 3000) FROM generate_series(1, 300) g"
    )
    pipeline = make_pipeline([], [TABLE])
    baseline(pipeline, source_conn_id, [TABLE])
    cdc_into_lake(pipeline, source_conn_id, lake)
    assert pipeline.state().table(TABLE).phase == Ready()

    # the lake loses the segment of an update of rows 1..100 (as if a file had been lost)
    database.execute("UPDATE items SET name = 'v2 ' || id WHERE id <= 100")
    files = LakeFiles(LakeDestination.from_config({"warehouse": str(lake)}))
    meta = files.current(TableRef.parse(TABLE))
    assert meta is not None
    before = {key for key, _ in files.segments(TableRef.parse(TABLE), meta)}
    cdc_into_lake(pipeline, source_conn_id, lake)
    [(_, lost)] = [(k, p) for k, p in files.segments(TableRef.parse(TABLE), meta) if k not in before]
    database.execute("INSERT INTO items SELECT g, 'late ' || g, 'x' FROM generate_series(301, 310) g")
    cdc_into_lake(pipeline, source_conn_id, lake)
    Path(lost).unlink()

    # committed before the snapshot but not captured yet: in the staged rows and in the stream
    database.execute("UPDATE items SET name = 'seen ' || id WHERE id = 10")
    # open while the snapshot is taken: not in the staged rows (in its xip), committed after
    with psycopg.connect(database.conninfo) as open_tx:
        open_tx.execute("UPDATE items SET name = 'open' WHERE id = 9")
        result = _backfill(pipeline, source_conn_id, "id <= 60")
        open_tx.commit()
    assert (result["rows"], result["condition"]) == (60, "id <= 60")
    staged = Path(result["staged"]["lake"])
    assert staged.is_dir()
    pending = pipeline.state().table(TABLE)
    assert (
        pending.phase == Ready()
        and pending.backfill is not None
        and pending.backfill.id == result["backfill"]
    )
    # after the snapshot, before the apply: the staged rows of these keys are older than the stream
    database.execute("UPDATE items SET name = 'newer', doc = 'changed' WHERE id IN (5, 6)")
    database.execute("DELETE FROM items WHERE id = 7")
    database.execute("UPDATE items SET id = 1008 WHERE id = 8")
    with pytest.raises(StateError, match=r"has backfill .* waiting for apply into lake: run the cdc DAG"):
        _backfill(pipeline, source_conn_id, "id > 200")

    applied = cdc_into_lake(pipeline, source_conn_id, lake)
    assert applied[TABLE]["phase"] == "Ready"
    assert pipeline.state().table(TABLE).backfill is None, "the backfill was not recorded as done"
    assert not staged.exists(), "the staged rows were not removed after apply"

    source = rows(database, TABLE)
    (found,) = lake_session(lake, [{"sql": view_query(database, TABLE)}])
    lake_rows = {r[0]: r for r in sort_rows(found)}
    by_id = {r[0]: r for r in source}
    damaged = {str(i) for i in range(61, 101)}  # lost with the segment, outside the condition
    assert {i for i in by_id if by_id[i] != lake_rows.get(i)} == damaged
    assert {i: lake_rows[i][1] for i in ("61", "100")} == {"61": "item 61", "100": "item 100"}
    assert set(lake_rows) == set(by_id)  # 7 and 8 gone, 1008 there, nothing else added or dropped
    assert by_id["9"][1] == "open" and by_id["5"][1:] == ("newer", "changed") and by_id["10"][1] == "seen 10"


def _ready_state(pipeline: Pipeline) -> None:
    def ready(state: PipelineState) -> PipelineState:
        for table in pipeline.tables:
            done = SyncDone("snap", pipeline.creation_lsn, 1, 1)
            state = state.with_table_phase(table, DataSync()).with_table_phase(table, done)
            state = state.with_table_phase(table, Ready())
        return state

    update_state(pipeline.store, pipeline.name, ready)


def test_refusals_leave_state_and_lake_untouched(
    make_pipeline: MakePipeline, database: Database, source_conn_id: str, lake: Path
) -> None:
    database.execute(DDL[0])
    database.execute("CREATE TABLE events (kind text, at int)")
    database.execute("ALTER TABLE events REPLICA IDENTITY FULL")
    pipeline = make_pipeline([], [TABLE, "public.events"])
    with pytest.raises(StateError, match=r"public.items is Init, not Ready: .* or rebaseline it"):
        _backfill(pipeline, source_conn_id, "id > 1")
    _ready_state(pipeline)
    state = pipeline.state()
    with pytest.raises(
        ConfigError, match=r"backfill_filter 'idd > 1': table public.items has no column 'idd'; its columns"
    ):
        _backfill(pipeline, source_conn_id, "idd > 1")
    with pytest.raises(ConfigError, match=r"public.events has no key short of the whole row .* rebaseline"):
        _backfill(pipeline, source_conn_id, "", table="public.events")
    assert pipeline.state() == state
    assert not any(lake.glob("**/backfill/*")), "a refused backfill staged rows"
