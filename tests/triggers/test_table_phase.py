"""TablePhaseTrigger on a real server, with both state backends: waits, fires, Errored and missing state."""

from __future__ import annotations

import asyncio

from airflow_provider_pgsync.state.model import DataSync, Errored, PipelineState, Ready, TablePhase
from airflow_provider_pgsync.triggers.table_phase import TablePhaseTrigger
from tests.triggers.conftest import DONE, POLL, Pipeline, Running, Source, first_event, run_async


def _trigger(
    source: Source, pipeline: Pipeline, *, phase: str = "Ready", table: str = "items"
) -> TablePhaseTrigger:
    return TablePhaseTrigger(
        pipeline=pipeline.name,
        table=table,
        phase=phase,
        state_backend=pipeline.backend,
        postgres_conn_id=source.conn_id,
        poll_interval=POLL,
    )


async def _move(pipeline: Pipeline, *phases: TablePhase) -> PipelineState:
    """``pipeline.move`` in a thread, so the trigger running in the loop is not blocked."""
    return await asyncio.to_thread(pipeline.move, *phases)


def test_waits_until_the_table_is_ready(source: Source, pipeline: Pipeline) -> None:
    async def scenario() -> tuple[dict[str, object], PipelineState]:
        running = Running(_trigger(source, pipeline))
        await running.assert_quiet()  # Init
        await _move(pipeline, DataSync())
        await running.assert_quiet()
        await _move(pipeline, DONE)
        await running.assert_quiet()
        state = await _move(pipeline, Ready())
        return await running.event(), state

    payload, state = run_async(scenario)

    assert payload == {
        "status": "success",
        "fired": "phase",
        "pipeline": pipeline.name,
        "table": "public.items",
        "phase": "Ready",
        "target_phase": "Ready",
        "state_version": state.version,
    }
    assert state.version == 4  # setup, DataSync, SyncDone, Ready


def test_a_table_past_the_phase_has_reached_it(source: Source, pipeline: Pipeline) -> None:
    pipeline.move(DataSync(), DONE, Ready())

    payload = first_event(_trigger(source, pipeline, phase="SyncDone", table="public.items"))

    assert (payload["phase"], payload["target_phase"]) == ("Ready", "SyncDone")


def test_an_errored_table_is_an_error_event_with_reason_and_remedy(
    source: Source, pipeline: Pipeline
) -> None:
    errored = Errored(
        reason="destination lake cannot add column price numeric",
        solution="widen the lake table's column by hand",
        retry="manual",
    )

    async def scenario() -> dict[str, object]:
        running = Running(_trigger(source, pipeline))
        await _move(pipeline, DataSync())
        await running.assert_quiet()
        await _move(pipeline, errored)
        return await running.event()

    payload = run_async(scenario)

    assert (payload["status"], payload["error"], payload["retryable"]) == (
        "error",
        "TableErroredError",
        False,
    )
    assert payload["details"] == {
        "pipeline": pipeline.name,
        "table": "public.items",
        "reason": errored.reason,
        "solution": errored.solution,
        "retry": "manual",
        "previous": "DataSync",
    }
    message = str(payload["message"])
    assert "table public.items" in message and errored.reason in message and errored.solution in message
    assert "rebaseline" in message


def test_waiting_for_errored_fires_on_errored(source: Source, pipeline: Pipeline) -> None:
    pipeline.move(Errored(reason="r", solution="s"))

    payload = first_event(_trigger(source, pipeline, phase="Errored"))

    assert (payload["status"], payload["phase"]) == ("success", "Errored")


def test_a_table_outside_the_pipeline_is_an_error_event(source: Source, pipeline: Pipeline) -> None:
    payload = first_event(_trigger(source, pipeline, table="public.orders"))

    assert (payload["status"], payload["error"]) == ("error", "StateError")
    assert f"table public.orders is not part of pipeline {pipeline.name!r}" in str(payload["message"])


def test_a_pipeline_without_state_is_an_error_event(source: Source, pipeline: Pipeline) -> None:
    pipeline.store.delete(pipeline.name)

    payload = first_event(_trigger(source, pipeline))

    assert (payload["status"], payload["error"]) == ("error", "StateError")
    message = str(payload["message"])
    assert f"pipeline {pipeline.name!r} has no saved state" in message and "setup DAG" in message
    where = f"pgsync_state__{pipeline.name}" if pipeline.backend == "variables" else "pgsync.pipeline_state"
    assert where in message
