"""Pipeline state: the model (pure), the store protocol and its two backends.

The backends import Airflow and psycopg; import them from their modules
(``state.postgres_store``, ``state.variable_store``) so the pure model stays light.
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
