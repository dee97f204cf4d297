"""The small steps of the pipeline DAGs that no operator covers, as plain functions of a
``PipelineConfig`` (the factory wraps each in an ``@task``): the tables' Init phase after
setup, dropping the publication and the state at teardown, and the teardown of some tables.

Each one is idempotent: a retried or repeated run does no harm.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from airflow_provider_pgsync.capture.health import slot_problem
from airflow_provider_pgsync.destinations.configs import open_destination
from airflow_provider_pgsync.errors import ConfigError, DestinationError, SlotError
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.state_stores import open_state_store
from airflow_provider_pgsync.pipeline.config import PipelineConfig
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.followed import pipeline_name
from airflow_provider_pgsync.state.model import Init, PipelineState
from airflow_provider_pgsync.state.store import StateStore, update_state

log = logging.getLogger(__name__)


def _store(config: PipelineConfig, hook: PgReplicationHook) -> StateStore:
    return open_state_store(
        config.state.backend, hook, state_conn_id=config.state.conn_id, schema=config.state.schema
    )


def init_tables(config: PipelineConfig) -> dict[str, str]:
    """Record the slot the state is built from (when none is recorded yet) and put every table of
    the config that the state does not hold yet in phase Init; tables already there keep their
    phase. Returns each config table's phase (by the config's name).

    Each table's relation OID and current name in the source are recorded: a table renamed in the
    source is followed by its OID, and the config may name it by its old or its new name (both
    are the one table the pipeline keeps under the name it was set up with). A table whose
    relation is gone from the source (dropped there) while another table has its name now is
    followed anew: the new table, back to Init in every destination (they hold the dropped
    table's rows), so it is baselined like a table added to the config.

    A slot that is not the one the state was built from (dropped and created again by the
    setup's ``create_slot``, or replaced behind the pipeline's back) is adopted: capture goes
    on from it, and every table goes back to Init in every destination, because the changes
    in between are lost (the documented recovery of a lost or replaced slot). A slot that is
    invalidated (``lost``) must be dropped first.
    """
    hook = PgReplicationHook(postgres_conn_id=config.source_conn_id)
    info = hook.slot_info(config.slot_name)
    if info is None or info.confirmed_flush_lsn is None:
        raise SlotError(
            f"replication slot {config.slot_name} of pipeline {config.name!r} does not exist (or has no "
            "confirmed position yet); run the setup DAG's 'create_slot' task first"
        )

    confirmed = info.confirmed_flush_lsn

    store = _store(config, hook)
    tables = [TableRef.parse(key) for key in config.table_keys]
    followed = hook.follow_tables(tables, store.load(config.name))

    def change(state: PipelineState) -> PipelineState:
        problem = slot_problem(state, config.slot_name, info)
        if problem is not None:
            if info.lost:
                raise SlotError(f"{problem.reason}; {problem.solution}")
            log.warning(
                "pipeline %s: %s; adopting slot %s from %s on and sending every table of every "
                "destination back to baseline",
                config.name,
                problem.reason,
                config.slot_name,
                confirmed,
            )
            state = state.with_new_slot(config.slot_name, confirmed)
        if state.slot_name is None:
            state = state.with_slot(config.slot_name, confirmed)
        for table in followed:
            key = str(table.key)
            if key not in state.tables:
                state = state.with_table_phase(key, Init())
            ts = state.table(key)
            if table.replaced:
                assert table.relation_id is not None
                if ts.relation_id == table.gone_id:  # not yet done (by a save that conflicted)
                    state = state.with_table_followed_anew(key, table.relation_id, table.source)
                continue
            if table.relation_id is not None and (ts.relation_id, ts.source_table) != (
                table.relation_id,
                table.source,
            ):
                state = state.with_table_source(key, table.relation_id, table.source)
        return state

    state = store.load(config.name)
    if change(state) != state:  # a repeated setup saves nothing
        state = update_state(store, config.name, change)
    for table in followed:
        if table.renamed:
            log.info("pipeline %s: table %s is named %s in the source", config.name, table.key, table.source)
        if table.replaced:
            log.warning(
                "pipeline %s: table %s (relation OID %s) was dropped in the source and %s is another table "
                "now (relation OID %s): the pipeline follows the new table under the name %s from now on, "
                "and baselines it into every destination (they held the dropped table's rows)",
                config.name,
                table.key,
                table.gone_id,
                table.source,
                table.relation_id,
                table.key,
            )
    extra = sorted(set(state.tables) - {str(t.key) for t in followed})
    if extra:
        log.warning(
            "pipeline %s: the state holds tables the config no longer lists (%s); they are left as they are "
            "(their destination tables too, and apply goes on with what was captured of them) until "
            "the teardown DAG is triggered with param tables naming them (drop_tables: their "
            "destination tables too)",
            config.name,
            ", ".join(extra),
        )
    phases = {str(t.config): state.tables[str(t.key)].phase.kind for t in followed}
    log.info("pipeline %s: table phases %s", config.name, phases)
    return phases


def drop_publication(config: PipelineConfig) -> bool:
    """Drop the pipeline's publication if it exists; returns whether it existed."""
    hook = PgReplicationHook(postgres_conn_id=config.source_conn_id)
    existed = hook.drop_publication(config.publication_name)
    log.info(
        "publication %s %s",
        config.publication_name,
        "dropped" if existed else "did not exist; nothing to drop",
    )
    return existed


def delete_state(config: PipelineConfig) -> bool:
    """Delete the pipeline's state; returns whether there was one. The changelog and the
    destinations' tables are kept."""
    hook = PgReplicationHook(postgres_conn_id=config.source_conn_id)
    store = _store(config, hook)
    existed = store.load(config.name).version > 0
    store.delete(config.name)
    log.info(
        "pipeline %s: state %s", config.name, "deleted" if existed else "did not exist; nothing to delete"
    )
    return existed


def teardown_tables(config: PipelineConfig, tables: Sequence[str], *, drop_tables: bool) -> dict[str, Any]:
    """Take ``tables`` (no longer in the config) out of the pipeline: with ``drop_tables``, drop
    their tables in each destination that can (the others keep theirs, logged with how to drop
    them), then remove them from the state (the changelog's segments of them go with apply's next
    retention pass). Under the pipeline's apply lock, so no apply writes them meanwhile; a table
    the state does not hold is left alone (a repeated run, or a name it never had).

    ConfigError when the config still follows one of them (by its name, or its name in the source
    now): setup would put it back, so it must be taken out of the config first."""
    hook = PgReplicationHook(postgres_conn_id=config.source_conn_id)
    store = _store(config, hook)
    with hook.apply_lock(config.name, f"pgsync teardown of tables of {config.name}"):
        state = store.load(config.name)
        keys = list(dict.fromkeys(pipeline_name(state, t) for t in tables))
        followed = {pipeline_name(state, k) for k in config.table_keys}
        listed = [k for k in keys if k in followed]
        if listed:
            raise ConfigError(
                f"table(s) {', '.join(listed)} of pipeline {config.name!r} are still in its config (maybe "
                "under their name in the source now): take them out of the config and run the setup DAG "
                "first; nothing was dropped"
            )
        present = [k for k in keys if k in state.tables]
        for key in keys:
            if key not in present:
                log.info("pipeline %s: table %s is not in its state: nothing to tear down", config.name, key)
        dropped: dict[str, list[str]] = {}
        kept: dict[str, list[str]] = {}
        if drop_tables and present:
            for destination_config in config.destinations:
                destination = open_destination(destination_config.to_mapping())
                try:
                    for key in present:
                        try:
                            destination.drop_table(TableRef.parse(key))
                            dropped.setdefault(destination.name, []).append(key)
                        except DestinationError as exc:
                            log.warning("pipeline %s: %s", config.name, exc)
                            kept.setdefault(destination.name, []).append(key)
                finally:
                    destination.close()

        def remove(current: PipelineState) -> PipelineState:
            for key in present:
                current = current.without_table(key)
            return current

        if present:
            update_state(store, config.name, remove)
    for key in present:
        log.info(
            "pipeline %s: table %s torn down (removed from the state%s)",
            config.name,
            key,
            "; its destination tables " + ("dropped where the destinations can" if drop_tables else "kept"),
        )
    return {"removed": present, "dropped": dropped, "kept": kept}
