"""TablePhaseTrigger: fires when a table of a pipeline reaches a phase, reading the pipeline's state."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

from airflow_provider_pgsync.hooks.postgres_state_store import TABLE as STATE_TABLE
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.variable_state_store import VariableStateStore
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.followed import pipeline_name
from airflow_provider_pgsync.state.model import PipelineState, table_key, validate_pipeline_name
from airflow_provider_pgsync.state.store import check_state_backend
from airflow_provider_pgsync.triggers.base import PollingTrigger
from airflow_provider_pgsync.triggers.checks import Payload, check_phase, phase_event
from airflow_provider_pgsync.triggers.connection import connect
from airflow_provider_pgsync.triggers.probes import aload_state


def variable_store(conn_id: str) -> VariableStateStore:
    """The Variables store as ``open_state_store`` builds it (its lock is only used to save)."""
    return VariableStateStore(lock=PgReplicationHook(postgres_conn_id=conn_id))


def state_location(backend: str, pipeline: str, *, conn_id: str, schema: str) -> str:
    """Where the pipeline's state lives, for error messages."""
    if backend == "variables":
        return f"Airflow Variable {variable_store(conn_id).key(pipeline)!r}"
    return f"table {TableRef(schema, STATE_TABLE)} of Airflow connection {conn_id!r}"


class TablePhaseTrigger(PollingTrigger):
    """Fire when ``table`` of ``pipeline`` has reached ``phase`` (default ``Ready``).

    A table has reached a phase when it is in it or past it on Init -> DataSync ->
    SyncDone -> Ready (a table that went on to Ready has reached SyncDone); a rebaseline
    back to Init makes it wait again. An Errored table fires an error event
    (TableErroredError: the table, the reason and the remedy), unless ``phase`` is
    ``Errored``. The state is read as the operators write it: the ``postgres`` backend
    reads ``<state_schema>.pipeline_state`` with async SQL on ``state_conn_id`` (the source
    by default); the ``variables`` backend reads the Airflow Variable through Airflow's
    Variable access, in a worker thread (``sync_to_async``).

    Event: ``status`` ``success``, ``fired`` ``phase``, ``pipeline``, ``table``, ``phase``
    (the table's phase now), ``target_phase``, ``state_version``; or an error event.
    """

    def __init__(
        self,
        *,
        pipeline: str,
        table: str,
        phase: str = "Ready",
        state_backend: str = "variables",
        postgres_conn_id: str = "postgres_default",
        state_conn_id: str | None = None,
        state_schema: str = "pgsync",
        poll_interval: float = 60.0,
    ) -> None:
        super().__init__(poll_interval=poll_interval)
        self.pipeline = validate_pipeline_name(pipeline)
        self.table = table_key(table)
        self.phase = check_phase(phase)
        self.state_backend = check_state_backend(state_backend)
        TableRef(state_schema, STATE_TABLE)  # ConfigError naming a schema PostgreSQL would not accept
        self.postgres_conn_id = postgres_conn_id
        self.state_conn_id = state_conn_id
        self.state_schema = state_schema

    def arguments(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "table": self.table,
            "phase": self.phase,
            "state_backend": self.state_backend,
            "postgres_conn_id": self.postgres_conn_id,
            "state_conn_id": self.state_conn_id,
            "state_schema": self.state_schema,
        }

    async def _load(self) -> PipelineState:
        conn_id = self.state_conn_id or self.postgres_conn_id
        if self.state_backend == "variables":
            return await sync_to_async(variable_store(conn_id).load)(self.pipeline)
        app = f"pgsync table-phase sensor {self.pipeline}"
        async with await connect(conn_id, application_name=app) as conn:
            return await aload_state(conn, self.pipeline, schema=self.state_schema)

    async def poll(self) -> Payload | None:
        state = await self._load()
        where = state_location(
            self.state_backend,
            self.pipeline,
            conn_id=self.state_conn_id or self.postgres_conn_id,
            schema=self.state_schema,
        )
        payload = phase_event(state, self.table, self.phase, where=where)
        if payload is None:
            kind = state.table(pipeline_name(state, self.table)).phase.kind
            self.log.info(
                "table %s of pipeline %s is %s; waiting for %s", self.table, self.pipeline, kind, self.phase
            )
        return payload
