"""Every destination its own lifecycle, through the pipeline's DAGs (real PostgreSQL, Airflow and
Spark): a lake and a PostgreSQL replica baselined from one snapshot each under a concurrent
multi-table writer, rows that existed before setup in both; then DROP COLUMN, ALTER COLUMN TYPE
and an added array column send each destination back to baseline only where it cannot follow;
a rebaseline of one table in one destination (the trigger form) and of another in both brings
every destination to Ready, equal to the source (per-row text, duplicates counted)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.state.model import Ready
from tests.apply.lake import lake_session, sort_rows, view_query
from tests.conftest import Database
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, PipelineDags, task_states, triggered_baselines
from tests.support.replica import rows
from tests.support.writer import Writes, concurrent_writer

TABLES = ["public.accounts", "public.events"]


@contextmanager
def writer(database: Database, seed: int) -> Iterator[Writes]:
    """A thread committing transactions over both tables (transfers, inserts, deletes, key
    changes, duplicate rows of the keyless table) until the block ends. A DDL running
    meanwhile may deadlock a transfer: the next one goes on."""
    rng = random.Random(seed)
    next_id = [10_000 + seed * 100_000]

    def transaction(conn: Any, _: int) -> None:
        _transaction(conn, rng, next_id)

    with concurrent_writer(database, transaction, interval=0) as writes:
        yield writes


def _transaction(conn: Any, rng: random.Random, next_id: list[int]) -> None:
    a, b = rng.randint(1, 400), rng.randint(1, 400)
    conn.execute("UPDATE accounts SET balance = balance - 5 WHERE id = %s", (a,))
    conn.execute("UPDATE accounts SET balance = balance + 5 WHERE id = %s", (b,))
    kind = rng.choice("abc")
    conn.execute("INSERT INTO events (kind, n) VALUES (%s, %s), (%s, %s)", (kind, a, kind, a))
    if rng.random() < 0.3:
        next_id[0] += 1
        conn.execute("INSERT INTO accounts (id, balance) VALUES (%s, 100)", (next_id[0],))
        conn.execute(
            "DELETE FROM events WHERE ctid = (SELECT min(ctid) FROM events WHERE kind = %s)", (kind,)
        )
    if rng.random() < 0.1:  # a key change
        next_id[0] += 1
        conn.execute("UPDATE accounts SET id = %s WHERE id = %s", (next_id[0], rng.randint(401, 600)))


def _equal_everywhere(pipeline: PipelineDags, database: Database, replica: Database, lake: Path) -> None:
    found = lake_session(lake, [{"sql": _lake_query(database, t)} for t in TABLES])
    for table, lake_rows in zip(TABLES, found, strict=True):
        expected = rows(database, table)
        assert len(expected) > 300, f"{table}: too few rows to prove anything"
        assert rows(replica, table) == expected, f"{table} differs in the replica"
        assert sort_rows(lake_rows) == expected, f"{table} differs in the lake"


def _lake_query(database: Database, table: str) -> str:
    """The table's lake view as PostgreSQL text; a text[] column as PostgreSQL writes it."""
    query = view_query(database, table)
    array = "CAST(`tags` AS STRING)"
    return query.replace(
        array, "CASE WHEN tags IS NULL THEN NULL ELSE concat('{', array_join(tags, ',', 'NULL'), '}') END"
    )


def _phases(pipeline: PipelineDags) -> dict[tuple[str, str], str]:
    state = pipeline.state()
    return {(t, d): state.table(t).destination(d).phase.kind for t in TABLES for d in ("lake", "replica")}


