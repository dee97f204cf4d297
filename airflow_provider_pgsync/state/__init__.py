"""Pipeline state: the model and the store protocol (pure).

Its two backends do I/O and so live in ``hooks/``: ``hooks.postgres_state_store`` (a PostgreSQL
table) and ``hooks.variable_state_store`` (Airflow Variables), serialised by the advisory
lock of ``hooks.advisory_lock``.
"""

from __future__ import annotations

from airflow_provider_pgsync.state.model import (
    Backfill,
    ColumnInfo,
    DataSync,
    Errored,
    Init,
    PipelineState,
    Ready,
    SegmentInfo,
    SyncDone,
    TablePhase,
    TableState,
    check_transition,
    table_key,
    validate_pipeline_name,
)
from airflow_provider_pgsync.state.store import StateStore, update_state

__all__ = [
    "Backfill",
    "ColumnInfo",
    "DataSync",
    "Errored",
    "Init",
    "PipelineState",
    "Ready",
    "SegmentInfo",
    "StateStore",
    "SyncDone",
    "TablePhase",
    "TableState",
    "check_transition",
    "table_key",
    "update_state",
    "validate_pipeline_name",
]
