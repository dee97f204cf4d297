"""The small steps of the pipeline DAGs that no operator covers, as plain functions of a
``PipelineConfig`` (the factory wraps each in an ``@task``): the tables' Init phase after
setup, dropping the publication and the state at teardown.

Each one is idempotent: a retried or repeated run does no harm.
"""

from __future__ import annotations

import logging

from airflow_provider_pgsync.capture.health import slot_problem
from airflow_provider_pgsync.errors import SlotError
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.operators.capture import open_state_store
from airflow_provider_pgsync.pipeline.config import PipelineConfig
from airflow_provider_pgsync.source.names import TableRef
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
    are the one table the pipeline keeps under the name it was set up with).

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
    extra = sorted(set(state.tables) - {str(t.key) for t in followed})
    if extra:
        log.warning(
            "pipeline %s: the state holds tables the config no longer lists (%s); they are left as they are",
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
