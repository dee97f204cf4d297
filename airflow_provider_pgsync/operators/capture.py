"""PgCaptureOperator: one bounded capture batch, from the slot into the changelog."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_pgsync.capture.run import CaptureSettings, capture
from airflow_provider_pgsync.hooks.connections import check_connections, source_and_state
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.state_stores import open_state_store
from airflow_provider_pgsync.operators.retry import with_retry_policy
from airflow_provider_pgsync.source.sessions import timeout_ms
from airflow_provider_pgsync.state.store import check_state_backend


class PgCaptureOperator(BaseOperator):
    """Capture one bounded batch of changes from the slot into the changelog, then advance the slot.

    :param pipeline: the pipeline name (key of its state).
    :param slot_name: the pgoutput slot; :param publication_name: its publication.
    :param changelog_uri: folder or pyarrow filesystem URI of the changelog.
    :param state_backend: ``variables`` (default) or ``postgres``; :param state_conn_id: the
        control database (the source by default); :param state_schema: its schema.
    :param max_changes: the change limit of one peek.
    :param peek_statement_timeout: how long each statement of the peek and of the slot advance
        may run, in seconds or a ``timedelta``; 0 or None (default): no limit. Set on capture's
        own sessions, so a low ``statement_timeout`` of the database or role never cuts a peek
        of a large backlog (a cut peek is redone from the start by the next run); bound the
        whole run with ``execution_timeout`` instead.
    """

    template_fields: Sequence[str] = ("pipeline", "slot_name", "publication_name", "changelog_uri")

    def __init__(
        self,
        *,
        pipeline: str,
        slot_name: str,
        publication_name: str,
        changelog_uri: str,
        postgres_conn_id: str = "postgres_default",
        state_backend: str = "variables",
        state_conn_id: str | None = None,
        state_schema: str = "pgsync",
        max_changes: int = 1_000_000,
        peek_statement_timeout: float | timedelta | None = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**with_retry_policy(kwargs))
        check_state_backend(state_backend)
        self.pipeline = pipeline
        self.slot_name = slot_name
        self.publication_name = publication_name
        self.changelog_uri = changelog_uri
        self.postgres_conn_id = postgres_conn_id
        self.state_backend = state_backend
        self.state_conn_id = state_conn_id
        self.state_schema = state_schema
        self.max_changes = max_changes
        timeout_ms(peek_statement_timeout, what=f"{self.task_id}: peek_statement_timeout")
        if isinstance(peek_statement_timeout, timedelta):
            peek_statement_timeout = peek_statement_timeout.total_seconds()
        self.peek_statement_timeout = float(peek_statement_timeout or 0)

    def execute(self, context: Context) -> dict[str, Any]:
        needed = source_and_state(self.postgres_conn_id, self.state_conn_id)
        check_connections("PgCaptureOperator", self.task_id, needed)
        settings = CaptureSettings(
            pipeline=self.pipeline,
            slot_name=self.slot_name,
            publication_name=self.publication_name,
            changelog_uri=self.changelog_uri,
            max_changes=self.max_changes,
            peek_statement_timeout=self.peek_statement_timeout,
        )
        hook = PgReplicationHook(postgres_conn_id=self.postgres_conn_id)
        store = open_state_store(
            self.state_backend, hook, state_conn_id=self.state_conn_id, schema=self.state_schema
        )
        ti = context.get("ti")
        holder = f"pgsync capture {self.pipeline} {getattr(ti, 'run_id', '')}".strip()
        result = capture(hook, store, settings, holder=holder)
        return {
            "changes": result.changes,
            "transactions": result.transactions,
            "segments": [s.path for s in result.segments],
            "advanced_to": str(result.advanced_to) if result.advanced_to else None,
            "idle": result.idle,
            "rows_by_table": result.rows_by_table,
            "start_lsn": str(result.start_lsn) if result.start_lsn is not None else None,
            "upto_lsn": str(result.upto_lsn) if result.upto_lsn is not None else None,
        }