@pytest.mark.slow
def test_lake_and_replica_each_baselined_streamed_and_rebaselined_after_ddl(
    database: Database,
    replica: Database,
    make_pipeline_dags: MakePipelineDags,
    lake: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_REPLICA", replica.cluster.url(replica.name, with_password=True))
    database.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL, note text)")
    database.execute("CREATE TABLE events (kind text, n int)")
    database.execute("ALTER TABLE events REPLICA IDENTITY FULL")
    # rows from before setup: every destination must get them from its baseline
    database.execute("INSERT INTO accounts SELECT g, 1000, 'n' || g FROM generate_series(1, 600) g")
    database.execute("INSERT INTO events SELECT 'a', g %% 10 FROM generate_series(1, 300) g")
    pipeline = make_pipeline_dags(
        ["accounts", "events"],
        destinations=[{"kind": "lake"}, {"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}],
    )
    assert str(pipeline.run("setup").state) == "success"

    with writer(database, 1):
        baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
        assert str(baseline.state) == "success", task_states(baseline)
        cdc = pipeline.run("cdc")  # while the writer goes on
        assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert set(_phases(pipeline).values()) == {"Ready"}
    _equal_everywhere(pipeline, database, replica, lake)

    # schema changes, each with writes around it
    with writer(database, 2):
        database.execute("ALTER TABLE accounts DROP COLUMN note")
        database.execute("ALTER TABLE accounts ADD COLUMN tags text[]")
        database.execute("ALTER TABLE events ALTER COLUMN n TYPE bigint")
    database.execute("UPDATE accounts SET tags = ARRAY['x', NULL, 'y'] WHERE id <= 20")
    before = triggered_baselines(pipeline)
    cdc = pipeline.run("cdc")
    # the replica drops a column, adds the array and widens int to bigint in place; the lake
    # follows none of them: each destination goes back to baseline only where it must, the
    # run fails naming them and triggers exactly those rebaselines (on_schema_change: rebaseline)
    assert str(cdc.state) == "failed" and task_states(cdc)["outcome"] == "failed", task_states(cdc)
    assert _phases(pipeline) == {
        ("public.accounts", "lake"): "Init",
        ("public.accounts", "replica"): "Ready",
        ("public.events", "lake"): "Init",
        ("public.events", "replica"): "Ready",
    }
    # one baseline run per set of destinations: both tables need the lake only
    assert [conf for _, conf in triggered_baselines(pipeline)[len(before) :]] == [
        {"tables": ["public.accounts", "public.events"], "destinations": ["lake"], "mode": "rebaseline"},
    ]
    assert rows(replica, "public.accounts") == rows(database, "public.accounts")
    assert rows(replica, "public.events") == rows(database, "public.events")

    with writer(database, 3):
        # accounts into the lake only (the replica keeps streaming), events into both
        one = pipeline.run(
            "baseline",
            run_conf={"tables": ["public.accounts"], "destinations": ["lake"], "mode": "rebaseline"},
        )
        assert str(one.state) == "success", task_states(one)
        # (destinations named: dag.test() reuses the DAG object, whose params keep the last conf)
        both = pipeline.run(
            "baseline",
            run_conf={"tables": ["public.events"], "destinations": ["lake", "replica"], "mode": "rebaseline"},
        )
        assert str(both.state) == "success", task_states(both)
        assert str(pipeline.run("cdc").state) == "success"
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    state = pipeline.state()
    assert set(_phases(pipeline).values()) == {"Ready"}
    assert state.table("public.accounts").phase == Ready()
    lineages = {d: state.table("public.events").destination(d).lineage for d in ("lake", "replica")}
    assert lineages["lake"] == lineages["replica"] != "", "one baseline wrote both destinations"
    _equal_everywhere(pipeline, database, replica, lake)

    # a constant default for older rows and a rename: the replica follows both in place (older
    # rows get the default, the values keep their column); the lake goes back to baseline
    before = triggered_baselines(pipeline)
    with writer(database, 4):
        database.execute("ALTER TABLE accounts ADD COLUMN flag text DEFAULT 'x'")
        database.execute("UPDATE accounts SET flag = 'y' WHERE id <= 10")
        database.execute("ALTER TABLE accounts RENAME COLUMN flag TO flag2")
    cdc = pipeline.run("cdc")
    assert str(cdc.state) == "failed" and task_states(cdc)["outcome"] == "failed", task_states(cdc)
    assert _phases(pipeline)[("public.accounts", "replica")] == "Ready"
    assert _phases(pipeline)[("public.accounts", "lake")] == "Init"
    assert [conf for _, conf in triggered_baselines(pipeline)[len(before) :]] == [
        {"tables": ["public.accounts"], "destinations": ["lake"], "mode": "rebaseline"}
    ]
    assert rows(replica, "public.accounts") == rows(database, "public.accounts")
    again = pipeline.run(
        "baseline", run_conf={"tables": ["public.accounts"], "destinations": ["lake"], "mode": "rebaseline"}
    )
    assert str(again.state) == "success", task_states(again)
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert set(_phases(pipeline).values()) == {"Ready"}
    _equal_everywhere(pipeline, database, replica, lake)
