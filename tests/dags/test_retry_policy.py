"""Retries only where they can help, in real Airflow runs of the cdc DAG: an error a retry would
meet again (here a connection the config names and Airflow does not have) fails the task at
once, with no retry attempt; a transient one (capture's lock held by another run) is retried."""

from __future__ import annotations

from typing import Any

from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.operators.retry import PgSyncRetryPolicy
from tests.conftest import Database
from tests.dags.conftest import MakePipelineDags


def _capture(run: Any) -> Any:
    return next(t for t in run.get_task_instances() if t.task_id == "capture")


def test_a_config_error_fails_the_task_once(database: Database, make_pipeline_dags: MakePipelineDags) -> None:
    database.execute("CREATE TABLE t (id int PRIMARY KEY)")
    pipeline = make_pipeline_dags(
        ["t"], source_conn_id="pgsync_nowhere", schedules={"retries": 2, "retry_delay": "1s"}
    )
    assert isinstance(pipeline.dag("cdc").get_task("capture").retry_policy, PgSyncRetryPolicy)
    run = pipeline.run("cdc")
    capture = _capture(run)
    assert str(capture.state) == "failed"
    assert capture.try_number == 1, "a configuration error was retried"
    assert capture.max_tries == 2  # the retries were there to take


def test_a_transient_error_is_retried(
    database: Database, make_pipeline_dags: MakePipelineDags, source_conn_id: str
) -> None:
    database.execute("CREATE TABLE t (id int PRIMARY KEY)")
    pipeline = make_pipeline_dags(["t"], schedules={"retries": 1, "retry_delay": "1s"})
    assert str(pipeline.run("setup").state) == "success"
    hook = PgReplicationHook(postgres_conn_id=source_conn_id)
    with hook.capture_lock(pipeline.config.slot_name, "another capture"):  # CaptureBusyError, retryable
        run = pipeline.run("cdc")
    capture = _capture(run)
    assert str(capture.state) == "failed"
    assert capture.try_number == 2, "a transient error was not retried"
