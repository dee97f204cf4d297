"""No silent divergence, no collateral failure (DESIGN §2 rules 11 and 12), through the drop-in
DAGs on real servers with a writer running: a replica table dropped (or its schema), emptied by
someone or replaced by another of its name is never created again empty; the cdc run fails
naming each table, its destination and the remedy, applies the others, and the named remedy (a
rebaseline of those tables in that destination) brings every table back equal to the source.
A lake table whose files were removed stops alone: the lake's other tables and the replica get
the run's changes. Files holding rows (changelog, lake) are private."""

from __future__ import annotations

import random
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.source.names import TableRef
from tests.apply.lake import lake_session, sort_rows, view_query
from tests.conftest import Database
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, PipelineDags, task_states
from tests.support.replica import rows
from tests.support.writer import Writes, concurrent_writer

REPLICA = [{"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}]


@contextmanager
def writer(database: Database, tables: list[str], seed: int) -> Iterator[Writes]:
    """A thread committing inserts, updates and deletes over ``tables`` until the block ends
    (about 200 transactions a second, so the machine's cores stay the Spark jobs' too)."""
    rng = random.Random(seed)

    def transaction(conn: Any, new: int) -> None:
        table = TableRef.parse(rng.choice(tables)).identifier
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, 'w')").format(table), (new,))
        conn.execute(
            sql.SQL("UPDATE {} SET v = v || '+' WHERE id = %s").format(table), (rng.randint(1, 100),)
        )
        conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(table), (new - 3,))

    with concurrent_writer(database, transaction, first=10_000_000 * seed, skip_deadlocks=False) as writes:
        yield writes


def _tables(database: Database, tables: list[str]) -> None:
    for table in tables:
        ident = TableRef.parse(table).identifier
        database.execute(
            sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(ident).as_string(None)
        )
        insert = sql.SQL("INSERT INTO {} SELECT g, 'r' || g FROM generate_series(1, 100) g").format(ident)
        database.execute(insert.as_string(None))


def _phase(pipeline: PipelineDags, table: str, destination: str) -> str:
    return pipeline.state().table(table).destination(destination).phase.kind


