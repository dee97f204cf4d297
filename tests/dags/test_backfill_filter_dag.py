"""Hostile backfill filters through the baseline DAG's trigger path, end to end: real PostgreSQL,
real Airflow (``dag.test()`` with the trigger form's ``run_conf``), no Spark job (each filter is
refused before one would start). Nothing executes: the canary table survives, no large object
appears, the sequence stays put, the table's state is as it was and nothing is staged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.state.model import DataSync, PipelineState, Ready, SyncDone
from airflow_provider_pgsync.state.store import update_state
from tests.conftest import Database
from tests.dags.conftest import MakePipelineDags, PipelineDags, task_states

SETUP = [
    "CREATE TABLE items (id int PRIMARY KEY, name text)",
    "INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 20) g",
    "CREATE TABLE x (v int)",
    "CREATE SEQUENCE s",
]
UNHARMED = [(True, 0, False)]


def _harm(database: Database) -> list[tuple[object, ...]]:
    return database.execute(
        "SELECT to_regclass('public.x') IS NOT NULL, (SELECT count(*) FROM pg_largeobject_metadata),"
        " (SELECT is_called FROM s)"
    )


def _ready(pipeline: PipelineDags) -> PipelineState:
    """The table as if baselined and handed off (a backfill needs a Ready table)."""

    def ready(state: PipelineState) -> PipelineState:
        assert state.slot_creation_lsn is not None
        done = SyncDone("snap", state.slot_creation_lsn, 1, 1)
        state = state.with_table_phase("public.items", DataSync()).with_table_phase("public.items", done)
        return state.with_table_phase("public.items", Ready())

    update_state(pipeline.store(), pipeline.config.name, ready)
    return pipeline.state()


def _backfill(pipeline: PipelineDags, condition: str) -> dict[str, str]:
    run = pipeline.run(
        "baseline", run_conf={"tables": ["public.items"], "mode": "backfill", "backfill_filter": condition}
    )
    assert str(run.state) == "failed", task_states(run)
    return task_states(run)


@pytest.mark.parametrize("grammar", ["safe", "sql"])
def test_hostile_filters_from_the_trigger_form_run_nothing(
    database: Database, make_pipeline_dags: MakePipelineDags, lake: Path, grammar: str
) -> None:
    for statement in SETUP:
        database.execute(statement)
    pipeline = make_pipeline_dags(["items"], baseline={"backfill_filters": grammar})
    setup = pipeline.run("setup")
    assert str(setup.state) == "success", task_states(setup)
    state = _ready(pipeline)

    # refused when the params are checked, before any task touches the source
    for condition in [
        "id > 0) ; COMMIT; DROP TABLE x; --",
        "id > 0; SELECT lo_create(0)",
        "id > 0 /* ; DROP TABLE x */",
        "name = 'x\\'; DROP TABLE x; --'",
        "id > 0\x00; DROP TABLE x",
    ]:
        states = _backfill(pipeline, condition)
        assert states["choose_tables"] == "failed", (condition, states)
        assert "backfill[0]" not in states, (condition, states)
    # refused by the backfill task: the grammar, a column the table lacks, a VOLATILE function
    refused_by_task: list[Any] = ["idd > 1", "lo_create(0) > 0", "nextval('s') > 0"]
    for condition in refused_by_task:
        states = _backfill(pipeline, condition)
        failed_at = "choose_tables" if grammar == "safe" and "(" in condition else "backfill[0]"
        assert states[failed_at] == "failed", (condition, states)

    assert _harm(database) == UNHARMED
    assert pipeline.state() == state
    assert not any(lake.glob("**/backfill/*")), "a refused backfill staged rows"
