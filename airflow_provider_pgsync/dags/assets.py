"""Airflow Assets of a pipeline: one per destination table, and the apply operator that emits
an asset event only for the tables whose changes it applied; and the Asset an event-driven cdc
DAG schedules on (``pending_changes_asset``), watched by a pending-changes trigger.

Airflow 3 registers an event for *every* Asset a task declares in ``outlets`` when the task
succeeds (``TaskInstance.register_asset_changes_in_db``): declared Assets are all-or-nothing.
The supported way to emit events for some of them is an ``AssetAlias`` outlet, to which the
task adds the Assets that changed (``context["outlet_events"][alias].add(asset, extra=...)``).
So the apply task declares one alias per destination (``destination_alias``) and adds the
destination tables that changed; a DAG downstream schedules on ``table_asset(...)`` (the same
name and URI) or on the alias.

An asset is *active* (listed on the Assets page, ``asset_active``) when a DAG references it
in a schedule, an outlet or an inlet; the DAG processor activates those when it stores the
DAG. An asset that only an alias emitted waits for the scheduler's orphan check to be
activated, and meanwhile every event logs "Emitting event for inactive AssetModel" (with
``dag.test()`` and no scheduler, forever). So the apply task also declares every destination
table as an **inlet** (``table_assets``): apply reads each destination table (its watermark,
the values an unchanged TOAST column keeps) as well as writing it, and an inlet registers the
asset without emitting an event.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from airflow.sdk import Asset, AssetAlias, AssetWatcher, Context

from airflow_provider_pgsync.destinations.configs import destination_name
from airflow_provider_pgsync.operators.apply import PgApplyOperator
from airflow_provider_pgsync.pipeline.schedules import OnChanges
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.triggers.pending_changes_event import PendingChangesEventTrigger

ASSET_SCHEME = "pgsync"


def table_asset(pipeline: str, destination: str, table: str) -> Asset:
    """The Asset of one destination table: ``pgsync://<pipeline>/<destination>/<schema>.<table>``
    (schema and table percent-encoded, so any PostgreSQL name gives a valid URI)."""
    ref = TableRef.parse(table)
    path = f"{quote(ref.schema, safe='')}.{quote(ref.name, safe='')}"
    return Asset(uri=f"{ASSET_SCHEME}://{pipeline}/{quote(destination, safe='')}/{path}")


def table_assets(pipeline: str, destinations: Iterable[str], tables: Iterable[str]) -> list[Asset]:
    """The Asset of every table in every destination (destination by destination)."""
    keys = list(tables)
    return [table_asset(pipeline, destination, table) for destination in destinations for table in keys]


def destination_alias(pipeline: str, destination: str) -> AssetAlias:
    """The AssetAlias through which apply emits the events of a destination's tables."""
    return AssetAlias(name=f"pgsync_{pipeline}_{destination}")


def pending_changes_asset(
    pipeline: str, *, slot_name: str, publication_name: str, source_conn_id: str, schedule: OnChanges
) -> Asset:
    """The Asset ``pgsync_<pipeline>_pending_changes`` (``pgsync://<pipeline>/slot/<slot>``) with a
    watcher whose trigger emits an event when the slot holds ``schedule.on_changes`` changes, or
    ``schedule.max_wait`` after its last event. (A table asset's second part always holds a dot,
    a slot name never does: the URIs cannot meet.) The trigger's arguments are the config's
    names, numbers and connection id only, the same at every parse."""
    name = f"pgsync_{pipeline}_pending_changes"
    trigger = PendingChangesEventTrigger(
        slot_name=slot_name,
        publication_name=publication_name,
        postgres_conn_id=source_conn_id,
        on_changes=schedule.on_changes,
        max_wait=schedule.max_wait.total_seconds(),
        poll_interval=schedule.poll_interval.total_seconds(),
    )
    return Asset(
        name=name,
        uri=f"{ASSET_SCHEME}://{pipeline}/slot/{quote(slot_name, safe='')}",
        watchers=[AssetWatcher(name=name, trigger=trigger)],
    )


class PgApplyAssetsOperator(PgApplyOperator):
    """``PgApplyOperator`` that, on success, emits an asset event for each destination table
    with changes applied in it (extra: that destination's ``applied`` count, the table's
    ``phase``), through the aliases in ``outlets``. A run that fails at its end emits none:
    Airflow registers the events of successful tasks only."""

    def execute(self, context: Context) -> dict[str, Any]:
        result = super().execute(context)
        events = context["outlet_events"]
        for config in self.destinations:
            name = destination_name(config)
            alias = destination_alias(self.pipeline, name)
            for table, applied in result.items():
                count = applied.get("destinations", {}).get(name, 0)
                if count > 0:
                    asset = table_asset(self.pipeline, name, table)
                    events[alias].add(asset, extra={"applied": count, "phase": applied["phase"]})
        return result
