"""Operators that prepare and clean up the source: preflight, publication, slot.

Each one is idempotent, so a retried or repeated task run does no harm, and each can
be used in any DAG on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_pgsync.hooks.ddl_trigger import install_ddl_trigger
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.source.names import validate_publication_name, validate_slot_name
from airflow_provider_pgsync.source.publication import published_tables


class _SourceOperator(BaseOperator):
    """Common arguments: the Airflow connection of the source database."""

    def __init__(self, *, postgres_conn_id: str = "postgres_default", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.postgres_conn_id = postgres_conn_id

    @property
    def hook(self) -> PgReplicationHook:
        return PgReplicationHook(postgres_conn_id=self.postgres_conn_id)


class PgPreflightOperator(_SourceOperator):
    """Fail with every problem (and its fix) that keeps the source from replicating ``tables``.

    :param slot_name: the replication slot the pipeline will use.
    :param publication_name: the publication the pipeline will use.
    :param tables: ``'schema.table'`` strings or ``{"table", "columns", "row_filter"}`` mappings.
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
        facts = self.hook.preflight(
            slot_name=self.slot_name, tables=self.tables, publication_name=self.publication_name
        )
        tables = [str(t.table) for t in facts.tables]
        return {"server_version_num": facts.server_version_num, "tables": tables}


class PgCreatePublicationOperator(_SourceOperator):
    """Create the publication for ``tables``, or bring its table list up to date."""

    template_fields: Sequence[str] = ("publication_name", "tables")

    def __init__(self, *, publication_name: str, tables: Sequence[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.publication_name = publication_name
        self.tables = tables

    def execute(self, context: Context) -> str:
        validate_publication_name(self.publication_name)
        published_tables(self.tables)
        # before the slot: every DDL the slot will decode is then reported in the stream
        with self.hook.connect() as conn:
            install_ddl_trigger(conn)
        return self.hook.ensure_publication(self.publication_name, self.tables)


class PgCreateSlotOperator(_SourceOperator):
    """Create a pgoutput replication slot unless it exists; returns where it starts."""

    template_fields: Sequence[str] = ("slot_name",)

    def __init__(self, *, slot_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slot_name = slot_name

    def execute(self, context: Context) -> dict[str, Any]:
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
        validate_slot_name(self.slot_name)
        dropped = self.hook.drop_slot(self.slot_name)
        if not dropped:
            self.log.info("replication slot %s did not exist; nothing to drop", self.slot_name)
        return dropped
