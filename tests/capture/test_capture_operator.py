"""PgCaptureOperator in real Airflow DAG runs (``dag.test()``), with both state backends."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from airflow.models.renderedtifields import RenderedTaskInstanceFields
from airflow.sdk import DAG, Param

from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.variable_state_store import VariableStateStore
from airflow_provider_pgsync.operators.capture import PgCaptureOperator
from airflow_provider_pgsync.state.store import StateStore
from tests.capture.conftest import MakePipeline, OpenStore, Pipeline
from tests.conftest import Database, RunDag


def _open_store(backend: str) -> OpenStore:
    def open_store(hook: PgReplicationHook) -> StateStore:
        # what open_state_store(backend, hook) builds inside the task, opened from the test
        if backend == "variables":
            return VariableStateStore(lock=hook)
        return PostgresStateStore(hook)

    return open_store


def _capture_dag(dag_id: str, pipeline: Pipeline, conn_id: str, backend: str) -> DAG:
    """One capture task; the pipeline and the changelog location come from Params (templated)."""
    with DAG(
        dag_id,
        schedule=None,
        params={
            "pipeline": Param("unset", type="string"),
            "changelog": Param("unset", type="string"),
        },
        default_args={"retries": 0},
    ) as dag:
        PgCaptureOperator(
            task_id="capture",
            pipeline="{{ params.pipeline }}",
            slot_name=pipeline.slot,
            publication_name=pipeline.settings.publication_name,
            changelog_uri="{{ params.changelog }}/{{ dag.dag_id }}",
            postgres_conn_id=conn_id,
            state_backend=backend,
            max_changes=1000,
        )
    return dag


def _run(run_dag: RunDag, dag: DAG, pipeline: Pipeline, root: str) -> tuple[Any, Any]:
    run = run_dag(dag, run_conf={"pipeline": pipeline.name, "changelog": root})
    [ti] = run.get_task_instances()
    return run, ti


@pytest.mark.parametrize("backend", ["postgres", "variables"])
def test_capture_operator_in_a_dag_run(
    backend: str,
    database: Database,
    make_pipeline: MakePipeline,
    run_dag: RunDag,
    source_conn_id: str,
    tmp_path: Path,
) -> None:
    dag_id = f"pgsync_capture_{backend}"
    root = str(tmp_path / "rendered")
    pipeline = make_pipeline(
        ["CREATE TABLE items (id int PRIMARY KEY, name text)"], ["items"], open_store=_open_store(backend)
    )
    # the operator renders the changelog location; read it back from there
    pipeline.settings = dataclasses.replace(pipeline.settings, changelog_uri=f"{root}/{dag_id}")
    dag = _capture_dag(dag_id, pipeline, source_conn_id, backend)
    database.execute("INSERT INTO items VALUES (1, 'one'), (2, 'two')")
    database.execute("UPDATE items SET name = 'uno' WHERE id = 1")
    before = pipeline.slot_info().confirmed_flush_lsn

    run, ti = _run(run_dag, dag, pipeline, root)

    assert (str(run.state), str(ti.state)) == ("success", "success")
    rendered = RenderedTaskInstanceFields.get_templated_fields(ti)
    assert rendered is not None
    assert (rendered["changelog_uri"], rendered["pipeline"]) == (f"{root}/{dag_id}", pipeline.name)
    state = pipeline.state()
    assert state.version == 2
    other = "postgres" if backend == "variables" else "variables"
    assert _open_store(other)(pipeline.hook).load(pipeline.name).version == 0, "saved in the other backend"
    assert state.last_end_lsn is not None
    assert ti.xcom_pull(task_ids="capture") == {
        "changes": 3,
        "transactions": 2,
        "segments": [s.path for s in state.segments],
        "advanced_to": str(state.last_end_lsn),
        "idle": True,
        "rows_by_table": {"public.items": 3},
        # the lag the run found, for the status page's chart (idle: it took everything)
        "start_lsn": str(before),
        "upto_lsn": str(state.last_end_lsn),
    }
    assert len(state.segments) == 1
    assert pipeline.slot_info().confirmed_flush_lsn == state.last_end_lsn
    assert [(c["_op"], c["id"], c["name"]) for c in pipeline.changes("items")] == [
        ("I", "1", "one"),
        ("I", "2", "two"),
        ("U", "1", "uno"),
    ]

    # a second run goes on from the state the first one saved
    database.execute("DELETE FROM items WHERE id = 2")
    run, ti = _run(run_dag, dag, pipeline, root)

    assert str(run.state) == "success"
    result = ti.xcom_pull(task_ids="capture")
    later = pipeline.state()
    assert later.version == 3
    assert (result["changes"], result["transactions"]) == (1, 1)
    assert result["advanced_to"] == str(later.last_end_lsn)
    assert result["segments"] == [s.path for s in later.segments if s not in state.segments]
    assert [(c["_op"], c["_old_key_id"]) for c in pipeline.changes("items")][-1] == ("D", "2")
    assert len(pipeline.changes("items")) == 4
