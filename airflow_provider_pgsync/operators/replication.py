"""Operators that prepare and clean up the source: preflight, publication, slot.

Each one is idempotent, so a retried or repeated task run does no harm, and each can
be used in any DAG on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_pgsync.errors import PgSyncError
from airflow_provider_pgsync.hooks.connections import NeededConnection, check_connections, source_and_state
from airflow_provider_pgsync.hooks.ddl_trigger import follow_partitions, install_ddl_trigger
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.state_stores import open_state_store
from airflow_provider_pgsync.operators.retry import with_retry_policy
from airflow_provider_pgsync.source.names import validate_publication_name, validate_slot_name
from airflow_provider_pgsync.source.publication import PublishedTable, published_tables


class _SourceOperator(BaseOperator):
    """Common arguments: the Airflow connection of the source database."""

    def __init__(self, *, postgres_conn_id: str = "postgres_default", **kwargs: Any) -> None:
        super().__init__(**with_retry_policy(kwargs))
        self.postgres_conn_id = postgres_conn_id

    @property
    def hook(self) -> PgReplicationHook:
        return PgReplicationHook(postgres_conn_id=self.postgres_conn_id)

    def needed_connections(self) -> list[NeededConnection]:
        """The Airflow connections this task uses."""
        return source_and_state(self.postgres_conn_id, None)

    def check_connections(self) -> None:
        """ConfigError naming each connection Airflow does not know, before anything is done."""
        check_connections(type(self).__name__, self.task_id, self.needed_connections())


class _TablesOperator(_SourceOperator):
    """Common arguments of operators that read ``tables`` in the source: with ``pipeline`` (and
    its state store), a table renamed in the source is read under its name there, followed by
    the relation OID the pipeline's state records (a config may name it by either name)."""

    def __init__(
        self,
        *,
        pipeline: str | None = None,
        state_backend: str = "variables",
        state_conn_id: str | None = None,
        state_schema: str = "pgsync",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.state_backend = state_backend
        self.state_conn_id = state_conn_id
        self.state_schema = state_schema

    def needed_connections(self) -> list[NeededConnection]:
        return source_and_state(self.postgres_conn_id, self.state_conn_id if self.pipeline else None)

    def source_tables(self, tables: Sequence[Any], *, tolerant: bool = False) -> tuple[PublishedTable, ...]:
        """``tables`` parsed, each under its name in the source now (``tolerant``: the config's
        names when the state cannot be read)."""
        hook = self.hook
        if self.pipeline is None:
            return published_tables(tables)
        store = open_state_store(
            self.state_backend, hook, state_conn_id=self.state_conn_id, schema=self.state_schema
        )
        try:
            state = store.load(self.pipeline)
        except PgSyncError as exc:
            if not tolerant:
                raise
            # preflight may run before the state store is usable: its own checks come first
            self.log.warning(
                "cannot read the state of pipeline %s (%s): tables are checked under the config's names",
                self.pipeline,
                exc,
            )
            return published_tables(tables)
        specs = hook.source_specs(tables, state)
        for given, spec in zip(published_tables(tables), specs, strict=True):
            if given.table != spec.table:
                self.log.info("table %s is named %s in the source (renamed there)", given.table, spec.table)
        return specs


class PgPreflightOperator(_TablesOperator):
    """Fail with every problem (and its fix) that keeps the source from replicating ``tables``.

    :param slot_name: the replication slot the pipeline will use.
    :param publication_name: the publication the pipeline will use.
    :param tables: ``'schema.table'`` strings or ``{"table", "columns", "row_filter"}`` mappings.
    :param pipeline: the pipeline whose state follows renamed tables (optional; with
        ``state_backend``, ``state_conn_id``, ``state_schema`` as ``PgCaptureOperator``'s).
    """

    template_fields: Sequence[str] = ("slot_name", "publication_name", "tables")

    def __init__(
        self, *, slot_name: str, publication_name: str, tables: Sequence[Any], **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.slot_name = slot_name
        self.publication_name = publication_name
        self.tables = tables

    def execute(self, context: Context) -> dict[str, Any]:
        self.check_connections()
        facts = self.hook.preflight(
            slot_name=self.slot_name,
            tables=self.source_tables(self.tables, tolerant=True),
            publication_name=self.publication_name,
        )
        tables = [str(t.table) for t in facts.tables]
        return {"server_version_num": facts.server_version_num, "tables": tables}


class PgCreatePublicationOperator(_TablesOperator):
    """Create the publication for ``tables``, or bring its table list up to date (``pipeline``
    and its state store: as ``PgPreflightOperator``)."""

    template_fields: Sequence[str] = ("publication_name", "tables")

    def __init__(self, *, publication_name: str, tables: Sequence[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.publication_name = publication_name
        self.tables = tables

    def execute(self, context: Context) -> str:
        self.check_connections()
        validate_publication_name(self.publication_name)
        published_tables(self.tables)
        tables = self.source_tables(self.tables)
        # before the slot: every DDL the slot will decode is then reported in the stream, and
        # every TRUNCATE of a partition of a partitioned table (``source/partition_events.py``)
        with self.hook.connect() as conn:
            if install_ddl_trigger(conn):
                follow_partitions(conn, [t.table for t in tables])
        return self.hook.ensure_publication(self.publication_name, tables)


class PgCreateSlotOperator(_SourceOperator):
    """Create a pgoutput replication slot unless it exists; returns where it starts."""

    template_fields: Sequence[str] = ("slot_name",)

    def __init__(self, *, slot_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slot_name = slot_name

    def execute(self, context: Context) -> dict[str, Any]:
        self.check_connections()
        validate_slot_name(self.slot_name)
        created = self.hook.ensure_slot(self.slot_name)
        point = str(created.consistent_point) if created.consistent_point else None
        return {"slot_name": created.name, "created": created.created, "consistent_point": point}


class PgDropSlotOperator(_SourceOperator):
    """Drop a replication slot if it exists (a missing slot is not an error)."""

    template_fields: Sequence[str] = ("slot_name",)

    def __init__(self, *, slot_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slot_name = slot_name

    def execute(self, context: Context) -> bool:
        self.check_connections()
        validate_slot_name(self.slot_name)
        dropped = self.hook.drop_slot(self.slot_name)
        if not dropped:
            self.log.info("replication slot %s did not exist; nothing to drop", self.slot_name)
        return dropped
