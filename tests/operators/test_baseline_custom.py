"""A custom destination (the SQLite example of docs/writing-a-destination.md) takes its
baseline through ``load_baseline`` in a real Airflow DAG run: baseline, capture and apply
bring it exactly to the source, under a concurrent writer and a transaction that is in
progress when the snapshot is taken. No Spark job: the run has no lake or PostgreSQL
destination. A failing ``load_baseline`` fails the baseline and leaves the destination Errored."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.state.phases import Errored, Ready
from tests.capture.conftest import MakePipeline, Pipeline, make_pipeline  # noqa: F401 (the fixture)
from tests.conftest import Database, RunDag
from tests.support.baseline_writer import writer
from tests.support.replica import rows
from tests.support.sqlite_destination import source_text, sqlite_text

TABLE = "public.items"
DDL = [
    "CREATE TABLE items (id bigint PRIMARY KEY, m mood, d posint, n numeric(12,3), u numeric,"
    " ts timestamptz, b bytea, j jsonb, a int[], f float8, iv interval, doc text,"
    " ok boolean, c char(5), note text)",
    "ALTER TABLE items ALTER COLUMN doc SET STORAGE EXTERNAL",
]
TYPES = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE DOMAIN posint AS integer CHECK (VALUE > 0)",
]
ITEMS = """INSERT INTO items SELECT g, (ARRAY['sad', 'ok', 'happy', NULL])[g % 4 + 1]::mood,
    nullif(g % 50, 0), g / 7.0, CASE g % 5 WHEN 0 THEN 'NaN' WHEN 1 THEN NULL ELSE g * 1e-9 END,
    CASE g % 100 WHEN 0 THEN 'infinity'::timestamptz ELSE '2024-01-01 00:00+00'::timestamptz
    + g * interval '1 minute 0.5 second' END, decode(md5(g::text), 'hex'),
    jsonb_build_object('g', g, 'tag', 'é' || g), ARRAY[g, NULL, -g], g / 3.0, g * interval '1 hour',
    CASE WHEN g % 100 = 0 THEN repeat('toasted ', 3000) || g ELSE 'doc ' || g END,
    g % 3 = 0, left(g::text, 3), E'tab\\there\\nline \\\\ ' || g
    FROM generate_series(1, 3000) g"""


def _dag(
    pipeline: Pipeline, source_conn_id: str, destinations: list[dict[str, Any]], *, baseline: bool = True
) -> DAG:
    with DAG(f"pgsync_custom_{uuid.uuid4().hex[:6]}", schedule=None, default_args={"retries": 0}) as dag:
        capture, _ = pipeline.cdc_tasks(destinations, batch_rows=64)
        if baseline:
            first = PgBaselineOperator(
                task_id="baseline",
                pipeline=pipeline.name,
                table=TABLE,
                postgres_conn_id=source_conn_id,
                destinations=destinations,
                state_backend="postgres",
                spark_conn_id="no_spark_here",
            )
            first >> capture
    return dag


def _states(run: object) -> dict[str, str]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_custom_destination_takes_its_baseline_and_reaches_the_source_in_a_dag_run(
    database: Database,
    make_pipeline: MakePipeline,  # noqa: F811
    run_dag: RunDag,
    source_conn_id: str,
    example_module: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pipeline = make_pipeline([*TYPES, *DDL], [TABLE])
    database.transaction(ITEMS)
    path = tmp_path / "dest.sqlite"
    sqlite = {
        "kind": "custom",
        "class": f"{example_module}.SlowSqlite",
        "name": "sqlite_3",
        "path": str(path),
    }

    # a transaction in progress when the snapshot is taken, committed while the baseline runs
    inflight = database.connect(autocommit=False)
    inflight.execute("INSERT INTO items (id, note) VALUES (-1, 'in flight')")
    inflight.execute("UPDATE items SET note = 'in flight too', ok = NULL WHERE id = 7")
    in_snapshot: list[bool] = []

    def commit_once_the_snapshot_is_taken() -> None:
        with database.connect() as watch:
            for _ in range(600):  # the baseline locks the table in ACCESS SHARE mode first
                held = watch.execute(
                    "SELECT count(*) FROM pg_locks WHERE relation = 'items'::regclass"
                    " AND mode = 'AccessShareLock' AND granted AND pid <> %s",
                    (inflight.info.backend_pid,),
                ).fetchone()
                if held and held[0]:
                    in_snapshot.append(True)
                    break
                threading.Event().wait(0.05)
        threading.Event().wait(0.5)
        inflight.commit()

    committer = threading.Thread(target=commit_once_the_snapshot_is_taken, daemon=True)
    committer.start()
    try:
        with writer(database, "items") as committed:
            run = run_dag(_dag(pipeline, source_conn_id, [sqlite]))
    finally:
        committer.join(60)
        inflight.close()
    assert in_snapshot, "the in-flight transaction should be in progress in the baseline's snapshot"
    assert committed.done > 10, "the writer should commit while the baseline runs"
    assert _states(run) == {"baseline": "success", "capture": "success", "apply": "success"}
    printed = capsys.readouterr().out
    assert "no lake or PostgreSQL destination in this run, no Spark job" in printed
    assert "Spark-Submit cmd" not in printed

    # the changes committed after the run, then one more capture and apply
    database.execute("UPDATE items SET n = n + 1 WHERE id %% 10 = 0")  # doc: unchanged TOAST
    database.execute("DELETE FROM items WHERE id %% 17 = 0")
    assert _states(run_dag(_dag(pipeline, source_conn_id, [sqlite], baseline=False))) == {
        "capture": "success",
        "apply": "success",
    }

    want = source_text(database, TABLE)
    assert len(want) > 2700 and any(row[0] == "-1" for row in want)
    got = sqlite_text(path, TABLE)
    assert got == want
    table = pipeline.state().table(TABLE)
    done = table.destination("sqlite_3")
    assert done.phase == Ready() == table.phase
    sqlite_lineage = sqlite3.connect(path).execute("SELECT lineage FROM lineages").fetchall()
    assert sqlite_lineage == [(done.lineage,)]


def test_a_failing_load_baseline_fails_the_baseline_and_keeps_the_old_table(
    database: Database,
    make_pipeline: MakePipeline,  # noqa: F811
    source_conn_id: str,
    example_module: str,
    tmp_path: Path,
) -> None:
    pipeline = make_pipeline(["CREATE TABLE items (id int PRIMARY KEY, note text)"], [TABLE])
    database.execute("INSERT INTO items SELECT g, 'n' || g FROM generate_series(1, 50) g")
    path = tmp_path / "dest.sqlite"
    config = {
        "kind": "custom",
        "class": f"{example_module}.BrokenSqlite",
        "name": "broken",
        "path": str(path),
    }
    op = PgBaselineOperator(
        task_id="baseline",
        pipeline=pipeline.name,
        table=TABLE,
        postgres_conn_id=source_conn_id,
        destinations=[config],
        state_backend="postgres",
    )
    with pytest.raises(RuntimeError, match="the disk is full"):
        op.execute({"ti": None})  # type: ignore[typeddict-item]
    errored = pipeline.state().table(TABLE).destination("broken").phase
    assert isinstance(errored, Errored) and "the disk is full" in errored.reason
    assert sqlite_text(path, TABLE) == []  # open_table made it; the failed load left it so


def test_a_custom_class_that_cannot_be_imported_fails_the_baseline_before_any_work(
    make_pipeline: MakePipeline,  # noqa: F811
    source_conn_id: str,
) -> None:
    pipeline = make_pipeline(["CREATE TABLE items (id int PRIMARY KEY, note text)"], [TABLE])
    op = PgBaselineOperator(
        task_id="baseline",
        pipeline=pipeline.name,
        table=TABLE,
        postgres_conn_id=source_conn_id,
        destinations=[{"kind": "lake"}, {"kind": "custom", "class": "no_such_pkg.mod.Dest", "name": "gone"}],
        state_backend="postgres",
        spark_conn_id="no_spark_here",
    )
    with pytest.raises(ConfigError, match=r"cannot import module 'no_such_pkg\.mod'"):
        op.execute({"ti": None})  # type: ignore[typeddict-item]
    table = pipeline.state().table(TABLE)
    for name in ("lake", "gone"):
        errored = table.destination(name).phase
        assert isinstance(errored, Errored) and "install the package" in errored.reason


@pytest.mark.slow
@pytest.mark.usefixtures("spark_drivers")  # its baselines are Spark jobs (tests/tiers.py)
def test_a_replica_and_a_custom_destination_take_one_baseline_from_one_snapshot(
    database: Database,
    make_pipeline: MakePipeline,  # noqa: F811
    run_dag: RunDag,
    source_conn_id: str,
    replica: Database,
    replica_conn_id: str,
    example_module: str,
    tmp_path: Path,
) -> None:
    """One Spark job for the replica; the custom destination loaded after it, in the same snapshot."""
    pipeline = make_pipeline([*TYPES, *DDL], [TABLE])
    database.transaction(ITEMS, "ANALYZE items")
    path = tmp_path / "dest.sqlite"
    sqlite = {
        "kind": "custom",
        "class": f"{example_module}.SqliteDestination",
        "name": "sqlite",
        "path": str(path),
    }
    postgres = {"kind": "postgres", "conn_id": replica_conn_id, "name": "replica"}
    with writer(database, "items") as committed:
        run = run_dag(_dag(pipeline, source_conn_id, [postgres, sqlite]))
    assert committed.done > 10, "the writer should commit while the baseline runs"
    assert _states(run) == {"baseline": "success", "capture": "success", "apply": "success"}
    database.execute("UPDATE items SET n = n + 1 WHERE id %% 10 = 0")
    assert (
        _states(run_dag(_dag(pipeline, source_conn_id, [postgres, sqlite], baseline=False)))["apply"]
        == "success"
    )

    assert sqlite_text(path, TABLE) == source_text(database, TABLE)
    assert rows(replica, TABLE) == rows(database, TABLE)
    table = pipeline.state().table(TABLE)
    assert table.destination("sqlite").phase == Ready() == table.destination("replica").phase
    assert table.destination("sqlite").lineage == table.destination("replica").lineage
