"""PgTablePhaseSensor in DAG runs, deferrable and poking, with both state backends: Ready, Errored."""

from __future__ import annotations

from airflow_provider_pgsync.errors import TableErroredError
from airflow_provider_pgsync.state.model import DataSync, Errored, Ready
from tests.conftest import RunDag
from tests.sensors.conftest import PhaseSensor, run_sensor
from tests.triggers.conftest import DONE, Pipeline, Source


def test_succeeds_when_the_table_is_ready(
    source: Source, pipeline: Pipeline, run_dag: RunDag, deferrable: bool
) -> None:
    pipeline.move(DataSync(), DONE, Ready())

    result = run_sensor(
        run_dag,
        f"phase_ready_{pipeline.backend}_{deferrable}",
        PhaseSensor,
        pipeline=pipeline.name,
        table="items",
        state_backend=pipeline.backend,
        postgres_conn_id=source.conn_id,
        deferrable=deferrable,
    )

    assert (result.state, result.error) == ("success", None)
    assert result.xcom == {
        "status": "success",
        "fired": "phase",
        "pipeline": pipeline.name,
        "table": "public.items",
        "phase": "Ready",
        "target_phase": "Ready",
        "state_version": 4,
    }


def test_an_errored_table_fails_with_reason_and_remedy(
    source: Source, pipeline: Pipeline, run_dag: RunDag, deferrable: bool
) -> None:
    pipeline.move(DataSync(), Errored(reason="the baseline job ran out of memory", solution="give it more"))

    result = run_sensor(
        run_dag,
        f"phase_errored_{pipeline.backend}_{deferrable}",
        PhaseSensor,
        pipeline=pipeline.name,
        table="public.items",
        state_backend=pipeline.backend,
        postgres_conn_id=source.conn_id,
        deferrable=deferrable,
    )

    assert result.state == "failed"
    error = result.error
    assert isinstance(error, TableErroredError), repr(error)
    assert (error.table, error.reason, error.solution, error.previous) == (
        "public.items",
        "the baseline job ran out of memory",
        "give it more",
        "DataSync",
    )
    assert str(error) == (
        f"table public.items of pipeline {pipeline.name!r} is Errored (it left DataSync): the baseline job "
        "ran out of memory; remedy: give it more, then rebaseline the table (Errored -> Init)"
    )
