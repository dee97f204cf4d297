"""The state stores' factory: the one place a backend name becomes a store."""

from __future__ import annotations

from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.variable_state_store import VariableStateStore
from airflow_provider_pgsync.state.store import StateStore, check_state_backend


def open_state_store(
    backend: str, source: PgReplicationHook, *, state_conn_id: str | None = None, schema: str = "pgsync"
) -> StateStore:
    """The pipeline state store: Airflow Variables (locked in the source) or a PostgreSQL table.

    ``state_conn_id`` names the control database; the source database by default.
    """
    control = PgReplicationHook(postgres_conn_id=state_conn_id) if state_conn_id else source
    if check_state_backend(backend) == "variables":
        return VariableStateStore(lock=control)
    return PostgresStateStore(control, schema=schema)
