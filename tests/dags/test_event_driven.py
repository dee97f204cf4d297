"""The event-driven cdc DAG as built and as Airflow stores it: scheduled on the pending-changes
Asset with its watcher, serialized by Airflow's own serializer, its trigger registered by the DAG
processor's code with the config's names and connection id only; and the cdc tasks' retries."""

from __future__ import annotations

import json
import os
import uuid
from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk import Asset

from airflow_provider_pgsync.dags import build_dags
from airflow_provider_pgsync.pipeline import PipelineConfig
from airflow_provider_pgsync.triggers import PendingChangesEventTrigger
from pgcluster import dev_password

EVENT_DRIVEN = {
    "name": "shop",
    "source_conn_id": "shop_db",
    "tables": ["orders"],
    "schedules": {"cdc": {"on_changes": 500, "max_wait": "30s", "poll_interval": "2s"}},
}
TRIGGER = "airflow_provider_pgsync.triggers.pending_changes_event.PendingChangesEventTrigger"
KWARGS = {
    "slot_name": "pgsync_shop",
    "publication_name": "pgsync_pub_shop",
    "postgres_conn_id": "shop_db",
    "on_changes": 500,
    "max_wait": 30.0,
    "poll_interval": 2.0,
    "wal_bytes": 64 * 2**20,
}


def _cdc(config: dict[str, Any]) -> Any:
    pipeline = PipelineConfig.from_mapping({"publication_name": "pgsync_pub_shop", **config})
    return build_dags(pipeline)[f"pgsync_{pipeline.name}_cdc"]


def test_the_cdc_dag_is_scheduled_on_the_pending_changes_asset_with_its_watcher() -> None:
    dag = _cdc(EVENT_DRIVEN)

    asset = dag.timetable.asset_condition
    assert isinstance(asset, Asset)
    assert (asset.name, asset.uri) == ("pgsync_shop_pending_changes", "pgsync://shop/slot/pgsync_shop")
    (watcher,) = asset.watchers
    assert watcher.name == "pgsync_shop_pending_changes"
    assert isinstance(watcher.trigger, PendingChangesEventTrigger)
    assert watcher.trigger.serialize() == (TRIGGER, KWARGS)
    assert dag.max_active_runs == 1
    assert "Event-driven" in dag.doc_md and "as soon as 500 are pending" in dag.doc_md
    assert "30s after its last request" in dag.doc_md
    # the same config parsed again gives the same trigger: Airflow keeps one watcher, not two
    assert _cdc(EVENT_DRIVEN).timetable.asset_condition.watchers[0].trigger.serialize() == (TRIGGER, KWARGS)


def test_airflow_serializes_the_dag_with_its_watcher() -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    data = DagSerialization.to_dict(_cdc(EVENT_DRIVEN))
    text = json.dumps(data)

    assert TRIGGER in text and "pgsync://shop/slot/pgsync_shop" in text
    again = DagSerialization.from_dict(data)
    assert again.timetable.asset_condition.name == "pgsync_shop_pending_changes"
    asset = json.loads(text)["dag"]["timetable"]["__var"]["asset_condition"]
    (watcher,) = asset["watchers"]
    trigger = {"classpath": TRIGGER, "kwargs": KWARGS}
    assert watcher == {"name": "pgsync_shop_pending_changes", "trigger": trigger}


def test_a_cron_or_manual_cdc_dag_has_no_asset_schedule() -> None:
    cron = _cdc({**EVENT_DRIVEN, "schedules": {"cdc": "*/2 * * * *"}})
    manual = _cdc({**EVENT_DRIVEN, "schedules": {"cdc": None}})
    assert getattr(cron.timetable, "expression", None) == "*/2 * * * *"
    assert "Schedule `*/2 * * * *`." in cron.doc_md
    assert type(manual.timetable).__name__ == "NullTimetable"
    assert type(cron.timetable).__name__ != "AssetTriggeredTimetable"
    assert type(_cdc(EVENT_DRIVEN).timetable).__name__ == "AssetTriggeredTimetable"


@pytest.mark.parametrize(
    ("schedules", "retries", "delay"),
    [({}, 2, timedelta(seconds=10)), ({"retries": 5, "retry_delay": "1m"}, 5, timedelta(minutes=1))],
)
def test_capture_and_apply_are_retried_and_the_other_tasks_not(
    schedules: dict[str, Any], retries: int, delay: timedelta
) -> None:
    for config in (EVENT_DRIVEN, {**EVENT_DRIVEN, "schedules": schedules}):
        dag = _cdc({**config, "schedules": {**config["schedules"], **schedules}})
        for task_id in ("capture", "apply"):
            task = dag.get_task(task_id)
            assert (task.retries, task.retry_delay) == (retries, delay), task_id
        for task_id in ("rebaselines", "trigger_rebaseline", "outcome"):
            assert dag.get_task(task_id).retries == 0, task_id
        assert f"retried up to {retries} time(s)" in dag.doc_md


def test_no_retries_is_said_in_the_doc() -> None:
    dag = _cdc({**EVENT_DRIVEN, "schedules": {"retries": 0}})
    assert dag.get_task("capture").retries == 0
    assert "are not retried" in dag.doc_md


def test_the_dag_processor_registers_the_watchers_trigger_without_a_secret(
    airflow_db: None, source_conn_id: str
) -> None:
    """As the DAG processor stores the DAG: an unpaused event-driven DAG gets its watcher's
    trigger in the metadata database (which the triggerer runs), with the connection id only."""
    from airflow.api.common.delete_dag import delete_dag
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models.asset import AssetModel
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    assert dev_password() in os.environ[f"AIRFLOW_CONN_{source_conn_id.upper()}"]
    name = f"ev_{uuid.uuid4().hex[:8]}"
    dag = _cdc({**EVENT_DRIVEN, "name": name, "source_conn_id": source_conn_id})
    bag = DagBag(dag_folder=os.devnull, collect_dags=False)
    bag.bag_dag(dag)
    try:
        sync_bag_to_db(bag, "dags-folder", None)
        with create_session() as session:
            session.get(DagModel, dag.dag_id).is_paused = False  # watchers of paused DAGs do not run
        sync_bag_to_db(bag, "dags-folder", None)
        with create_session() as session:
            asset = session.scalars(
                select(AssetModel).where(AssetModel.name == f"pgsync_{name}_pending_changes")
            ).one()
            assert asset.uri == f"pgsync://{name}/slot/pgsync_{name}"
            (trigger,) = asset.triggers
            assert trigger.classpath == TRIGGER
            assert trigger.kwargs == {
                **KWARGS,
                "slot_name": f"pgsync_{name}",
                "postgres_conn_id": source_conn_id,
            }
            assert dev_password() not in json.dumps(trigger.kwargs)
            assert [w.name for w in asset.watchers] == [f"pgsync_{name}_pending_changes"]
            # parsing the same config again keeps that one trigger
            trigger_id = trigger.id
        sync_bag_to_db(bag, "dags-folder", None)
        with create_session() as session:
            asset = session.scalars(
                select(AssetModel).where(AssetModel.name == f"pgsync_{name}_pending_changes")
            ).one()
            assert [t.id for t in asset.triggers] == [trigger_id]
    finally:
        delete_dag(dag.dag_id)
