"""ALTER TABLE ... RENAME TO in the source, through the pipeline's DAGs (real PostgreSQL, Airflow and
Spark; a lake and a PostgreSQL destination): two tables Ready with a writer on both; one renamed
(inside a writer's transaction) keeps streaming under the pipeline's name, the other too; setup
passes with the config unchanged and with the config naming the new name (no second table); a
rebaseline and a backfill of the renamed table work; each destination equals the source throughout."""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from airflow_provider_pgsync.source.names import TableRef
from tests.apply.lake import lake_session, sort_rows
from tests.conftest import Database
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, PipelineDags, task_states
from tests.support.lake_oracle import lake_rows
from tests.support.replica import rows
from tests.support.writer import Writes, concurrent_writer

DESTINATIONS = [{"kind": "lake"}, {"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}]


@contextmanager
def writer(
    database: Database, names: dict[str, str], rename: threading.Event, ids: Iterator[int]
) -> Iterator[Writes]:
    """A thread committing transactions over both tables (new rows numbered from ``ids``) until
    the block ends; once ``rename`` is set, one of its transactions renames ``s`` to ``s_new``
    between writes to it (``names`` says what the tables are called)."""

    def transaction(conn: Any, _: int) -> None:
        n = next(ids)
        s = sql.Identifier(names["s"])
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(s), (n, n))
        conn.execute(sql.SQL("UPDATE {} SET v = v + 1 WHERE id = %s").format(s), (n % 50,))
        if rename.is_set() and names["s"] == "s":
            conn.execute("ALTER TABLE s RENAME TO s_new")
            names["s"] = "s_new"
            conn.execute("INSERT INTO s_new VALUES (%s, 0)", (-n,))
        conn.execute("INSERT INTO t VALUES (%s, %s)", (n, n))
        conn.execute("DELETE FROM t WHERE id = %s", (n - 7,))

    with concurrent_writer(database, transaction, interval=0, skip_deadlocks=False) as writes:
        yield writes


def _equal_everywhere(
    database: Database, replica: Database, lake: Path, source_s: str, *, spark: bool = False
) -> None:
    """The pipeline's tables public.s and public.t in the lake and the replica equal the source
    (public.s is ``source_s`` there); the lake read by the lake oracle, and with ``spark`` also
    through its views (the scenario's last check)."""
    found: list[Any] = []
    if spark:
        queries = [
            {"sql": f"SELECT CAST(id AS STRING), CAST(v AS STRING) FROM pgsync.public__{t}"}  # noqa: S608
            for t in "st"
        ]
        found = lake_session(lake, queries)
    for i, (table, source) in enumerate(zip(("public.s", "public.t"), (source_s, "public.t"), strict=True)):
        expected = rows(database, source)
        assert len(expected) > 50, f"{source}: too few rows to prove anything"
        assert rows(replica, table) == expected, f"{table} differs in the replica from {source}"
        assert lake_rows(lake, table, ["id", "v"]) == expected, f"{table} differs in the lake from {source}"
        if found:
            assert sort_rows(found[i]) == expected, f"{table} differs in the lake's view from {source}"


def _phases(pipeline: PipelineDags) -> dict[tuple[str, str], str]:
    state = pipeline.state()
    return {
        (k, d): ts.destination(d).phase.kind for k, ts in state.tables.items() for d in ("lake", "replica")
    }


def _cdc_ok(pipeline: PipelineDags) -> None:
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)


