"""A pipeline's DAGs end to end: real PostgreSQL, real Airflow (``dag.test()``), real Spark.

setup -> baseline of every table (the trigger form's defaults) -> writes -> cdc: the lake's
views equal the source and the tables are Ready, with an asset event per changed table. Then a
rebaseline of one table through the baseline DAG's params leaves the other table's state as it
was, later writes stream into both, a backfill of some rows of one table (mode backfill) goes
through the next cdc run, and the compact DAG folds the lake's segments; the lake still equals
the source. Six Spark applications in all (two baselines, a rebaseline, a backfill, a
compaction, the read-back).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.dags import table_asset
from airflow_provider_pgsync.state.model import Ready, SyncDone
from tests.apply.lake import lake_session, sort_rows, view_query
from tests.conftest import Database
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, task_states
from tests.support.replica import rows

TABLES = ["public.items", "public.notes"]


def _asset_events(run: Any) -> dict[str, dict[str, Any]]:
    """The asset events a DagRun emitted: ``{asset uri: extra}``."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        found = (
            session.query(AssetModel.uri, AssetEvent.extra)
            .join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetEvent.source_dag_id == run.dag_id, AssetEvent.source_run_id == run.run_id)
            .all()
        )
    return {uri: dict(extra or {}) for uri, extra in found}


def _check_lake(database: Database, lake: Path) -> None:
    found = lake_session(lake, [{"sql": view_query(database, t)} for t in TABLES])
    for table, lake_rows in zip(TABLES, found, strict=True):
        expected = rows(database, table)
        assert expected, f"{table} is empty: the comparison would prove nothing"
        assert sort_rows(lake_rows) == expected, table


@pytest.mark.slow
def test_setup_baseline_cdc_rebaseline_and_compact(
    database: Database, make_pipeline_dags: MakePipelineDags, lake: Path
) -> None:
    database.execute("CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10,2))")
    database.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
    database.execute("INSERT INTO items SELECT g, 'item ' || g, g * 1.5 FROM generate_series(1, 200) g")
    database.execute("INSERT INTO notes SELECT g, md5(g::text) FROM generate_series(1, 100) g")
    pipeline = make_pipeline_dags(["items", "notes"])
    name = pipeline.config.name

    setup = pipeline.run("setup")
    assert str(setup.state) == "success", task_states(setup)

    # the baseline DAG with every table chosen in the trigger form: one mapped task each
    baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
    assert task_states(baseline) == {
        "choose_tables": "success", "baseline[0]": "success", "baseline[1]": "success",
        "choose_backfills": "success", "backfill": "skipped",
    }, task_states(baseline)  # fmt: skip
    labels = {ti.rendered_map_index for ti in baseline.get_task_instances() if ti.task_id == "baseline"}
    assert labels == set(TABLES), "the mapped tasks are not labelled with their tables"
    results = {r["table"]: r for r in baseline.get_task_instances()[0].xcom_pull(task_ids="baseline")}
    assert {t: r["rows"] for t, r in results.items()} == {"public.items": 200, "public.notes": 100}
    assert all(isinstance(pipeline.state().table(t).phase, SyncDone) for t in TABLES)

    database.execute("INSERT INTO items SELECT g, 'new ' || g, g FROM generate_series(201, 230) g")
    database.execute("UPDATE items SET price = price * 2 WHERE id %% 7 = 0")
    database.execute("DELETE FROM items WHERE id BETWEEN 50 AND 59")
    database.execute("UPDATE notes SET body = 'edited' WHERE id <= 5")

    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    state = pipeline.state()
    assert {t: state.table(t).phase for t in TABLES} == dict.fromkeys(TABLES, Ready())
    events = _asset_events(cdc)
    assert set(events) == {table_asset(name, "lake", t).uri for t in TABLES}, events
    assert (
        events[table_asset(name, "lake", "public.items").uri]["applied"] == 30 + 230 // 7 + 10
    )  # inserts, updates, deletes

    # rebaseline items through the trigger form: notes keeps its state exactly, and streams on
    notes_before = pipeline.state().table("public.notes")
    database.execute("UPDATE items SET name = 'rebaselined' WHERE id <= 3")
    again = pipeline.run("baseline", run_conf={"tables": ["public.items"], "mode": "rebaseline"})
    assert task_states(again) == {
        "choose_tables": "success", "baseline[0]": "success",
        "choose_backfills": "success", "backfill": "skipped",
    }, task_states(again)  # fmt: skip
    [result] = again.get_task_instances()[0].xcom_pull(task_ids="baseline")
    assert (result["table"], result["rows"]) == ("public.items", 220)
    after = pipeline.state()
    assert after.table("public.notes") == notes_before, "the rebaseline touched another table"
    items = after.table("public.items").phase
    assert isinstance(items, SyncDone) and items.snapshot == result["snapshot"]

    database.execute("INSERT INTO notes VALUES (101, 'after the rebaseline')")
    database.execute("DELETE FROM notes WHERE id = 100")
    cdc2 = pipeline.run("cdc")
    assert str(cdc2.state) == "success", task_states(cdc2)
    state = pipeline.state()
    assert {t: state.table(t).phase for t in TABLES} == dict.fromkeys(TABLES, Ready())
    # only notes changed since: items came back Ready from its new base without applying anything
    assert set(_asset_events(cdc2)) == {table_asset(name, "lake", "public.notes").uri}

    # a backfill of some rows of notes: staged by the baseline DAG, applied by the next cdc run;
    # rows it re-sends that changed after its snapshot keep their newer values
    conf = {"tables": ["public.notes"], "mode": "backfill", "backfill_filter": "id <= 20"}
    backfill = pipeline.run("baseline", run_conf=conf)
    assert task_states(backfill) == {
        "choose_tables": "success", "baseline": "skipped",
        "choose_backfills": "success", "backfill[0]": "success",
    }, task_states(backfill)  # fmt: skip
    [staged] = backfill.get_task_instances()[0].xcom_pull(task_ids="backfill")
    assert (staged["table"], staged["rows"], staged["condition"]) == ("public.notes", 20, "id <= 20")
    assert pipeline.state().table("public.notes").backfill is not None
    database.execute("UPDATE notes SET body = 'after the backfill' WHERE id = 3")
    cdc3 = pipeline.run("cdc")
    assert str(cdc3.state) == "success", task_states(cdc3)
    assert pipeline.state().table("public.notes").backfill is None
    assert _asset_events(cdc3)[table_asset(name, "lake", "public.notes").uri]["applied"] == 1 + 19

    compact = pipeline.run("compact")
    assert task_states(compact) == {"compact_lake": "success"}, task_states(compact)
    folded = compact.get_task_instances()[0].xcom_pull(task_ids="compact_lake")
    segments = {r["table"]: r["segments"] for r in folded}
    assert set(segments) == set(TABLES) and segments["public.notes"] > 0, folded
    _check_lake(database, lake)


def test_a_backfill_before_any_baseline_fails_naming_the_phase(
    database: Database, make_pipeline_dags: MakePipelineDags
) -> None:
    database.execute("CREATE TABLE items (id int PRIMARY KEY)")
    pipeline = make_pipeline_dags(["items"])
    assert str(pipeline.run("setup").state) == "success"
    run = pipeline.run(
        "baseline", run_conf={"tables": ["public.items"], "mode": "backfill", "backfill_filter": "id > 10"}
    )
    assert str(run.state) == "failed"
    assert task_states(run)["backfill[0]"] == "failed", task_states(run)
    assert pipeline.state().table("public.items").phase.kind == "Init", "the backfill changed the table"
