"""PgApplyOperator: the changelog into each destination, table by table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_pgsync.apply.run import TableApplied, apply_table
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.destinations.lake_changes import LakeChanges
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.destinations.protocol import Destination
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.operators.capture import STATE_BACKENDS, open_state_store
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.model import Backfill, PipelineState
from airflow_provider_pgsync.state.phases import Errored, Init, Ready, TablePhase
from airflow_provider_pgsync.state.store import update_state


def open_destination(config: Mapping[str, Any]) -> Destination:
    """The destination a pipeline config entry describes (``kind``: ``lake`` or ``postgres``)."""
    kind = config.get("kind", "lake")
    if kind == "postgres":
        return PostgresDestination.from_config(config)
    if kind == "lake":
        return LakeChanges.from_config(dict(config))
    raise ConfigError(f"destination kind {kind!r} is unknown; use 'lake' or 'postgres'")


class PgApplyOperator(BaseOperator):
    """Apply the changelog to each destination: changes after the destination's watermark, the
    baseline hand-off by the visibility rule, SyncDone tables to Ready once in sync.

    A destination that fails marks the tables it failed on Errored with the cause; capture
    and the other tables go on.

    :param pipeline: the pipeline name; :param changelog_uri: folder or URI of the changelog.
    :param destinations: destination configs, e.g. ``{"kind": "postgres", "conn_id": "replica"}``.
    :param postgres_conn_id: the source (where the state is locked or kept).
    :param state_backend: ``variables`` (default) or ``postgres``; :param state_conn_id: the
        control database (the source by default); :param state_schema: its schema.
    :param batch_rows: the most changes handed to a destination at once; :param batch_bytes:
        about the most bytes of changes held for one batch.
    """

    template_fields: Sequence[str] = ("pipeline", "changelog_uri", "destinations")

    def __init__(
        self,
        *,
        pipeline: str,
        changelog_uri: str,
        destinations: Sequence[Mapping[str, Any]],
        postgres_conn_id: str = "postgres_default",
        state_backend: str = "variables",
        state_conn_id: str | None = None,
        state_schema: str = "pgsync",
        batch_rows: int = 1_000_000,
        batch_bytes: int = 256 * 2**20,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if state_backend not in STATE_BACKENDS:
            raise ConfigError(f"state_backend {state_backend!r} is unknown; use one of {STATE_BACKENDS}")
        if not destinations:
            raise ConfigError("PgApplyOperator needs at least one destination")
        self.pipeline = pipeline
        self.changelog_uri = changelog_uri
        self.destinations = [dict(d) for d in destinations]
        self.postgres_conn_id = postgres_conn_id
        self.state_backend = state_backend
        self.state_conn_id = state_conn_id
        self.state_schema = state_schema
        self.batch_rows = batch_rows
        self.batch_bytes = batch_bytes

    def execute(self, context: Context) -> dict[str, Any]:
        hook = PgReplicationHook(postgres_conn_id=self.postgres_conn_id)
        store = open_state_store(
            self.state_backend, hook, state_conn_id=self.state_conn_id, schema=self.state_schema
        )
        state = store.load(self.pipeline)
        changelog = Changelog(self.changelog_uri)
        results: dict[str, list[TableApplied]] = {key: [] for key in state.tables}
        watermarks: dict[str, str] = {}
        backfilled: dict[str, list[str]] = {}  # table -> destinations that took its backfill now
        for config in self.destinations:
            destination = open_destination(config)
            try:
                for key, table_state in state.tables.items():
                    result = apply_table(
                        changelog,
                        state,
                        table_state,
                        destination,
                        batch_rows=self.batch_rows,
                        batch_bytes=self.batch_bytes,
                    )
                    results[key].append(result)
                    self.log.info(
                        "apply %s -> %s: %s changes applied, %s already in the base, watermark %s, %s",
                        key,
                        destination.name,
                        f"{result.applied:,}",
                        f"{result.in_base:,}",
                        _key_text(result.watermark),
                        result.phase.kind,
                    )
                    if isinstance(result.phase, Errored):
                        self.log.error("apply %s -> %s: %s", key, destination.name, result.phase.reason)
                    elif result.backfilled is not None:
                        backfilled.setdefault(key, []).append(destination.name)
                marks = [r[-1].watermark for r in results.values() if r and r[-1].watermark is not None]
                if marks:
                    watermarks[destination.name] = _key_text(min(m for m in marks if m is not None))
            finally:
                destination.close()
        phases = {key: _combined(table_results) for key, table_results in results.items()}

        def record(current: PipelineState) -> PipelineState:
            for key, phase in phases.items():
                if phase is not None and key in current.tables and current.tables[key].phase != phase:
                    current = current.with_table_phase(key, phase)
            for name, value in watermarks.items():
                current = current.with_watermark(name, value)
            for key, names in backfilled.items():
                current = _backfill_applied(current, key, state.tables[key].backfill, names)
            return current

        update_state(store, self.pipeline, record)
        for config in self.destinations:  # staged rows a destination has taken are not needed again
            destination = open_destination(config)
            try:
                for key, names in backfilled.items():
                    pending = state.tables[key].backfill
                    if destination.name in names and pending is not None:
                        destination.discard_backfill(pending.staged[destination.name])
            finally:
                destination.close()
        # a backfill's rows count as applied changes (they may change the destination's table)
        return {
            key: {
                "applied": sum(r.applied + (r.backfilled or 0) for r in rs),
                "phase": (phases[key] or rs[0].phase).kind,
            }
            for key, rs in results.items()
            if rs
        }


def _backfill_applied(
    state: PipelineState, key: str, backfill: Backfill | None, names: list[str]
) -> PipelineState:
    """Record that destinations ``names`` took ``backfill``; once all have it, it is done. A
    table whose backfill went meanwhile (rebaselined, or a phase change above) is left alone."""
    current = state.tables.get(key)
    if backfill is None or current is None or current.backfill is None or current.backfill.id != backfill.id:
        return state
    done = replace(current.backfill, applied=(*current.backfill.applied, *names))
    return state.with_backfill(key, done if done.pending else None)


def _combined(results: list[TableApplied]) -> TablePhase | None:
    """The table's phase after every destination's run: Errored if one failed, Init if one
    needs a rebaseline, Ready once all are in sync, else None (unchanged)."""
    for kind in (Errored, Init):
        found = [r.phase for r in results if isinstance(r.phase, kind)]
        if found:
            return found[0]
    if results and all(isinstance(r.phase, Ready) for r in results):
        return Ready()
    return None


def _key_text(key: tuple[int, int] | None) -> str:
    return "none" if key is None else f"{LSN(key[0])}/{key[1]}"
