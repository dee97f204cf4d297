"""Setup and teardown DAG runs against a real server (no Spark): setup creates publication, slot
and Init states and triggers the baseline; teardown refuses a wrong confirmation without
dropping anything, and drops slot, publication and state with the right one."""

from __future__ import annotations

from airflow_provider_pgsync.state.model import DataSync, Init
from airflow_provider_pgsync.state.store import update_state
from tests.conftest import Database
from tests.dags.conftest import MakePipelineDags, task_states


def _triggered_runs(dag_id: str) -> list[tuple[str, dict[str, object]]]:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        runs = session.query(DagRun).filter(DagRun.dag_id == dag_id).all()
        return [(str(r.run_type), dict(r.conf or {})) for r in runs]


def test_setup_then_teardown_with_a_wrong_and_the_right_confirmation(
    database: Database, make_pipeline_dags: MakePipelineDags
) -> None:
    database.execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
    database.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
    pipeline = make_pipeline_dags(["items", "notes"])
    name = pipeline.config.name

    run = pipeline.run("setup")
    assert task_states(run) == dict.fromkeys(
        ["preflight", "create_publication", "create_slot", "init_table_states", "tables_to_baseline",
         "trigger_baseline"], "success",
    ), task_states(run)  # fmt: skip
    assert pipeline.slot_exists() and pipeline.publication_exists()
    state = pipeline.state()
    assert {k: t.phase for k, t in state.tables.items()} == {"public.items": Init(), "public.notes": Init()}
    assert state.slot_name == pipeline.config.slot_name and state.slot_creation_lsn is not None
    baseline_id = f"pgsync_{name}_baseline"
    assert _triggered_runs(baseline_id) == [
        ("operator_triggered", {"tables": ["public.items", "public.notes"], "mode": "rebaseline"})
    ]

    # a second setup keeps the state; it triggers a baseline only of tables still in Init
    again = pipeline.run("setup")
    assert str(again.state) == "success", task_states(again)
    assert pipeline.state() == state
    assert len(_triggered_runs(baseline_id)) == 2
    store = pipeline.store()
    update_state(store, name, lambda s: s.with_table_phase("public.items", DataSync()))
    update_state(store, name, lambda s: s.with_table_phase("public.notes", DataSync()))
    state = pipeline.state()
    third = pipeline.run("setup")
    assert task_states(third)["tables_to_baseline"] == "skipped"
    assert task_states(third)["trigger_baseline"] == "skipped"
    assert pipeline.state() == state
    assert len(_triggered_runs(baseline_id)) == 2

    for wrong in ({}, {"confirm": "shop"}, {"confirm": name.upper()}):
        refused = pipeline.run("teardown", run_conf=wrong)
        assert str(refused.state) == "failed", wrong
        states = task_states(refused)
        assert states["check_confirmation"] == "failed", states
        assert {states[t] for t in ("drop_slot", "drop_publication", "delete_state")} == {"upstream_failed"}
        assert pipeline.slot_exists() and pipeline.publication_exists(), wrong
        assert pipeline.state() == state, wrong

    done = pipeline.run("teardown", run_conf={"confirm": name})
    assert str(done.state) == "success", task_states(done)
    assert not pipeline.slot_exists() and not pipeline.publication_exists()
    assert pipeline.state().version == 0, "the state is still saved"

    # teardown is idempotent: nothing left to drop is not an error
    assert str(pipeline.run("teardown", run_conf={"confirm": name}).state) == "success"
