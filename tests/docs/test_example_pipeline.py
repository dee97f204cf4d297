"""docs/example_pipeline.py runs as written: Airflow parses the file itself (a DagBag of it),
configured only by its Airflow connections and environment variables, and its four DAGs run
with ``dag.test()`` against a real source and replica (PostgreSQL) and a real lake (Spark):
setup, baseline while rows change, writes, cdc, compaction. The lake (before and after
compaction) and the replica then equal the source, and every table is Ready in both."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.state_stores import open_state_store
from airflow_provider_pgsync.state.model import Ready
from tests.apply.lake import lake_session, sort_rows, view_query
from tests.conftest import Database, MakeReplica
from tests.dags.conftest import task_states
from tests.support.replica import rows

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "example_pipeline.py"
TABLES = ["public.orders", "public.customers"]
DDL = [
    "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text)",
    "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int NOT NULL, amount numeric(12,2),"
    " placed_on date NOT NULL DEFAULT current_date, note text)",
    "INSERT INTO customers SELECT g, 'customer ' || g, 'c' || g || '@example.com'"
    " FROM generate_series(1, 200) g",
    "INSERT INTO orders (id, customer_id, amount, note) SELECT g, 1 + g %% 200, g * 1.25, 'order ' || g"
    " FROM generate_series(1, 2000) g",
]


def _dags(airflow_db: None) -> dict[str, Any]:
    """The example's DAGs as Airflow loads the file, stored like the DAG processor does."""
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    bag = DagBag(dag_folder=str(EXAMPLE))
    assert not bag.import_errors, bag.import_errors
    sync_bag_to_db(bag, "dags-folder", None)
    return dict(bag.dags)


def _run(dags: dict[str, Any], dag_id: str) -> dict[str, str]:
    states = task_states(dags[dag_id].test())
    assert states and set(states.values()) == {"success"}, (dag_id, states)
    return states


def _lake_equals_source(database: Database, lake: Path) -> None:
    found = lake_session(lake, [{"sql": view_query(database, t)} for t in TABLES])
    for table, lake_rows in zip(TABLES, found, strict=True):
        assert sort_rows(lake_rows) == rows(database, table), f"the lake's {table} differs from the source"


@pytest.mark.slow
def test_the_example_pipeline_runs_as_written(
    database: Database,
    make_replica: MakeReplica,
    lake: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    airflow_db: None,
) -> None:
    for statement in DDL:
        database.execute(statement)
    replica = make_replica("example")
    # the example's configuration: its two connections and where its changelog goes (the lake
    # fixture sets PGSYNC_LAKE); the file's default tables are the ones created above
    source_url = database.cluster.url(database.name, with_password=True)
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_EXAMPLE_SOURCE", source_url)
    replica_url = replica.cluster.url(replica.name, with_password=True)
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_EXAMPLE_REPLICA", replica_url)
    monkeypatch.setenv("PGSYNC_EXAMPLE_CHANGELOG", str(tmp_path / "changelog"))
    monkeypatch.delenv("PGSYNC_EXAMPLE_TABLES", raising=False)
    store = open_state_store("variables", PgReplicationHook(postgres_conn_id="pgsync_example_source"))
    store.delete("example")  # the tests' Airflow database outlives one test

    dags = _dags(airflow_db)
    assert sorted(dags) == [
        "example_pgsync_baseline",
        "example_pgsync_cdc",
        "example_pgsync_compact",
        "example_pgsync_setup",
    ]

    _run(dags, "example_pgsync_setup")
    slots = database.execute("SELECT plugin FROM pg_replication_slots WHERE slot_name = 'pgsync_example'")
    assert slots == [("pgoutput",)]
    # changes after the slot and before the baseline: the baseline's snapshot has some of
    # them, capture has all; apply must neither lose nor repeat one
    database.execute("UPDATE orders SET amount = amount + 1 WHERE id %% 7 = 0")
    database.execute("INSERT INTO customers VALUES (201, 'early', NULL)")

    states = _run(dags, "example_pgsync_baseline")
    assert set(states) == {"baseline_public__orders", "baseline_public__customers"}

    database.execute("INSERT INTO orders (id, customer_id, amount, note) VALUES (5001, 201, 9.99, 'late')")
    database.execute("UPDATE orders SET note = 'changed', amount = NULL WHERE id BETWEEN 100 AND 150")
    database.execute("DELETE FROM orders WHERE id %% 11 = 0")
    database.execute("UPDATE customers SET id = 1201 WHERE id = 12")  # a key change
    database.execute("DELETE FROM customers WHERE id = 13")

    _run(dags, "example_pgsync_cdc")
    state = store.load("example")
    for table in TABLES:
        for destination in ("lake", "replica"):
            phase = state.tables[table].destination(destination).phase
            assert isinstance(phase, Ready), (table, destination, phase)
        assert rows(replica, table) == rows(database, table), f"the replica's {table} differs"
    written = list((tmp_path / "changelog").rglob("*.parquet"))
    assert written, "capture wrote no changelog segment where PGSYNC_EXAMPLE_CHANGELOG points"
    _lake_equals_source(database, lake)

    database.execute("UPDATE customers SET name = name || ' (compacted)' WHERE id %% 2 = 0")
    _run(dags, "example_pgsync_cdc")
    _run(dags, "example_pgsync_compact")
    _lake_equals_source(database, lake)
    for table in TABLES:
        assert rows(replica, table) == rows(database, table), f"the replica's {table} differs"
    assert os.environ["PGSYNC_LAKE"] == str(lake)
