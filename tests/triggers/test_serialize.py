"""What the sensors hand the triggerer: classpath and kwargs that re-create the trigger, and no secret."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk.module_loading import import_string
from airflow.sdk.serde import deserialize, serialize

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.sensors import PgPendingChangesSensor, PgSlotLagSensor, PgTablePhaseSensor
from airflow_provider_pgsync.sensors.base import PgSyncSensor
from airflow_provider_pgsync.triggers import PendingChangesTrigger, SlotLagTrigger, TablePhaseTrigger
from pgcluster import dev_password
from tests.triggers.conftest import first_event


def _sensors(conn_id: str) -> list[PgSyncSensor]:
    return [
        PgPendingChangesSensor(
            task_id="pending",
            slot_name="pgsync_orders",
            publication_name="pgsync_pub",
            min_changes=500,
            max_wait_for_changes=timedelta(minutes=10),
            postgres_conn_id=conn_id,
            poke_interval=30,
        ),
        PgSlotLagSensor(
            task_id="lag", slot_name="pgsync_orders", threshold_bytes=1 << 30, postgres_conn_id=conn_id
        ),
        PgTablePhaseSensor(
            task_id="phase",
            pipeline="orders",
            table="public.orders",
            state_backend="postgres",
            postgres_conn_id=conn_id,
            state_conn_id="pgsync_control",
        ),
    ]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["pending", "lag", "phase"])
def test_serialized_triggers_hold_the_connection_id_and_names_only(source_conn_id: str, index: int) -> None:
    password = dev_password()
    assert password in os.environ[f"AIRFLOW_CONN_{source_conn_id.upper()}"], (
        "the connection must have a secret"
    )
    sensor = _sensors(source_conn_id)[index]
    trigger = sensor.make_trigger({})

    classpath, kwargs = trigger.serialize()
    encoded = json.dumps(serialize(kwargs))

    assert classpath == f"{type(trigger).__module__}.{type(trigger).__name__}"
    assert import_string(classpath) is type(trigger)
    assert password not in encoded and password not in repr(trigger)
    assert not any("password" in key or "uri" in key for key in kwargs)
    assert kwargs["postgres_conn_id"] == source_conn_id
    assert kwargs["poll_interval"] == sensor.poke_interval
    decoded = deserialize(json.loads(encoded))
    assert isinstance(decoded, dict)
    again = import_string(classpath)(**decoded)
    assert again.serialize() == (classpath, kwargs)


def test_kwargs_of_each_trigger(source_conn_id: str) -> None:
    pending, lag, phase = (s.make_trigger({}) for s in _sensors(source_conn_id))
    assert isinstance(pending, PendingChangesTrigger)
    assert isinstance(lag, SlotLagTrigger)
    assert isinstance(phase, TablePhaseTrigger)

    kwargs: dict[str, Any] = pending.serialize()[1]
    deadline = kwargs.pop("deadline")
    assert kwargs == {
        "slot_name": "pgsync_orders",
        "publication_name": "pgsync_pub",
        "min_changes": 500,
        "postgres_conn_id": source_conn_id,
        "poll_interval": 30.0,
    }
    assert deadline.tzinfo is not None
    assert lag.serialize()[1] == {
        "slot_name": "pgsync_orders",
        "threshold_bytes": 1 << 30,
        "wal_statuses": ["lost", "unreserved"],
        "lag_measure": "retained",
        "postgres_conn_id": source_conn_id,
        "poll_interval": 60.0,
    }
    assert phase.serialize()[1] == {
        "pipeline": "orders",
        "table": "public.orders",
        "phase": "Ready",
        "state_backend": "postgres",
        "postgres_conn_id": source_conn_id,
        "state_conn_id": "pgsync_control",
        "state_schema": "pgsync",
        "poll_interval": 60.0,
    }


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda: PendingChangesTrigger(slot_name="Bad-Name", publication_name="p"), "replication slot name"),
        (lambda: PendingChangesTrigger(slot_name="s", publication_name="p", min_changes=0), "min_changes"),
        (
            lambda: SlotLagTrigger(slot_name="s", wal_statuses=()),
            "give threshold_bytes, wal_statuses or both",
        ),
        (lambda: SlotLagTrigger(slot_name="s", wal_statuses=["full"]), "are not slot WAL statuses"),
        (lambda: SlotLagTrigger(slot_name="s", lag_measure="flush"), "lag_measure 'flush' is unknown"),
        (
            lambda: TablePhaseTrigger(pipeline="p", table="t", phase="Done"),
            "phase 'Done' is not a table phase",
        ),
        (
            lambda: TablePhaseTrigger(pipeline="p", table="t", state_backend="s3"),
            "state_backend 's3' is unknown",
        ),
        (lambda: SlotLagTrigger(slot_name="s", poll_interval=0), "poll_interval must be a positive number"),
    ],
)
def test_bad_arguments_are_config_errors(build: Any, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        build()


def test_an_undefined_connection_is_a_config_error_event() -> None:
    trigger = SlotLagTrigger(
        slot_name="s", threshold_bytes=1, postgres_conn_id="pgsync_undefined", poll_interval=0.1
    )

    payload = first_event(trigger)

    assert (payload["status"], payload["error"]) == ("error", "ConfigError")
    assert "Airflow connection 'pgsync_undefined' is not defined" in payload["message"]
