"""Nothing destructive by default, with real Airflow (``dag.test()``) and a real source: a baseline
run with the trigger form untouched copies nothing; with an explicit choice it runs. Setup
leaves no baseline run queued behind a paused baseline DAG, and triggers one when it is
unpaused. No Spark job: the destination is a custom one (the baseline reads it in the
operator)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import ParamValidationError

from airflow_provider_pgsync.dags import build_dags
from airflow_provider_pgsync.dags.params import chosen_tables
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pipeline import PipelineConfig
from tests.conftest import Database
from tests.dags.conftest import MakePipelineDags, PipelineDags, task_states


def _runs(dag_id: str) -> list[tuple[str, str, str]]:
    """(run type, state, run id) of every run of ``dag_id`` in the metadata database."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        found = session.query(DagRun).filter(DagRun.dag_id == dag_id).order_by(DagRun.id).all()
        return [(str(r.run_type), str(r.state), r.run_id) for r in found]


def _set_paused(dag_id: str, paused: bool) -> None:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        model = session.get(DagModel, dag_id)
        assert model is not None, f"{dag_id} is not stored"
        model.is_paused = paused


@pytest.fixture
def pipeline(
    database: Database,
    make_pipeline_dags: MakePipelineDags,
    example_module: str,
    tmp_path: Path,
) -> PipelineDags:
    database.execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
    database.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
    database.execute("INSERT INTO items SELECT g, 'n' || g FROM generate_series(1, 20) g")
    sqlite = {"kind": "custom", "class": f"{example_module}.SqliteDestination", "name": "sqlite"}
    return make_pipeline_dags(["items", "notes"], destinations=[{**sqlite, "path": str(tmp_path / "d.db")}])


def test_the_form_chooses_neither_tables_nor_mode() -> None:
    config = PipelineConfig.from_mapping({"name": "shop", "source_conn_id": "db", "tables": ["a", "b"]})
    params = build_dags(config)["pgsync_shop_baseline"].params
    for name in ("tables", "mode"):
        assert not params.get_param(name).has_value, f"param {name} has a default"
        with pytest.raises(ParamValidationError, match="No value passed"):
            params.get_param(name).resolve()
    with pytest.raises(ParamValidationError, match=r"Invalid input for param (tables|mode)"):
        params.validate()
    with pytest.raises(ParamValidationError):  # an empty choice is no choice
        params.get_param("tables").resolve([])
    # a conf that bypasses the form (an old trigger, a hand-made one) fails the first task alike
    with pytest.raises(
        ConfigError, match=r"param 'mode' is required: choose rebaseline .* nothing was copied"
    ):
        chosen_tables(config, {"tables": ["public.a"]})
    with pytest.raises(ConfigError, match=r"param 'tables' is required: .* public.a, public.b\); nothing"):
        chosen_tables(config, {"mode": "rebaseline"})
    assert [
        t["table"] for t in chosen_tables(config, {"tables": ["b"], "mode": "rebaseline"})["rebaseline"]
    ] == ["public.b"]


def test_a_baseline_run_with_the_defaults_copies_nothing(pipeline: PipelineDags) -> None:
    pipeline.run("setup")
    before = pipeline.state()
    assert {t.phase.kind for t in before.tables.values()} == {"Init"}
    baseline_id = pipeline.dag("baseline").dag_id
    runs = _runs(baseline_id)

    # as `airflow dags test` or the API with no conf: Airflow refuses to create the run
    with pytest.raises(ParamValidationError, match=r"Invalid input for param (tables|mode)"):
        pipeline.run("baseline")
    assert _runs(baseline_id) == runs, "a run was created"
    assert pipeline.state() == before, "the state changed"

    # only tables chosen: still refused, naming the missing param
    with pytest.raises(ParamValidationError, match="Invalid input for param mode"):
        pipeline.run("baseline", run_conf={"tables": ["public.items"]})
    assert pipeline.state() == before

    # an explicit choice runs, and copies exactly the chosen table
    run = pipeline.run("baseline", run_conf={"tables": ["public.items"], "mode": "rebaseline"})
    assert str(run.state) == "success", task_states(run)
    after = pipeline.state()
    assert after.table("public.items").phase.kind == "SyncDone"
    assert after.table("public.notes").phase.kind == "Init"


def test_setup_queues_no_baseline_behind_a_paused_dag_and_triggers_an_unpaused_one(
    pipeline: PipelineDags,
) -> None:
    baseline_id = pipeline.dag("baseline").dag_id
    pipeline.store_dags()
    # paused, as dags_are_paused_at_creation leaves a new DAG (the demo, a fresh deployment)
    _set_paused(baseline_id, True)
    setup = pipeline.run("setup")
    assert str(setup.state) == "success", task_states(setup)
    states = task_states(setup)
    assert states["tables_to_baseline"] == "skipped"
    assert states["trigger_baseline"] == "skipped"
    assert _runs(baseline_id) == [], "setup left a baseline run for a scheduler to start later"
    assert {t.phase.kind for t in pipeline.state().tables.values()} == {"Init"}

    # unpaused: setup triggers exactly the tables in Init, with an explicit mode
    _set_paused(baseline_id, False)
    again = pipeline.run("setup")
    assert task_states(again)["trigger_baseline"] == "success", task_states(again)
    runs = _runs(baseline_id)
    assert [(kind, state) for kind, state, _ in runs] == [("operator_triggered", "queued")]
    conf = _conf(baseline_id, runs[0][2])
    assert conf == {"tables": ["public.items", "public.notes"], "mode": "rebaseline"}


def _conf(dag_id: str, run_id: str) -> dict[str, Any]:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        found = session.query(DagRun).filter(DagRun.dag_id == dag_id, DagRun.run_id == run_id).one()
        return dict(found.conf or {})
