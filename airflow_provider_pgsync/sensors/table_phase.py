"""PgTablePhaseSensor: wait until a table of a pipeline reaches a phase (e.g. Ready after its baseline)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context

from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.state_stores import open_state_store
from airflow_provider_pgsync.sensors.base import PgSyncSensor
from airflow_provider_pgsync.state.model import validate_pipeline_name
from airflow_provider_pgsync.state.store import check_state_backend
from airflow_provider_pgsync.triggers.checks import Payload, check_phase, phase_event
from airflow_provider_pgsync.triggers.table_phase import TablePhaseTrigger, state_location


class PgTablePhaseSensor(PgSyncSensor):
    """Succeed when ``table`` of ``pipeline`` is in ``phase`` or past it (Init, DataSync, SyncDone, Ready).

    An Errored table fails the task with TableErroredError naming the table, the reason
    and the remedy (unless ``phase`` is ``Errored``); a pipeline without saved state or a
    table outside the pipeline fails it with a StateError. The state is read from the
    store the operators write (``state_backend``, ``state_conn_id``, ``state_schema`` as
    for ``PgCaptureOperator``). The XCom is the event payload (see ``TablePhaseTrigger``).

    :param pipeline: the pipeline name (templated).
    :param table: ``schema.table`` (templated; ``orders`` means ``public.orders``).
    :param phase: ``Init``, ``DataSync``, ``SyncDone``, ``Ready`` (default) or ``Errored`` (templated).
    :param state_backend: ``variables`` (default) or ``postgres``.
    :param postgres_conn_id: the Airflow connection of the source database.
    :param state_conn_id: the control database (the source by default); :param state_schema: its schema.
    """

    template_fields: Sequence[str] = ("pipeline", "table", "phase", "postgres_conn_id", "state_conn_id")

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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.table = table
        self.phase = phase
        self.state_backend = check_state_backend(state_backend)
        self.postgres_conn_id = postgres_conn_id
        self.state_conn_id = state_conn_id
        self.state_schema = state_schema

    def make_trigger(self, context: Context) -> TablePhaseTrigger:
        return TablePhaseTrigger(
            pipeline=self.pipeline,
            table=self.table,
            phase=self.phase,
            state_backend=self.state_backend,
            postgres_conn_id=self.postgres_conn_id,
            state_conn_id=self.state_conn_id,
            state_schema=self.state_schema,
            poll_interval=self.poke_interval,
        )

    def check(self, context: Context) -> Payload | None:
        validate_pipeline_name(self.pipeline)
        check_phase(self.phase)
        hook = PgReplicationHook(postgres_conn_id=self.postgres_conn_id)
        store = open_state_store(
            self.state_backend, hook, state_conn_id=self.state_conn_id, schema=self.state_schema
        )
        state = store.load(self.pipeline)
        where = state_location(
            self.state_backend,
            self.pipeline,
            conn_id=self.state_conn_id or self.postgres_conn_id,
            schema=self.state_schema,
        )
        return phase_event(state, self.table, self.phase, where=where)
