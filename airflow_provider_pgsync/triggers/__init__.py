"""Async triggers of the pgsync sensors: pending changes, slot lag, table phase; and the
pending-changes watcher that schedules an event-driven cdc DAG (``PendingChangesEventTrigger``).

Each trigger polls with async I/O (psycopg ``AsyncConnection``; Airflow Variables in a
worker thread), decides with the pure functions of ``triggers.checks`` shared with the
sensors' ``poke``, and fires one event. Only connection ids and names are serialized.
"""

from __future__ import annotations

from airflow_provider_pgsync.triggers.pending_changes import PendingChangesTrigger
from airflow_provider_pgsync.triggers.pending_changes_event import PendingChangesEventTrigger
from airflow_provider_pgsync.triggers.slot_lag import SlotLagTrigger
from airflow_provider_pgsync.triggers.table_phase import TablePhaseTrigger

__all__ = ["PendingChangesEventTrigger", "PendingChangesTrigger", "SlotLagTrigger", "TablePhaseTrigger"]
