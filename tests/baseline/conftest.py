"""Fixtures of baseline tests: a direct way to run a baseline into the test's ``lake``.

``run_baseline`` runs ``PgBaselineOperator.execute`` in this process (real PostgreSQL, real
spark-submit and Spark); DAG-level behaviour is tested through ``run_dag`` elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.state.model import PipelineState

PIPELINE = "baseline_test"
RunBaseline = Callable[..., dict[str, Any]]


def baseline_slot(conn_id: str) -> str:
    """A pgoutput slot in the database of ``conn_id`` (created unless it exists), named after the
    database: a baseline refuses to run without its pipeline's slot. The ``database`` fixture
    drops it with the database."""
    hook = PgReplicationHook(postgres_conn_id=conn_id)
    name = f"s_{hook.connection.schema}"[:63]
    hook.ensure_slot(name)
    return name


@pytest.fixture
def run_baseline(source_conn_id: str, lake: Path) -> RunBaseline:
    """``run_baseline(table, **operator_kwargs)``: one baseline into the test's lake; its result."""

    def run(table: Any, **kwargs: Any) -> dict[str, Any]:
        kwargs.setdefault("state_backend", "postgres")
        kwargs.setdefault("progress_seconds", 2)
        kwargs.setdefault("slot_name", baseline_slot(source_conn_id))
        op = PgBaselineOperator(
            task_id="baseline", pipeline=PIPELINE, table=table, postgres_conn_id=source_conn_id, **kwargs
        )
        return op.execute({"ti": None})  # type: ignore[typeddict-item]

    return run


def pipeline_state(source_conn_id: str) -> PipelineState:
    """The test pipeline's state in the source's ``pgsync`` schema (state_backend='postgres')."""
    return PostgresStateStore(PgReplicationHook(postgres_conn_id=source_conn_id)).load(PIPELINE)


def read_base(result: dict[str, Any]) -> pa.Table:
    """The base a baseline wrote (its first destination), read with pyarrow."""
    return pq.read_table(result["written"][0]["location"])