@pytest.mark.slow
@pytest.mark.usefixtures("spark_drivers")  # its baselines are Spark jobs (tests/tiers.py)
def test_a_replica_table_dropped_emptied_or_replaced_fails_loudly_and_a_rebaseline_repairs_it(
    database: Database,
    replica: Database,
    make_pipeline_dags: MakePipelineDags,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_REPLICA", replica.cluster.url(replica.name, with_password=True))
    database.execute("CREATE SCHEMA other")
    touched = ["public.dropped", "public.emptied", "public.replaced", "other.lost"]
    tables = [*touched, "public.kept"]
    _tables(database, tables)
    pipeline = make_pipeline_dags(tables, destinations=REPLICA)
    assert str(pipeline.run("setup").state) == "success"
    with writer(database, tables, 1):
        baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
        assert str(baseline.state) == "success", task_states(baseline)
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    for table in tables:
        assert rows(replica, table) == rows(database, table)

    # someone touches the replica
    replica.execute("DROP TABLE public.dropped")
    replica.execute("TRUNCATE public.emptied")
    replica.execute("CREATE TABLE public.replacing (LIKE public.replaced INCLUDING ALL)")
    replica.execute("INSERT INTO public.replacing SELECT * FROM public.replaced")  # the same rows
    replica.execute("DROP TABLE public.replaced")
    replica.execute("ALTER TABLE public.replacing RENAME TO replaced")
    replica.execute("DROP SCHEMA other CASCADE")
    with writer(database, tables, 2):
        failed = pipeline.run("cdc")
    assert task_states(failed)["apply"] == "failed", task_states(failed)
    again = pipeline.run("cdc")  # with every change the writer made: the same, loudly
    assert task_states(again)["apply"] == "failed", task_states(again)
    printed = capsys.readouterr().out
    baseline_dag = f"pgsync_{pipeline.config.name}_baseline"
    for table in touched:
        assert _phase(pipeline, table, "replica") == "Errored"
        assert f"table {table} in destination replica is Errored" in printed
        assert f'trigger {baseline_dag} with tables=["{table}"], destinations=["replica"]' in printed
    assert "is gone" in printed and "was written outside pgsync" in printed
    assert "not the table its baseline made" in printed
    # nothing created again empty; the untouched table got the run's changes
    assert replica.execute("SELECT to_regclass('public.dropped'), to_regnamespace('other')") == [(None, None)]
    assert _phase(pipeline, "public.kept", "replica") == "Ready"
    assert rows(replica, "public.kept") == rows(database, "public.kept")

    # the remedy the error names
    with writer(database, tables, 3):
        rebaseline = pipeline.run(
            "baseline", run_conf={"tables": touched, "destinations": ["replica"], "mode": "rebaseline"}
        )
        assert str(rebaseline.state) == "success", task_states(rebaseline)
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    for table in tables:
        assert _phase(pipeline, table, "replica") == "Ready"
        assert rows(replica, table) == rows(database, table), table


@pytest.mark.slow
def test_a_broken_lake_table_stops_alone(
    database: Database,
    replica: Database,
    make_pipeline_dags: MakePipelineDags,
    lake: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_REPLICA", replica.cluster.url(replica.name, with_password=True))
    tables = ["public.broken", "public.fine"]
    _tables(database, tables)
    pipeline = make_pipeline_dags(tables, destinations=[{"kind": "lake"}, *REPLICA])
    assert str(pipeline.run("setup").state) == "success"
    baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
    assert str(baseline.state) == "success", task_states(baseline)
    assert task_states(pipeline.run("cdc")) == CDC_GREEN

    # the lake's base of one table is removed by someone
    files = LakeFiles(LakeDestination.from_config({"warehouse": str(lake)}))
    meta = files.current(TableRef.parse("public.broken"))
    assert meta is not None
    shutil.rmtree(files.path(meta.base))
    with writer(database, tables, 4):
        failed = pipeline.run("cdc")
    assert task_states(failed)["apply"] == "failed"
    capsys.readouterr()
    failed = pipeline.run("cdc")  # with every change the writer made
    assert task_states(failed)["apply"] == "failed"
    printed = capsys.readouterr().out  # the task's error names the broken table alone
    assert "left 1 table(s) not applied" in printed
    assert "table public.broken in destination lake is Errored" in printed
    assert _phase(pipeline, "public.broken", "lake") == "Errored"
    reason = pipeline.state().table("public.broken").destination("lake").phase
    assert "is gone or incomplete" in getattr(reason, "reason", "")
    for table, destination in [
        ("public.fine", "lake"),
        ("public.broken", "replica"),
        ("public.fine", "replica"),
    ]:
        assert _phase(pipeline, table, destination) == "Ready", (table, destination)
    for table in tables:
        assert rows(replica, table) == rows(database, table)

    rebaseline = pipeline.run(
        "baseline", run_conf={"tables": ["public.broken"], "destinations": ["lake"], "mode": "rebaseline"}
    )
    assert str(rebaseline.state) == "success", task_states(rebaseline)
    assert task_states(pipeline.run("cdc")) == CDC_GREEN
    # what holds rows is private: the changelog and the lake (before a test's own Spark session
    # reads it, which writes with its umask)
    written = [*Path(pipeline.config.changelog_uri).rglob("*"), *lake.rglob("*")]
    assert len([p for p in written if p.suffix == ".parquet"]) > 4
    shared = [f"{p} {p.stat().st_mode:o}" for p in written if stat.S_IMODE(p.stat().st_mode) & 0o077]
    assert not shared, "readable by others:\n" + "\n".join(shared)
    found = lake_session(lake, [{"sql": view_query(database, t)} for t in tables])
    for table, lake_rows in zip(tables, found, strict=True):
        assert sort_rows(lake_rows) == rows(database, table), table
        assert rows(replica, table) == rows(database, table), table
