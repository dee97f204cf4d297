"""``on_schema_change`` through the factory's cdc DAG (real PostgreSQL, real Airflow ``dag.test()``,
no Spark): a custom destination (the SQLite example of docs/writing-a-destination.md, whose
baseline needs no Spark job) and a PostgreSQL replica (handed off to the stream from the empty
tables), two tables; ``ALTER COLUMN b TYPE text`` on one of them.

- ``rebaseline``: that table goes back to Init in both destinations alone, the cdc run fails
  naming table, destination and what changed, and it triggers the baseline DAG for exactly that
  table and those destinations (the DagRun's conf in the metadata DB), once: later runs fail
  naming it as long as it waits, triggering nothing again; the other table keeps streaming;
  the triggered baseline (the SQLite destination's part) then cdc bring it back.
- ``fail``: Errored (retry none) with the remedy, the run fails, nothing is triggered, and every
  later run fails as long as a destination is Errored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.phases import DataSync, Errored, Ready, SyncDone
from airflow_provider_pgsync.state.store import update_state
from tests.conftest import Database, MakeReplica
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, PipelineDags, task_states, triggered_baselines
from tests.support.replica import empty_baseline, rows
from tests.support.sqlite_destination import source_text, sqlite_text

TABLES = ["public.items", "public.other"]


def _pipeline(
    database: Database,
    replica: Database,
    make_pipeline_dags: MakePipelineDags,
    module: str,
    path: Path,
    **values: Any,
) -> PipelineDags:
    database.execute("CREATE TABLE items (id int PRIMARY KEY, b int, note text)")
    database.execute("CREATE TABLE other (id int PRIMARY KEY, v text)")
    sqlite = {"kind": "custom", "class": f"{module}.SqliteDestination", "name": "sqlite", "path": str(path)}
    postgres = {"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}
    pipeline = make_pipeline_dags(["items", "other"], destinations=[sqlite, postgres], **values)
    assert str(pipeline.run("setup").state) == "success"
    # the SQLite destination's baseline (no Spark job); the replica's: handed off from the empty tables
    conf = {"tables": TABLES, "destinations": ["sqlite"], "mode": "rebaseline"}
    first = pipeline.run("baseline", run_conf=conf)
    assert str(first.state) == "success", task_states(first)
    _hand_off_empty(pipeline, database, replica, "replica")
    database.execute("INSERT INTO items SELECT g, g, 'n' || g FROM generate_series(1, 50) g")
    database.execute("INSERT INTO other SELECT g, 'v' || g FROM generate_series(1, 30) g")
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert _phases(pipeline) == dict.fromkeys(_phases(pipeline), "Ready")
    return pipeline


def _hand_off_empty(pipeline: PipelineDags, database: Database, replica: Database, name: str) -> None:
    """The baseline of the (still empty) tables in destination ``name``: every later change applies."""
    for table in TABLES:
        empty_baseline(database, replica, name, table, f"empty-{name}")
    xmax, lsn = database.execute(
        "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_insert_lsn()::text"
    )[0]

    def change(state: PipelineState) -> PipelineState:
        for table in TABLES:
            lineage = f"empty-{name}"
            done = SyncDone(
                "00000003-00000002-1", LSN.parse(str(lsn)), int(str(xmax)), int(str(xmax)), lineage=lineage
            )
            state = state.with_destination_phase(table, name, DataSync(lineage))
            state = state.with_destination_phase(table, name, done)
        return state

    update_state(pipeline.store(), pipeline.config.name, change)


def _phases(pipeline: PipelineDags) -> dict[tuple[str, str], str]:
    state = pipeline.state()
    return {(t, d): state.table(t).destination(d).phase.kind for t in TABLES for d in ("sqlite", "replica")}


def _retype(database: Database) -> None:
    """``b`` from integer to text, with writes before and after it and to the other table."""
    database.execute("UPDATE items SET b = b + 100 WHERE id <= 5")
    database.execute("ALTER TABLE items ALTER COLUMN b TYPE text")
    database.execute("INSERT INTO items VALUES (51, 'fifty-one', 'new')")
    database.execute("UPDATE items SET b = 'x' || id WHERE id BETWEEN 10 AND 12")
    database.execute("UPDATE other SET v = 'changed' WHERE id <= 10")
    database.execute("INSERT INTO other VALUES (31, 'v31')")


def _equal(database: Database, replica: Database, path: Path, table: str) -> None:
    assert sqlite_text(path, table) == source_text(database, table), f"{table} differs in sqlite"
    assert rows(replica, table) == rows(database, table), f"{table} differs in the replica"


@pytest.mark.slow
def test_rebaseline_fails_the_run_naming_the_change_and_triggers_exactly_that_rebaseline(
    database: Database,
    make_replica: MakeReplica,
    make_pipeline_dags: MakePipelineDags,
    example_module: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    replica = make_replica("replica")
    path = tmp_path / "dest.sqlite"
    pipeline = _pipeline(database, replica, make_pipeline_dags, example_module, path)
    assert pipeline.config.on_schema_change == "rebaseline"  # the default
    name = pipeline.config.name
    before = triggered_baselines(pipeline)  # setup's
    capsys.readouterr()

    _retype(database)
    cdc = pipeline.run("cdc")

    # not green: the run that sent destinations back to baseline fails
    assert str(cdc.state) == "failed"
    assert task_states(cdc) == {
        "capture": "success", "apply": "success", "rebaselines": "success",
        "trigger_rebaseline[0]": "success", "outcome": "failed",
    }, task_states(cdc)  # fmt: skip
    assert _phases(pipeline) == {
        ("public.items", "sqlite"): "Init",
        ("public.items", "replica"): "Init",
        ("public.other", "sqlite"): "Ready",
        ("public.other", "replica"): "Ready",
    }
    _equal(database, replica, path, "public.other")  # the other table kept streaming in both
    runs = triggered_baselines(pipeline)
    assert len(runs) == len(before) + 1, runs
    run_id, conf = runs[-1]
    assert conf == {"tables": ["public.items"], "destinations": ["sqlite", "replica"], "mode": "rebaseline"}
    printed = capsys.readouterr().out  # the failing task's error, as Airflow logs it
    assert "SchemaRebaselineError" in printed, printed[-3000:]
    for destination in ("sqlite", "replica"):
        assert (
            "  - table public.items changed its columns (column b changed type from integer to text); "
            f"destination {destination} cannot follow it without a rebaseline; rebaseline triggered: "
            f"pgsync_{name}_baseline run {run_id}\n"
        ) in printed, printed[-3000:]

    # the next run sends the request again: it triggers nothing new (the rebaseline is queued)
    # and fails again naming it; the other table streams on
    database.execute("UPDATE other SET v = 'again' WHERE id = 1")
    again = pipeline.run("cdc")
    assert task_states(again) == {
        "capture": "success", "apply": "success", "rebaselines": "success",
        "trigger_rebaseline[0]": "skipped", "outcome": "failed",
    }, task_states(again)  # fmt: skip
    assert len(triggered_baselines(pipeline)) == len(runs)
    assert f"rebaseline triggered earlier: pgsync_{name}_baseline run {run_id} (queued)" in (
        capsys.readouterr().out
    )
    _equal(database, replica, path, "public.other")

    # the triggered run's rebaseline, as far as it needs no Spark (the replica's is a Spark job:
    # test_schema_change_spark.py), then cdc: Ready and equal to the source again
    sqlite_part = {**conf, "destinations": ["sqlite"]}
    assert str(pipeline.run("baseline", run_conf=sqlite_part).state) == "success"
    database.execute("INSERT INTO items VALUES (52, 'after', 'the rebaseline')")
    cdc = pipeline.run("cdc")
    # the replica's part still waits for the run triggered: named again, nothing triggered again
    assert task_states(cdc)["outcome"] == "failed" and task_states(cdc)["apply"] == "success"
    assert task_states(cdc)["trigger_rebaseline[0]"] == "skipped"
    assert len(triggered_baselines(pipeline)) == len(runs)
    phases = _phases(pipeline)
    assert phases[("public.items", "sqlite")] == "Ready" and phases[("public.items", "replica")] == "Init"
    assert sqlite_text(path, "public.items") == source_text(database, "public.items")


@pytest.mark.slow
def test_the_rebaseline_is_triggered_also_when_apply_fails_for_another_table(
    database: Database,
    make_replica: MakeReplica,
    make_pipeline_dags: MakePipelineDags,
    example_module: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    replica = make_replica("replica")
    pipeline = _pipeline(database, replica, make_pipeline_dags, example_module, tmp_path / "dest.sqlite")
    name = pipeline.config.name
    before = triggered_baselines(pipeline)
    replica.execute("ALTER TABLE other ADD CONSTRAINT no_bad CHECK (v <> 'bad')")  # refuses one value
    capsys.readouterr()

    _retype(database)
    database.execute("UPDATE other SET v = 'bad' WHERE id = 2")
    cdc = pipeline.run("cdc")

    assert str(cdc.state) == "failed"
    assert task_states(cdc) == {
        "capture": "success", "apply": "failed", "rebaselines": "success",
        "trigger_rebaseline[0]": "success", "outcome": "failed",
    }, task_states(cdc)  # fmt: skip
    assert _phases(pipeline) == {
        ("public.items", "sqlite"): "Init",
        ("public.items", "replica"): "Init",
        ("public.other", "sqlite"): "Ready",
        ("public.other", "replica"): "Errored",
    }
    runs = triggered_baselines(pipeline)
    assert len(runs) == len(before) + 1, runs
    run_id, conf = runs[-1]
    assert conf == {"tables": ["public.items"], "destinations": ["sqlite", "replica"], "mode": "rebaseline"}
    printed = capsys.readouterr().out
    # apply's error tells the whole story; outcome's adds the run triggered
    assert "table public.other in destination replica is Errored" in printed and "no_bad" in printed
    assert (
        "table public.items in destination replica went back to Init: table public.items changed its columns "
        "(column b changed type from integer to text); destination replica cannot follow it without a "
        "rebaseline; a task after this one triggers its rebaseline"
    ) in printed
    assert "task apply failed too" in printed
    assert f"rebaseline triggered: pgsync_{name}_baseline run {run_id}" in printed


@pytest.mark.slow
def test_fail_leaves_the_destinations_errored_with_the_remedy_and_triggers_nothing(
    database: Database,
    make_replica: MakeReplica,
    make_pipeline_dags: MakePipelineDags,
    example_module: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    replica = make_replica("replica")
    path = tmp_path / "dest.sqlite"
    pipeline = _pipeline(database, replica, make_pipeline_dags, example_module, path, on_schema_change="fail")
    name = pipeline.config.name
    before = triggered_baselines(pipeline)
    capsys.readouterr()

    _retype(database)
    cdc = pipeline.run("cdc")

    assert str(cdc.state) == "failed"
    assert task_states(cdc) == {
        "capture": "success", "apply": "failed", "rebaselines": "skipped",
        "trigger_rebaseline": "skipped", "outcome": "failed",
    }, task_states(cdc)  # fmt: skip
    assert triggered_baselines(pipeline) == before, "fail triggers nothing"
    state = pipeline.state()
    for destination in ("sqlite", "replica"):
        phase = state.table("public.items").destination(destination).phase
        assert isinstance(phase, Errored), phase
        assert phase.retry == "none"
        assert "column b changed type from integer to text" in phase.reason
        assert (
            f"rebaseline public.items in {destination}: trigger pgsync_{name}_baseline with "
            f'tables=["public.items"], destinations=["{destination}"], mode=rebaseline'
        ) == phase.solution
    assert {state.table("public.other").destination(d).phase for d in ("sqlite", "replica")} == {Ready()}
    _equal(database, replica, path, "public.other")
    printed = capsys.readouterr().out
    assert "ApplyFailedError" in printed and "column b changed type from integer to text" in printed
    assert f"trigger pgsync_{name}_baseline with" in printed
    assert "task apply of this run did not succeed" in printed  # outcome fails with it

    # as long as a destination is Errored, every cdc run fails (the other table streams on)
    database.execute("UPDATE other SET v = 'again' WHERE id = 1")
    again = pipeline.run("cdc")
    assert str(again.state) == "failed" and task_states(again)["apply"] == "failed"
    _equal(database, replica, path, "public.other")

    # the remedy for the SQLite destination (no Spark job): it comes back, the replica still fails the run
    remedy = {"tables": ["public.items"], "destinations": ["sqlite"], "mode": "rebaseline"}
    assert str(pipeline.run("baseline", run_conf=remedy).state) == "success"
    third = pipeline.run("cdc")
    assert str(third.state) == "failed" and task_states(third)["apply"] == "failed"
    assert pipeline.state().table("public.items").destination("sqlite").phase == Ready()
    assert sqlite_text(path, "public.items") == source_text(database, "public.items")
    assert triggered_baselines(pipeline) == before
