"""PgApplyOperator in a real Airflow DAG run: capture -> apply into a PostgreSQL replica."""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow.sdk import DAG

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.operators.apply import PgApplyOperator
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.state.phases import DataSync, Ready, SyncDone
from airflow_provider_pgsync.state.store import update_state
from tests.capture.conftest import MakePipeline, make_pipeline  # noqa: F401 (the fixture)
from tests.conftest import Database, RunDag
from tests.support.replica import rows


def test_capture_then_apply_in_a_dag_run(
    database: Database,
    replica: Database,
    make_pipeline: MakePipeline,  # noqa: F811
    run_dag: RunDag,
    source_conn_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_REPLICA", replica.cluster.url(replica.name, with_password=True))
    pipeline = make_pipeline(["CREATE TABLE items (id int PRIMARY KEY, name text)"], ["items"])
    # an empty table's baseline: nothing to copy, every later transaction applies
    xmax, lsn = database.execute(
        "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_insert_lsn()::text"
    )[0]
    done = SyncDone("00000003-00000002-1", LSN.parse(str(lsn)), int(str(xmax)), int(str(xmax)))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase("public.items", DataSync()))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase("public.items", done))
    database.execute("INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 50) g")
    database.execute("UPDATE items SET name = 'changed' WHERE id %% 5 = 0")
    database.execute("DELETE FROM items WHERE id > 45")

    with DAG("pgsync_apply", schedule=None, default_args={"retries": 0}) as dag:
        pipeline.cdc_tasks(
            [{"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}], batch_rows=16
        )
    run = run_dag(dag)

    assert {ti.task_id: ti.state for ti in run.get_task_instances()} == {
        "capture": "success",
        "apply": "success",
    }
    assert rows(replica, "public.items") == rows(database, "public.items")
    state = pipeline.state()
    assert state.table("public.items").phase == Ready()
    assert state.watermarks["replica"].count("/") == 2  # "X/Y/seq"


def test_an_unknown_destination_kind_is_refused_naming_it() -> None:
    op = PgApplyOperator(
        task_id="apply", pipeline="p", changelog_uri="/tmp/x", destinations=[{"kind": "warehouse"}]
    )
    with pytest.raises(ConfigError, match="'warehouse'"):
        from airflow_provider_pgsync.operators.apply import open_destination

        open_destination(op.destinations[0])
