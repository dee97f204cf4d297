"""A table dropped in the source is left out of a reconciliation, with a warning, and the other
tables are compared (real servers, the reconcile DAG under ``dag.test()`` while capture and apply
run): a table of that name created later is another table, never compared with the replica."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_pgsync.dags.factory import reconcile_dag
from airflow_provider_pgsync.pipeline import PipelineConfig, PostgresDestinationConfig, TableConfig
from airflow_provider_pgsync.pipeline.parts import ChangelogConfig, ReconcileConfig, StateConfig
from tests.capture.conftest import MakePipeline
from tests.conftest import Database, RunDag
from tests.reconcile.conftest import apply_into, looping
from tests.support.replica import empty_capture_baseline, rows


def test_a_table_dropped_in_the_source_is_not_compared(
    make_pipeline: MakePipeline,
    database: Database,
    replica: Database,
    replica_conn_id: str,
    source_conn_id: str,
    run_dag: RunDag,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ddl = [f"CREATE TABLE {t} (id int PRIMARY KEY, name text)" for t in ("public.items", "public.gone")]
    pipeline = make_pipeline(ddl, ["public.items", "public.gone"])
    for table in ("public.items", "public.gone"):
        empty_capture_baseline(pipeline, database, table)
        database.execute(f"INSERT INTO {table} SELECT g, 'row ' || g FROM generate_series(1, 100) g")  # noqa: S608
    pipeline.capture_until_idle()
    apply_into(pipeline, replica)
    last = rows(replica, "public.gone")
    database.execute("DROP TABLE public.gone")
    database.execute("CREATE TABLE public.gone (id int PRIMARY KEY, name text)")  # another table
    pipeline.capture_until_idle()
    assert pipeline.state().table("public.gone").dropped is not None
    config = PipelineConfig(
        name=pipeline.name,
        source_conn_id=source_conn_id,
        tables=(TableConfig("public.items"), TableConfig("public.gone")),
        destinations=(PostgresDestinationConfig(conn_id=replica_conn_id, name="replica"),),
        slot_name=pipeline.slot,
        publication_name=pipeline.settings.publication_name,
        state=StateConfig(backend="postgres"),
        changelog=ChangelogConfig(uri=pipeline.settings.changelog_uri),
        reconcile=ReconcileConfig(wait_timeout=120),
    )

    def cdc() -> None:
        pipeline.capture()
        apply_into(pipeline, replica)

    with caplog.at_level(logging.WARNING), looping(cdc):
        run = run_dag(reconcile_dag(config))
    [ti] = run.get_task_instances()
    assert ti.state == "success"
    result = ti.xcom_pull(task_ids="reconcile", key="result")
    assert [(t["table"], t["status"]) for t in result["tables"]] == [("public.items", "equal")]
    said = capsys.readouterr().out + caplog.text  # the task's log, printed or through logging
    assert "table public.gone is not compared: it was dropped in the source at" in said
    assert rows(replica, "public.gone") == last, "the replica keeps its rows as of the drop"
