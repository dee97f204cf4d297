"""VariableStateStore specifics: the Variable it writes, its lock, and use inside a task (dag.test)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from airflow.models import Variable
from airflow.sdk import DAG, task

from airflow_provider_pgsync.errors import LockTimeoutError, StateError
from airflow_provider_pgsync.hooks.advisory_lock import AdvisoryLock, state_lock_key
from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.variable_state_store import VariableStateStore
from airflow_provider_pgsync.state.model import Init, PipelineState
from airflow_provider_pgsync.state.store import update_state
from tests.state.conftest import Connect

pytestmark = pytest.mark.usefixtures("airflow_db")


def test_one_json_variable_per_pipeline(connect: Connect, pipeline: str) -> None:
    store = VariableStateStore(lock=connect, prefix="my_prefix.")
    saved = store.save(PipelineState(pipeline).with_table_phase('"Odd Schema".t', Init()))
    stored = json.loads(Variable.get(f"my_prefix.{pipeline}"))
    assert stored["version"] == 1 and list(stored["tables"]) == ['"Odd Schema".t']
    assert store.key(pipeline) == f"my_prefix.{pipeline}"
    assert VariableStateStore(lock=connect).load(pipeline).version == 0  # another prefix
    assert store.load(pipeline) == saved


def test_save_waits_for_the_lock(connect: Connect, pipeline: str) -> None:
    store = VariableStateStore(lock=connect, lock_timeout=0.2)
    with AdvisoryLock(connect, state_lock_key(pipeline)):
        assert store.load(pipeline).version == 0  # reading takes no lock
        with pytest.raises(LockTimeoutError, match=rf"pgsync_state:{pipeline}"):
            store.save(PipelineState(pipeline))
    assert store.save(PipelineState(pipeline)).version == 1


def test_hand_edited_variable_is_a_state_error(connect: Connect, pipeline: str) -> None:
    store = VariableStateStore(lock=connect)
    Variable.set(store.key(pipeline), "{not json")
    with pytest.raises(StateError, match=rf"Variable 'pgsync_state__{pipeline}' does not hold JSON"):
        store.load(pipeline)
    Variable.set(store.key(pipeline), json.dumps(PipelineState("someone_else").to_json()))
    with pytest.raises(StateError, match="holds the state of pipeline 'someone_else'"):
        store.load(pipeline)


def test_stores_inside_a_task_under_dag_test(
    run_dag: Callable[..., Any], source_conn_id: str, connect: Connect, pipeline: str
) -> None:
    """Inside a task the store goes through the Task SDK (airflow.sdk.Variable) and a hook."""

    @task
    def bump(conn_id: str, name: str) -> int:
        from airflow.sdk.execution_time import task_runner

        assert getattr(task_runner, "SUPERVISOR_COMMS", None) is not None  # really in task context
        hook = PgReplicationHook(postgres_conn_id=conn_id)
        total = 0
        for store in (VariableStateStore(lock=hook), PostgresStateStore(hook)):
            first = update_state(store, name, lambda s: s.with_watermark("runs", "1"))
            second = update_state(store, name, lambda s: s.with_watermark("runs", "2"))
            store.delete(name + "_gone")
            total += first.version + second.version
        return total

    with DAG(f"state_in_task_{pipeline}", schedule=None, default_args={"retries": 0}) as dag:
        bump(source_conn_id, pipeline)

    run = run_dag(dag)
    assert str(run.state) == "success"
    for store in (VariableStateStore(lock=connect), PostgresStateStore(connect)):
        state = store.load(pipeline)
        assert state.version == 2 and state.watermarks == {"runs": "2"}
