"""The source operators in real Airflow DAG runs (``dag.test()``) against a real server."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk import DAG, Param

from airflow_provider_pgsync.errors import PreflightError
from airflow_provider_pgsync.operators.replication import (
    PgCreatePublicationOperator,
    PgCreateSlotOperator,
    PgDropSlotOperator,
    PgPreflightOperator,
)
from tests.conftest import Database, RunDag


@pytest.fixture
def slot(database: Database) -> str:
    """A slot name of this test's own (slots are cluster-wide, databases are not)."""
    return f"s_{database.name}"


@pytest.fixture
def orders(database: Database) -> None:
    database.execute("CREATE TABLE orders (id int PRIMARY KEY, total int)")


def _setup_dag(dag_id: str, conn_id: str, *, drop: bool, tables: list[str], failures: list[Any]) -> DAG:
    """preflight >> publication >> slot [>> drop slot]; slot and table come from Params."""

    def record_failure(context: Any) -> None:
        failures.append((context["ti"].task_id, context["exception"]))

    with DAG(
        dag_id,
        schedule=None,
        params={"slot": Param("pgsync_unused", type="string"), "table": Param("orders", type="string")},
        default_args={"postgres_conn_id": conn_id, "retries": 0, "on_failure_callback": record_failure},
    ) as dag:
        preflight = PgPreflightOperator(
            task_id="preflight",
            slot_name="{{ params.slot }}",
            publication_name="pgsync_pub",
            tables=["{{ params.table }}", *tables],
        )
        publication = PgCreatePublicationOperator(
            task_id="publication", publication_name="pgsync_pub", tables=["{{ params.table }}", *tables]
        )
        create = PgCreateSlotOperator(task_id="create_slot", slot_name="{{ params.slot }}")
        preflight >> publication >> create
        if drop:
            create >> PgDropSlotOperator(task_id="drop_slot", slot_name="{{ params.slot }}")
    return dag


def _states(run: Any) -> dict[str, str | None]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def _results(run: Any) -> dict[str, Any]:
    return {ti.task_id: ti.xcom_pull(task_ids=ti.task_id) for ti in run.get_task_instances()}


def _slots(database: Database) -> list[tuple[object, ...]]:
    return database.execute(
        "SELECT slot_name::text, plugin::text, database::text FROM pg_replication_slots WHERE database = %s",
        (database.name,),
    )


def _publication(database: Database) -> list[tuple[object, ...]]:
    return database.execute(
        "SELECT pubname::text, schemaname::text, tablename::text FROM pg_publication_tables ORDER BY 1, 2, 3"
    )


@pytest.mark.usefixtures("orders")
def test_setup_then_teardown_dags_are_idempotent(
    database: Database, source_conn_id: str, slot: str, run_dag: RunDag
) -> None:
    failures: list[Any] = []
    conf = {"slot": slot}
    version = database.execute("SELECT current_setting('server_version_num')::int")[0][0]

    setup = _setup_dag("pgsync_setup", source_conn_id, drop=False, tables=[], failures=failures)
    first = run_dag(setup, run_conf=conf)
    assert (first.state, _states(first), failures) == (
        "success",
        {"preflight": "success", "publication": "success", "create_slot": "success"},
        [],
    )
    results = _results(first)
    assert results["preflight"] == {"server_version_num": version, "tables": ["public.orders"]}
    assert results["publication"] == "created"
    assert results["create_slot"]["slot_name"] == slot
    assert results["create_slot"]["created"] is True
    [(confirmed,)] = database.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    )
    assert results["create_slot"]["consistent_point"] == confirmed
    assert _slots(database) == [(slot, "pgoutput", database.name)]
    assert _publication(database) == [("pgsync_pub", "public", "orders")]

    second = run_dag(setup, run_conf=conf)
    assert (second.state, failures) == ("success", [])
    assert _results(second) == {
        "preflight": {"server_version_num": version, "tables": ["public.orders"]},
        "publication": "unchanged",
        "create_slot": {"slot_name": slot, "created": False, "consistent_point": None},
    }
    assert _slots(database) == [(slot, "pgoutput", database.name)]

    # with a second table and the drop task: the publication grows, the slot goes
    database.execute("CREATE TABLE items (id int PRIMARY KEY)")
    teardown = _setup_dag("pgsync_teardown", source_conn_id, drop=True, tables=["items"], failures=failures)
    third = run_dag(teardown, run_conf=conf)
    assert (third.state, failures) == ("success", [])
    assert _states(third) == dict.fromkeys(
        ["preflight", "publication", "create_slot", "drop_slot"], "success"
    )
    results = _results(third)
    assert (results["publication"], results["create_slot"]["created"], results["drop_slot"]) == (
        "altered",
        False,
        True,
    )
    assert _slots(database) == []
    assert _publication(database) == [("pgsync_pub", "public", "items"), ("pgsync_pub", "public", "orders")]

    fourth = run_dag(teardown, run_conf=conf)
    assert (fourth.state, failures) == ("success", [])
    results = _results(fourth)
    assert (results["publication"], results["create_slot"]["created"], results["drop_slot"]) == (
        "unchanged",
        True,
        True,
    )
    assert _slots(database) == []


@pytest.mark.usefixtures("orders")
def test_failed_preflight_stops_the_dag_with_the_fix(
    database: Database, source_conn_id: str, slot: str, run_dag: RunDag
) -> None:
    failures: list[Any] = []
    dag = _setup_dag("pgsync_setup_broken", source_conn_id, drop=False, tables=["missing"], failures=failures)

    run = run_dag(dag, run_conf={"slot": slot})

    assert run.state == "failed"
    assert _states(run) == {
        "preflight": "failed",
        "publication": "upstream_failed",
        "create_slot": "upstream_failed",
    }
    [(task_id, error)] = failures
    assert task_id == "preflight"
    assert isinstance(error, PreflightError)
    assert [p.subject for p in error.problems] == ["table public.missing"]
    assert str(error).startswith("preflight found 1 problem(s):\n  - table public.missing: does not exist\n")
    assert _slots(database) == []
    assert _publication(database) == []
