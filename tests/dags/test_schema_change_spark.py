"""``on_schema_change`` with the lake and a PostgreSQL replica (real PostgreSQL, Airflow and Spark):
``ALTER COLUMN b TYPE text`` (integer to text) sends the table back to baseline in both.

- ``rebaseline``: the cdc run fails naming table, destinations and change, triggers the baseline
  DAG with exactly that table and both destinations; the other table keeps streaming; running
  the triggered conf, then cdc, brings both destinations to Ready, equal to the source.
- ``fail``: both Errored with the remedy, nothing triggered, the run fails; following the remedy
  brings them back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_pgsync.state.phases import Errored, TablePhase
from tests.apply.lake import lake_session, sort_rows, view_query
from tests.conftest import Database, MakeReplica
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, PipelineDags, task_states, triggered_baselines
from tests.support.replica import rows

DESTINATIONS = [{"kind": "lake"}, {"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}]
BOTH = ["lake", "replica"]


def _streaming(
    database: Database, make_pipeline_dags: MakePipelineDags, tables: list[str], **values: object
) -> PipelineDags:
    database.execute("CREATE TABLE items (id int PRIMARY KEY, b int, note text)")
    database.execute("CREATE TABLE other (id int PRIMARY KEY, v text)")
    database.execute("INSERT INTO items SELECT g, g, 'n' || g FROM generate_series(1, 200) g")
    database.execute("INSERT INTO other SELECT g, 'v' || g FROM generate_series(1, 100) g")
    pipeline = make_pipeline_dags(tables, destinations=DESTINATIONS, **values)
    assert str(pipeline.run("setup").state) == "success"
    baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
    assert str(baseline.state) == "success", task_states(baseline)
    database.execute("UPDATE items SET note = 'streamed' WHERE id <= 20")
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert {p.kind for t in tables for p in _destination_phases(pipeline, t)} == {"Ready"}
    return pipeline


def _destination_phases(pipeline: PipelineDags, table: str) -> list[TablePhase]:
    state = pipeline.state()
    return [state.table(table).destination(d).phase for d in BOTH]


def _retype(database: Database) -> None:
    database.execute("UPDATE items SET b = b + 1000 WHERE id <= 5")
    database.execute("ALTER TABLE items ALTER COLUMN b TYPE text")
    database.execute("INSERT INTO items VALUES (201, 'two hundred one', 'new')")
    database.execute("UPDATE items SET b = 'x' || id WHERE id BETWEEN 10 AND 12")
    database.execute("DELETE FROM items WHERE id = 100")
    database.execute("UPDATE other SET v = 'changed' WHERE id <= 10")


def _equal_everywhere(database: Database, replica: Database, lake: Path, tables: list[str]) -> None:
    found = lake_session(lake, [{"sql": view_query(database, t)} for t in tables])
    for table, lake_rows in zip(tables, found, strict=True):
        expected = rows(database, table)
        assert len(expected) >= 100, f"{table}: too few rows to prove anything"
        assert rows(replica, table) == expected, f"{table} differs in the replica"
        assert sort_rows(lake_rows) == expected, f"{table} differs in the lake"


@pytest.mark.slow
def test_lake_and_replica_rebaseline_is_triggered_and_brings_both_back(
    database: Database,
    make_replica: MakeReplica,
    make_pipeline_dags: MakePipelineDags,
    lake: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    replica = make_replica("replica")
    tables = ["public.items", "public.other"]
    pipeline = _streaming(database, make_pipeline_dags, ["items", "other"])
    name = pipeline.config.name
    before = triggered_baselines(pipeline)
    capsys.readouterr()

    _retype(database)
    cdc = pipeline.run("cdc")

    assert str(cdc.state) == "failed", "a run that sent a destination back to Init must not be green"
    assert task_states(cdc) == {
        "capture": "success", "apply": "success", "rebaselines": "success",
        "trigger_rebaseline[0]": "success", "outcome": "failed",
    }, task_states(cdc)  # fmt: skip
    assert [p.kind for p in _destination_phases(pipeline, "public.items")] == ["Init", "Init"]
    assert [p.kind for p in _destination_phases(pipeline, "public.other")] == ["Ready", "Ready"]
    assert rows(replica, "public.other") == rows(database, "public.other")  # kept streaming
    runs = triggered_baselines(pipeline)
    assert len(runs) == len(before) + 1, runs
    run_id, conf = runs[-1]
    assert conf == {"tables": ["public.items"], "destinations": BOTH, "mode": "rebaseline"}
    printed = capsys.readouterr().out
    for destination in BOTH:
        assert (
            "table public.items changed its columns (column b changed type from integer to text); "
            f"destination {destination} cannot follow it without a rebaseline; rebaseline triggered: "
            f"pgsync_{name}_baseline run {run_id}"
        ) in printed, printed[-3000:]

    # the triggered rebaseline (its conf), with writes before and after it, then cdc
    database.execute("UPDATE items SET note = 'before the rebaseline' WHERE id BETWEEN 30 AND 40")
    rebaseline = pipeline.run("baseline", run_conf=conf)
    assert str(rebaseline.state) == "success", task_states(rebaseline)
    database.execute("UPDATE items SET b = 'after' WHERE id BETWEEN 50 AND 55")
    database.execute("UPDATE other SET v = 'after' WHERE id BETWEEN 50 AND 55")
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert {p.kind for t in tables for p in _destination_phases(pipeline, t)} == {"Ready"}
    _equal_everywhere(database, replica, lake, tables)


@pytest.mark.slow
def test_lake_and_replica_fail_errored_with_the_remedy_nothing_triggered_then_recovered(
    database: Database,
    make_replica: MakeReplica,
    make_pipeline_dags: MakePipelineDags,
    lake: Path,
) -> None:
    replica = make_replica("replica")
    pipeline = _streaming(database, make_pipeline_dags, ["items"], on_schema_change="fail")
    name = pipeline.config.name
    before = triggered_baselines(pipeline)

    _retype(database)
    cdc = pipeline.run("cdc")

    assert str(cdc.state) == "failed", "a run that left a destination Errored must not be green"
    assert task_states(cdc) == {
        "capture": "success", "apply": "failed", "rebaselines": "skipped",
        "trigger_rebaseline": "skipped", "outcome": "failed",
    }, task_states(cdc)  # fmt: skip
    assert triggered_baselines(pipeline) == before
    for destination, phase in zip(BOTH, _destination_phases(pipeline, "public.items"), strict=True):
        assert isinstance(phase, Errored) and phase.retry == "none", phase
        assert "column b changed type from integer to text" in phase.reason
        assert phase.solution == (
            f"rebaseline public.items in {destination}: trigger pgsync_{name}_baseline with "
            f'tables=["public.items"], destinations=["{destination}"], mode=rebaseline'
        )

    # the remedy (both destinations in one run), then cdc: Ready and equal to the source
    remedy = {"tables": ["public.items"], "destinations": BOTH, "mode": "rebaseline"}
    assert str(pipeline.run("baseline", run_conf=remedy).state) == "success"
    database.execute("UPDATE items SET b = 'after' WHERE id BETWEEN 50 AND 55")
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert [p.kind for p in _destination_phases(pipeline, "public.items")] == ["Ready", "Ready"]
    _equal_everywhere(database, replica, lake, ["public.items"])
