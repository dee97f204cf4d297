"""pgsync sensors: pending changes in the slot, slot lag and WAL health, a table's phase.

Each is deferrable by default (it defers at once to its trigger in ``triggers/``) and
pokes with the same check when ``deferrable=False``.
"""

from __future__ import annotations

from airflow_provider_pgsync.sensors.pending_changes import PgPendingChangesSensor
from airflow_provider_pgsync.sensors.slot_lag import PgSlotLagSensor
from airflow_provider_pgsync.sensors.table_phase import PgTablePhaseSensor

__all__ = ["PgPendingChangesSensor", "PgSlotLagSensor", "PgTablePhaseSensor"]
