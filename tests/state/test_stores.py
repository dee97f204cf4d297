"""Both StateStore backends against a real PostgreSQL server and a real Airflow metadata database."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from airflow_provider_pgsync.errors import StateConflictError
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.store import StateStore, update_state
from tests.support.states import full_state


def _counter(state: PipelineState) -> int:
    return int(state.watermarks.get("counter", "0"))


def _increment(state: PipelineState) -> PipelineState:
    return state.with_watermark("counter", str(_counter(state) + 1))


def test_store_satisfies_the_protocol(store: StateStore) -> None:
    assert isinstance(store, StateStore)


def test_missing_pipeline_loads_fresh_at_version_0(store: StateStore, pipeline: str) -> None:
    assert store.load(pipeline) == PipelineState(pipeline)


def test_save_load_round_trip(store: StateStore, pipeline: str) -> None:
    state = replace(full_state(), pipeline=pipeline)  # odd table names, xids and LSNs near 2^64
    saved = store.save(state)
    assert saved == replace(state, version=1)
    assert store.load(pipeline) == saved
    again = store.save(saved.with_watermark("lake", "0/1/0"))
    assert again.version == 2 and store.load(pipeline) == again


def test_compare_and_set_first_save_wins(store: StateStore, pipeline: str) -> None:
    store.save(PipelineState(pipeline))
    first, second = store.load(pipeline), store.load(pipeline)
    assert store.save(first.with_watermark("lake", "a")).version == 2
    with pytest.raises(StateConflictError) as info:
        store.save(second.with_watermark("lake", "b"))
    err = info.value
    assert err.retryable and (err.pipeline, err.expected, err.found) == (pipeline, 1, 2)
    assert f"pipeline {pipeline!r}" in str(err) and "another task run" in str(err) and "rerun" in str(err)
    assert store.load(pipeline).watermarks == {"lake": "a"}


def test_two_first_saves_conflict(store: StateStore, pipeline: str) -> None:
    store.save(PipelineState(pipeline).with_watermark("lake", "a"))
    with pytest.raises(StateConflictError, match="expected version 0, found version 1"):
        store.save(PipelineState(pipeline).with_watermark("lake", "b"))


def test_concurrent_writers_never_lose_an_update(store: StateStore, pipeline: str) -> None:
    conflicts: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def writer() -> None:
        try:
            start.wait()
            for _ in range(50):
                while True:
                    current = store.load(pipeline)
                    try:
                        store.save(_increment(current))
                        break
                    except StateConflictError:
                        conflicts.append(1)
        except BaseException as exc:  # surfaced below: a thread's exception would be lost
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    final = store.load(pipeline)
    assert _counter(final) == 100 and final.version == 100, (final, len(conflicts))


def test_update_state_retries_on_conflict(store: StateStore, pipeline: str) -> None:
    calls: list[int] = []

    def change(state: PipelineState) -> PipelineState:
        calls.append(state.version)
        if len(calls) == 1:  # another run saves between this run's load and save
            store.save(_increment(store.load(pipeline)))
        return _increment(state)

    result = update_state(store, pipeline, change)
    assert calls == [0, 1] and result.version == 2 and _counter(store.load(pipeline)) == 2


def test_delete(store: StateStore, pipeline: str) -> None:
    stale = store.save(PipelineState(pipeline).with_watermark("lake", "x"))
    store.delete(pipeline)
    assert store.load(pipeline) == PipelineState(pipeline)
    store.delete(pipeline)  # deleting nothing is fine
    with pytest.raises(StateConflictError, match="it no longer exists"):
        store.save(stale)
    assert store.save(PipelineState(pipeline)).version == 1  # a fresh start works


def test_an_unknown_backend_is_refused_everywhere_alike() -> None:
    """One list of backends (state/store.py) for the config, the factory and every operator."""
    from airflow_provider_pgsync.errors import ConfigError
    from airflow_provider_pgsync.hooks.replication import PgReplicationHook
    from airflow_provider_pgsync.hooks.state_stores import open_state_store
    from airflow_provider_pgsync.operators.apply import PgApplyOperator
    from airflow_provider_pgsync.pipeline import PipelineConfig
    from airflow_provider_pgsync.state.store import STATE_BACKENDS

    expected = r"state_backend 'redis' is unknown; use one of variables, postgres"
    assert STATE_BACKENDS == ("variables", "postgres")
    with pytest.raises(ConfigError, match=expected):
        open_state_store("redis", PgReplicationHook(postgres_conn_id="unused"))
    with pytest.raises(ConfigError, match=expected):
        PgApplyOperator(
            task_id="apply",
            pipeline="p",
            changelog_uri="/unused",
            destinations=[{"kind": "lake"}],
            state_backend="redis",
        )
    with pytest.raises(ConfigError, match=r"state\.backend.*'redis'.*variables.*postgres"):
        PipelineConfig.from_mapping(
            {"name": "p", "source_conn_id": "db", "tables": ["a"], "state": {"backend": "redis"}}
        )
