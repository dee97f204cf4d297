"""The pipeline's reconcile DAG under real Airflow (``dag.test()``): it compares the source with
a PostgreSQL replica while capture and apply run, fails naming what differs, and pushes its
result to XCom ``result`` even so."""

from __future__ import annotations

from airflow_provider_pgsync.dags.factory import reconcile_dag
from airflow_provider_pgsync.pipeline import PipelineConfig, PostgresDestinationConfig, TableConfig
from airflow_provider_pgsync.pipeline.parts import ChangelogConfig, ReconcileConfig, StateConfig
from tests.capture.conftest import MakePipeline
from tests.conftest import Database, RunDag
from tests.reconcile.conftest import apply_into, looping
from tests.support.replica import empty_capture_baseline, rows


def test_the_reconcile_dag_fails_naming_the_difference_and_keeps_its_result(
    make_pipeline: MakePipeline,
    database: Database,
    replica: Database,
    replica_conn_id: str,
    source_conn_id: str,
    run_dag: RunDag,
) -> None:
    pipeline = make_pipeline(["CREATE TABLE items (id int PRIMARY KEY, name text)"], ["public.items"])
    empty_capture_baseline(pipeline, database, "public.items")
    database.execute("INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 200) g")
    pipeline.capture_until_idle()
    apply_into(pipeline, replica)
    assert rows(replica, "public.items") == rows(database, "public.items")
    replica.execute("DELETE FROM items WHERE id = 17")
    config = PipelineConfig(
        name=pipeline.name,
        source_conn_id=source_conn_id,
        tables=(TableConfig("public.items"),),
        destinations=(PostgresDestinationConfig(conn_id=replica_conn_id, name="replica"),),
        slot_name=pipeline.slot,
        publication_name=pipeline.settings.publication_name,
        state=StateConfig(backend="postgres"),
        changelog=ChangelogConfig(uri=pipeline.settings.changelog_uri),
        reconcile=ReconcileConfig(wait_timeout=120),
    )
    dag = reconcile_dag(config)

    def cdc() -> None:
        pipeline.capture()
        apply_into(pipeline, replica)

    with looping(cdc):
        run = run_dag(dag)

    [ti] = run.get_task_instances()
    assert ti.state == "failed"
    result = ti.xcom_pull(task_ids="reconcile", key="result")
    [table] = result["tables"]
    assert (table["table"], table["destination"], table["status"]) == ("public.items", "replica", "different")
    assert (table["missing"], table["extra"], table["different"], table["source_rows"]) == (1, 0, 0, 200)
    assert table["samples"]["missing"] == [{"id": "17"}]
    assert result["snapshot_lsn"].count("/") == 1 and result["finished_at"]
