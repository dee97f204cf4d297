"""PgApplyOperator on its own (no DAG factory) after a retype its destinations follow only by a
rebaseline: by default the task fails naming table, destination, change and remedy, and lists
them in XCom ``schema_rebaselines``; ``fail_on_rebaseline=False`` leaves the failing to a later
task; ``on_schema_change="fail"`` leaves them Errored."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider_pgsync.operators.apply import REBASELINES_XCOM
from airflow_provider_pgsync.state.phases import Errored, Init
from tests.capture.conftest import MakePipeline, Pipeline, make_pipeline  # noqa: F401 (the fixture)
from tests.conftest import Database, RunDag
from tests.support.apply_lifecycle import DESTINATIONS, TABLE, handed_off, phases_of
from tests.support.replica import rows


def _cdc_dag(
    pipeline: Pipeline, source_conn_id: str, destinations: list[dict[str, str]], **kwargs: Any
) -> DAG:
    with DAG(f"pgsync_cdc_{uuid.uuid4().hex[:6]}", schedule=None, default_args={"retries": 0}) as dag:
        pipeline.cdc_tasks(destinations, batch_rows=16, **kwargs)
    return dag


CHANGE = "table public.items changed its columns (column b changed type from integer to text)"


@pytest.mark.parametrize(("kwargs", "outcome"), [({}, "failed"), ({"fail_on_rebaseline": False}, "success")])
def test_a_rebaseline_is_listed_and_fails_the_task_unless_told_otherwise(
    database: Database,
    two_replicas: tuple[Database, Database],
    make_pipeline: MakePipeline,  # noqa: F811
    run_dag: RunDag,
    source_conn_id: str,
    capsys: pytest.CaptureFixture[str],
    kwargs: dict[str, object],
    outcome: str,
) -> None:
    pipeline = make_pipeline(["CREATE TABLE items (id int PRIMARY KEY, b int)"], ["items"])
    handed_off(pipeline, database, ["good", "picky"], two_replicas)
    database.execute("INSERT INTO items SELECT g, g FROM generate_series(1, 20) g")
    assert phases_of(run_dag(_cdc_dag(pipeline, source_conn_id, DESTINATIONS))) == {
        "capture": "success",
        "apply": "success",
    }
    database.execute("ALTER TABLE items ALTER COLUMN b TYPE text")
    database.execute("UPDATE items SET b = 'x' WHERE id = 1")
    capsys.readouterr()

    run = run_dag(_cdc_dag(pipeline, source_conn_id, DESTINATIONS, **kwargs))

    assert phases_of(run) == {"capture": "success", "apply": outcome}
    table = pipeline.state().table(TABLE)
    good, picky = table.destination("good").phase, table.destination("picky").phase
    assert isinstance(good, Init) and isinstance(picky, Init)
    assert good.request == picky.request != ""  # one request: one baseline run for both
    ti = next(t for t in run.get_task_instances() if t.task_id == "apply")
    assert ti.xcom_pull(task_ids="apply", key=REBASELINES_XCOM) == [
        {"table": TABLE, "destination": name, "reason": f"{CHANGE}; destination {name} cannot follow it "
         "without a rebaseline", "request": good.request}
        for name in ("good", "picky")
    ]  # fmt: skip
    assert good.reason == f"{CHANGE}; destination good cannot follow it without a rebaseline"
    printed = capsys.readouterr().out
    named = f"table {TABLE} in destination picky went back to Init: {CHANGE}"
    assert (named in printed) == (outcome == "failed")
    if outcome == "failed":
        assert "rebaseline public.items in picky (PgBaselineOperator with rebaseline=True" in printed


def test_fail_leaves_each_destination_errored_without_retry(
    database: Database,
    two_replicas: tuple[Database, Database],
    make_pipeline: MakePipeline,  # noqa: F811
    run_dag: RunDag,
    source_conn_id: str,
) -> None:
    good, _ = two_replicas
    pipeline = make_pipeline(["CREATE TABLE items (id int PRIMARY KEY, b int)"], ["items"])
    handed_off(pipeline, database, ["good", "picky"], two_replicas)
    database.execute("INSERT INTO items SELECT g, g FROM generate_series(1, 20) g")
    pipeline.capture_until_idle()  # the columns' identities known before the DDL
    database.execute("ALTER TABLE items ALTER COLUMN b TYPE text")
    database.execute("UPDATE items SET b = 'x' WHERE id = 1")

    run = run_dag(_cdc_dag(pipeline, source_conn_id, DESTINATIONS, on_schema_change="fail"))

    assert phases_of(run) == {"capture": "success", "apply": "failed"}
    for name in ("good", "picky"):
        phase = pipeline.state().table(TABLE).destination(name).phase
        assert isinstance(phase, Errored) and phase.retry == "none" and CHANGE in phase.reason
    assert len(rows(good, TABLE)) == 20  # the changes before the retype were applied