@pytest.mark.slow
def test_a_renamed_table_keeps_streaming_and_the_config_may_name_it_either_way(
    database: Database,
    replica: Database,
    make_pipeline_dags: MakePipelineDags,
    lake: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_REPLICA", replica.cluster.url(replica.name, with_password=True))
    database.execute("CREATE TABLE s (id int PRIMARY KEY, v int NOT NULL)")
    database.execute("CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)")
    database.execute("INSERT INTO s SELECT g, g FROM generate_series(1, 100) g")
    database.execute("INSERT INTO t SELECT g, g FROM generate_series(1, 100) g")
    pipeline = make_pipeline_dags(["s", "t"], destinations=DESTINATIONS)
    assert str(pipeline.run("setup").state) == "success"
    oid = int(str(database.execute("SELECT 's'::regclass::oid")[0][0]))
    assert pipeline.state().table("public.s").relation_id == oid, "setup records the relation OID"

    names, rename, ids = {"s": "s"}, threading.Event(), itertools.count(1000)
    with writer(database, names, rename, ids):
        baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
        assert str(baseline.state) == "success", task_states(baseline)
        _cdc_ok(pipeline)
    _cdc_ok(pipeline)
    assert set(_phases(pipeline).values()) == {"Ready"}
    _equal_everywhere(database, replica, lake, "public.s")

    # the rename, inside a writer's transaction, with writes to both tables before and after it
    with writer(database, names, rename, ids) as writes:
        _cdc_ok(pipeline)
        rename.set()
        _wait_until(lambda: names["s"] == "s_new" and writes.done > 5, "the writer renamed the table", writes)
        _cdc_ok(pipeline)  # while the writer goes on
    _cdc_ok(pipeline)
    state = pipeline.state()
    assert set(state.tables) == {"public.s", "public.t"}
    assert state.table("public.s").source_name == TableRef("public", "s_new")
    assert state.table("public.s").relation_id == oid
    assert set(_phases(pipeline).values()) == {"Ready"}
    _equal_everywhere(database, replica, lake, "public.s_new")

    # setup with the config unchanged: preflight and the publication follow the table by its OID
    setup = pipeline.run("setup")
    assert str(setup.state) == "success", task_states(setup)
    assert set(pipeline.state().tables) == {"public.s", "public.t"}
    published = database.execute(
        "SELECT tablename::text FROM pg_publication_tables WHERE pubname = %s ORDER BY 1",
        (pipeline.config.publication_name,),
    )
    assert [r[0] for r in published] == ["s_new", "t"]

    # setup with the config naming the new name: the same table, no second state entry
    edited = make_pipeline_dags(["s_new", "t"], destinations=DESTINATIONS)
    setup = edited.run("setup")
    assert str(setup.state) == "success", task_states(setup)
    assert task_states(setup)["trigger_baseline"] == "skipped", "no table is new"
    assert set(edited.state().tables) == {"public.s", "public.t"}
    assert set(_phases(edited).values()) == {"Ready"}

    # a rebaseline of the renamed table (named as the edited config names it), with writes going on
    before = {d: edited.state().table("public.s").destination(d).lineage for d in ("lake", "replica")}
    with writer(database, names, rename, ids):
        again = edited.run(
            "baseline",
            run_conf={"tables": ["public.s_new"], "destinations": ["lake", "replica"], "mode": "rebaseline"},
        )
        assert str(again.state) == "success", task_states(again)
        _cdc_ok(edited)
    _cdc_ok(edited)
    state = edited.state()
    assert set(state.tables) == {"public.s", "public.t"}
    assert set(_phases(edited).values()) == {"Ready"}
    after = {d: state.table("public.s").destination(d).lineage for d in ("lake", "replica")}
    assert after["lake"] == after["replica"] and after["lake"] not in (before["lake"], before["replica"])
    _equal_everywhere(database, replica, lake, "public.s_new")

    # a backfill of the renamed table reads it under its new name and stages it for public.s
    conf = {
        "tables": ["public.s_new"],
        "destinations": ["lake"],
        "mode": "backfill",
        "backfill_filter": "id > 50",
    }
    backfill = edited.run("baseline", run_conf=conf)
    assert task_states(backfill).get("backfill[0]") == "success", task_states(backfill)
    assert edited.state().table("public.s").backfill is not None
    _cdc_ok(edited)
    assert edited.state().table("public.s").backfill is None, "apply merged the staged rows"
    _equal_everywhere(database, replica, lake, "public.s_new", spark=True)


def _wait_until(check: Callable[[], bool], what: str, writes: Writes, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert not writes.errors, writes.errors
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting until {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_setup_records_the_oids_of_an_older_state_and_then_follows_a_rename(
    database: Database, make_pipeline_dags: MakePipelineDags
) -> None:
    database.execute("CREATE TABLE s (id int PRIMARY KEY, v int NOT NULL)")
    database.execute("CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)")
    pipeline = make_pipeline_dags(["s", "t"])
    _setup_ok(pipeline)
    store = pipeline.store()
    state = store.load(pipeline.config.name)
    older = dataclasses.replace(  # as an older pgsync wrote it: no relation OIDs
        state, tables={k: dataclasses.replace(ts, relation_id=None) for k, ts in state.tables.items()}
    )
    store.save(older)
    assert pipeline.state().table("public.s").relation_id is None
    _setup_ok(pipeline)
    oid = int(str(database.execute("SELECT 's'::regclass::oid")[0][0]))
    assert pipeline.state().table("public.s").relation_id == oid

    database.execute("ALTER TABLE s RENAME TO s_new")
    for config_tables in (["s", "t"], ["s_new", "t"], ["t", "s_new"]):
        named = make_pipeline_dags(config_tables)
        _setup_ok(named)
        state = named.state()
        assert set(state.tables) == {"public.s", "public.t"}, config_tables
        assert state.table("public.s").source_name == TableRef("public", "s_new")
        assert state.table("public.s").relation_id == oid
    # naming both is naming one table twice
    both = make_pipeline_dags(["s", "s_new", "t"])
    setup = both.run("setup")
    assert task_states(setup)["preflight"] == "failed", task_states(setup)
    assert set(both.state().tables) == {"public.s", "public.t"}


SETUP_TASKS = ("preflight", "create_publication", "create_slot", "init_table_states")


def _setup_ok(pipeline: PipelineDags) -> None:
    """The setup's own tasks succeed (the tables stay in Init: it triggers a baseline run each time,
    which this test does not run)."""
    states = task_states(pipeline.run("setup"))
    assert {task: states[task] for task in SETUP_TASKS} == dict.fromkeys(SETUP_TASKS, "success"), states
