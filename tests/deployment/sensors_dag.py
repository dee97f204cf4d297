"""A DAG of the three pgsync sensors, deferrable, for the real-scheduler tests.

Names come from the environment of the deployment (``PGSYNC_TEST_*``), so the file holds
no connection detail.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

from airflow.sdk import DAG

from airflow_provider_pgsync.sensors import PgPendingChangesSensor, PgSlotLagSensor, PgTablePhaseSensor

SOURCE = os.environ.get("PGSYNC_TEST_SOURCE_CONN", "postgres_default")
PIPELINE = os.environ.get("PGSYNC_TEST_PIPELINE", "sched")
SLOT = f"pgsync_{PIPELINE}"

with DAG("pgsync_test_sensors", schedule=None, start_date=datetime(2024, 1, 1, tzinfo=UTC), catchup=False):
    PgPendingChangesSensor(
        task_id="pending_changes",
        slot_name=SLOT,
        publication_name=SLOT,
        min_changes=1000,
        postgres_conn_id=SOURCE,
        poke_interval=2,
        timeout=600,
    )
    PgSlotLagSensor(
        task_id="slot_lag",
        slot_name=SLOT,
        threshold_bytes=1_000_000,
        lag_measure="unconfirmed",
        postgres_conn_id=SOURCE,
        poke_interval=2,
        timeout=600,
    )
    PgTablePhaseSensor(
        task_id="table_phase",
        pipeline=PIPELINE,
        table="public.items",
        phase="Ready",
        state_backend="postgres",
        postgres_conn_id=SOURCE,
        poke_interval=2,
        timeout=600,
    )
