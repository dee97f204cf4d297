"""DAG factory tests against real servers: a pipeline config on this test's database, its DAGs
stored in the tests' Airflow metadata database like the DAG processor does (all of them, so
setup can trigger the baseline DAG), and runs of one of them with ``dag.test()``."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider_pgsync.dags import build_dags, dag_id
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.state_stores import open_state_store
from airflow_provider_pgsync.pipeline import PipelineConfig
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.store import StateStore
from tests.conftest import Database


@dataclass
class PipelineDags:
    """One pipeline's config and DAGs; ``run(kind, ...)`` runs one of them with ``dag.test()``."""

    config: PipelineConfig
    dags: dict[str, DAG]
    database: Database

    def dag(self, kind: str) -> DAG:
        return self.dags[dag_id(self.config.name, kind)]

    def run(self, kind: str, **test_kwargs: Any) -> Any:
        """Run the pipeline's DAG ``kind``; the DagRun, with ``states`` of its task instances."""
        self.store_dags()
        return self.dag(kind).test(**test_kwargs)

    def store_dags(self) -> None:
        """Store every DAG of the pipeline in the metadata database, as the DAG processor does."""
        from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

        bag = DagBag(dag_folder=os.devnull, collect_dags=False)
        for dag in self.dags.values():
            bag.bag_dag(dag)
        sync_bag_to_db(bag, "dags-folder", None)

    def every_table(self) -> dict[str, Any]:
        """The baseline DAG's conf that baselines every table into every destination."""
        return {"tables": list(self.config.table_keys), "mode": "rebaseline"}

    def store(self) -> StateStore:
        hook = PgReplicationHook(postgres_conn_id=self.config.source_conn_id)
        state = self.config.state
        return open_state_store(state.backend, hook, state_conn_id=state.conn_id, schema=state.schema)

    def state(self) -> PipelineState:
        return self.store().load(self.config.name)

    def slot_exists(self) -> bool:
        rows = self.database.execute(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (self.config.slot_name,)
        )
        return bool(rows)

    def publication_exists(self) -> bool:
        rows = self.database.execute(
            "SELECT 1 FROM pg_publication WHERE pubname = %s", (self.config.publication_name,)
        )
        return bool(rows)


MakePipelineDags = Callable[..., PipelineDags]

CDC_GREEN = {
    "capture": "success",
    "apply": "success",
    "rebaselines": "skipped",
    "trigger_rebaseline": "skipped",
    "outcome": "success",
}
"""The task states of a cdc run that applied everything and sent no table back to baseline."""


@pytest.fixture
def make_pipeline_dags(
    database: Database, source_conn_id: str, tmp_path: Path, airflow_db: None
) -> MakePipelineDags:
    """``make_pipeline_dags(tables, **config)``: the DAGs of a pipeline on this test's database
    (changelog in the test's folder; other keys as in a config file). The cdc tasks are not
    retried unless ``schedules`` says so: ``dag.test()`` would wait out each retry of a run
    that is meant to fail."""

    def make(tables: list[Any], **values: Any) -> PipelineDags:
        data = {
            "name": f"p_{database.name}",
            "source_conn_id": source_conn_id,
            "tables": tables,
            "changelog": {"uri": str(tmp_path / "changelog")},
            **values,
            "schedules": {"retries": 0, **values.get("schedules", {})},
        }
        config = PipelineConfig.from_mapping(data)
        return PipelineDags(config, build_dags(config), database)

    return make


def task_states(run: Any) -> dict[str, str]:
    """``{task_id: state}`` of a DagRun's task instances (mapped ones as ``task_id[i]``)."""
    found = {}
    for ti in run.get_task_instances():
        key = ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"
        found[key] = str(ti.state)
    return found


def triggered_baselines(pipeline: PipelineDags) -> list[tuple[str, dict[str, Any]]]:
    """(run id, conf) of the pipeline's baseline DAG runs other DAGs triggered, oldest first."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        runs = (
            session.query(DagRun)
            .filter(DagRun.dag_id == dag_id(pipeline.config.name, "baseline"))
            .filter(DagRun.run_type == "operator_triggered")
            .order_by(DagRun.id)
            .all()
        )
        return [(r.run_id, dict(r.conf or {})) for r in runs]
