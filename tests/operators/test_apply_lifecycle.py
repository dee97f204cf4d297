"""PgApplyOperator with two PostgreSQL destinations in real Airflow DAG runs: each destination
has its own phase, a destination that refuses changes stops alone and the task fails loudly
naming it, a destination that cannot be reached changes no phase, a fixed destination resumes
from its watermark, and two applies never overlap."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from airflow.sdk import DAG

from airflow_provider_pgsync.apply.run import TableApplied
from airflow_provider_pgsync.errors import ApplyBusyError
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.operators.apply import PgApplyOperator, _Run
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.phases import DataSync, Errored, Init, Ready, SyncDone
from tests.capture.conftest import MakePipeline, Pipeline, make_pipeline  # noqa: F401 (the fixture)
from tests.conftest import Database, RunDag
from tests.support.apply_lifecycle import DESTINATIONS, TABLE, handed_off, phases_of
from tests.support.replica import rows


def _cdc_dag(pipeline: Pipeline, source_conn_id: str, destinations: list[dict[str, str]]) -> DAG:
    with DAG(f"pgsync_cdc_{uuid.uuid4().hex[:6]}", schedule=None, default_args={"retries": 0}) as dag:
        pipeline.cdc_tasks(destinations, batch_rows=16)
    return dag


def test_a_refusing_destination_stops_alone_fails_the_run_and_resumes_once_fixed(
    database: Database,
    two_replicas: tuple[Database, Database],
    make_pipeline: MakePipeline,  # noqa: F811
    run_dag: RunDag,
    source_conn_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    good, picky = two_replicas
    pipeline = make_pipeline(["CREATE TABLE items (id int PRIMARY KEY, name text)"], ["items"])
    handed_off(pipeline, database, ["good", "picky"], two_replicas)
    # the picky replica's table refuses one value the source writes
    picky.execute("ALTER TABLE items ADD CONSTRAINT no13 CHECK (name <> 'item 13')")
    database.execute("INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 40) g")
    database.execute("UPDATE items SET name = 'changed' WHERE id %% 5 = 0")

    run = run_dag(_cdc_dag(pipeline, source_conn_id, DESTINATIONS))

    assert phases_of(run) == {"capture": "success", "apply": "failed"}
    assert rows(good, TABLE) == rows(database, TABLE)  # the other destination went on
    assert rows(picky, TABLE) != rows(database, TABLE)
    table = pipeline.state().table(TABLE)
    assert table.destination("good").phase == Ready()
    errored = table.destination("picky").phase
    assert isinstance(errored, Errored) and errored.previous == "SyncDone" and "no13" in errored.reason
    assert table.phase.kind == "Errored"  # users see the worst destination
    printed = capsys.readouterr().out  # the task's failure, as Airflow logs it
    assert "ApplyFailedError: apply of pipeline" in printed and "left 1 table(s) not applied" in printed
    assert "table public.items in destination picky is Errored" in printed and "remedy: fix table" in printed

    # a second run with the cause still there: still failed, still Errored, nothing lost
    database.execute("INSERT INTO items VALUES (41, 'item 41')")
    assert phases_of(run_dag(_cdc_dag(pipeline, source_conn_id, DESTINATIONS)))["apply"] == "failed"
    assert isinstance(pipeline.state().table(TABLE).destination("picky").phase, Errored)

    picky.execute("ALTER TABLE items DROP CONSTRAINT no13")  # the fix; the next run resumes
    database.execute("DELETE FROM items WHERE id > 38")
    assert phases_of(run_dag(_cdc_dag(pipeline, source_conn_id, DESTINATIONS))) == {
        "capture": "success",
        "apply": "success",
    }
    assert rows(picky, TABLE) == rows(good, TABLE) == rows(database, TABLE)
    table = pipeline.state().table(TABLE)
    assert table.destination("picky").phase == Ready() == table.phase
    assert table.destination("picky").watermark is not None


def test_an_unreachable_destination_changes_no_phase_and_the_run_fails_for_a_retry(
    database: Database,
    two_replicas: tuple[Database, Database],
    make_pipeline: MakePipeline,  # noqa: F811
    run_dag: RunDag,
    source_conn_id: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    good, picky = two_replicas
    pipeline = make_pipeline(["CREATE TABLE items (id int PRIMARY KEY, name text)"], ["items"])
    handed_off(pipeline, database, ["good", "picky"], two_replicas)
    database.execute("INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 30) g")
    real = picky.cluster.url(picky.name, with_password=True)
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_PICKY", real.replace(f":{picky.cluster.port}/", ":1/"))

    run = run_dag(_cdc_dag(pipeline, source_conn_id, DESTINATIONS))

    assert phases_of(run) == {"capture": "success", "apply": "failed"}
    assert rows(good, TABLE) == rows(database, TABLE)
    table = pipeline.state().table(TABLE)
    assert isinstance(table.destination("picky").phase, SyncDone)  # not Errored: a retry will do
    printed = capsys.readouterr().out
    assert (
        "every table in destination picky" in printed and "destination picky could not be reached" in printed
    )

    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_PICKY", real)  # the server is back
    again = run_dag(_cdc_dag(pipeline, source_conn_id, DESTINATIONS))
    assert phases_of(again)["apply"] == "success"
    assert rows(picky, TABLE) == rows(database, TABLE)
    [applied] = [ti.xcom_pull(task_ids="apply") for ti in again.get_task_instances() if ti.task_id == "apply"]
    assert applied[TABLE]["destinations"] == {"good": 0, "picky": 30}  # what each destination took
    assert pipeline.state().table(TABLE).phase == Ready()


def test_a_second_apply_fails_at_once_naming_the_first(
    database: Database,
    make_pipeline: MakePipeline,  # noqa: F811
    source_conn_id: str,
) -> None:
    pipeline = make_pipeline(["CREATE TABLE items (id int PRIMARY KEY, name text)"], ["items"])
    hook = PgReplicationHook(postgres_conn_id=source_conn_id)
    op = PgApplyOperator(
        task_id="apply",
        pipeline=pipeline.name,
        changelog_uri=pipeline.settings.changelog_uri,
        destinations=[{"kind": "lake"}],
        postgres_conn_id=source_conn_id,
        state_backend="postgres",
    )
    before = pipeline.state()
    with hook.apply_lock(pipeline.name, "the first apply (test)"), pytest.raises(ApplyBusyError) as info:
        op.execute(context={})  # type: ignore[arg-type]
    assert "the first apply (test)" in str(info.value) and "backend pid" in str(info.value)
    assert info.value.retryable
    assert pipeline.state() == before


@dataclass
class _Decision:
    phase: object


def test_a_ready_decided_for_an_old_baseline_is_dropped_when_a_rebaseline_started() -> None:
    """Apply loads SyncDone{L1} and decides Ready; meanwhile a rebaseline moves the destination
    to DataSync{L2}; recording the decision must not put the new baseline's table in Ready."""
    done = SyncDone("s", LSN(100), 10, 12, lineage="L1")
    state = PipelineState("p").with_table_phase(TABLE, Init())
    state = state.with_destination_phase(TABLE, "lake", DataSync("L1"))
    state = state.with_destination_phase(TABLE, "lake", done)
    run = _Run(changelog=None)  # type: ignore[arg-type]
    run.decisions.append((TABLE, "lake", "L1", done, TableApplied(TABLE, 5, 0, (200, 1), Ready())))
    rebaselined = state.with_destination_phase(TABLE, "lake", Init()).with_destination_phase(
        TABLE, "lake", DataSync("L2")
    )

    recorded = run.record(rebaselined)

    lake = recorded.table(TABLE).destination("lake")
    assert lake.phase == DataSync("L2") and lake.lineage == "L2"
    assert run.record(state).table(TABLE).destination("lake").phase == Ready()  # not stale: recorded
