"""The PostgreSQL destination, driven by the destination test kit against a real server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_provider_pgsync.apply.destination import SchemaAnswer
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.errors import DestinationError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.testing.destination_kit import Change, change_batch, column, run_lifecycle
from tests.conftest import Database
from tests.support.postgres_replica import (
    BIG,
    INT4,
    INT8,
    JSONB,
    ORDER_COLUMNS,
    ORDERS,
    TEXT,
    TIMESTAMPTZ,
    order,
    reader,
)


@pytest.fixture
def destination(database: Database) -> Iterator[PostgresDestination]:
    dest = PostgresDestination(database.conninfo, name="replica")
    yield dest
    dest.close()


KEYED_CHANGES = [
    Change("I", order(1)),
    Change("I", order(2)),
    Change("I", order(3, doc=None)),
    # unchanged TOAST: the destination keeps doc (carry-forward, rule 6)
    Change("U", order(1, note="changed"), unchanged=("doc",)),
    # key change keeping the TOASTed value: read from the old row
    Change("U", order(20, note="moved"), old_key={"id": "2"}, unchanged=("doc",)),
    Change("I", order(2, note="reused key", doc="small")),
    Change("D", {"id": "3"}),
    Change("I", order(4)),
    # inserted and updated in one batch, then moved twice
    Change("U", order(4, note="again", amount="2.00"), unchanged=("doc",)),
    Change("U", order(40, note="moved"), old_key={"id": "4"}, unchanged=("doc",)),
    Change("U", order(41, note="moved twice"), old_key={"id": "40"}, unchanged=("doc",)),
    Change("D", {"id": "1"}),
    Change("I", order(1, note="back")),
]


@pytest.mark.parametrize("batch_size", [1, 3, 100])
def test_keyed_changes_reach_the_replica(
    database: Database, destination: PostgresDestination, batch_size: int
) -> None:
    rows = run_lifecycle(
        destination, ORDERS, ORDER_COLUMNS, KEYED_CHANGES, read_rows=reader(database), batch_size=batch_size
    )
    by_id = {r["id"]: r for r in rows}
    assert sorted(by_id, key=int) == ["1", "2", "20", "41"]
    assert by_id["20"]["doc"] == BIG and by_id["41"]["doc"] == BIG and by_id["41"]["note"] == "moved twice"


def test_truncate_removes_the_rows_before_it(database: Database, destination: PostgresDestination) -> None:
    changes = [
        Change("I", order(1)),
        Change("I", order(2)),
        Change("T"),
        Change("I", order(2, note="after")),
        Change("U", order(2, note="after, updated"), unchanged=("doc",)),
    ]
    rows = run_lifecycle(
        destination, ORDERS, ORDER_COLUMNS, changes, read_rows=reader(database), batch_size=10
    )
    assert [(r["id"], r["note"], r["doc"]) for r in rows] == [("2", "after, updated", BIG)]


def test_rows_without_key_apply_change_by_change(
    database: Database, destination: PostgresDestination
) -> None:
    """REPLICA IDENTITY FULL without a primary key: duplicates stay duplicates."""
    cols = [column("a", INT4, key=True), column("b", TEXT, key=True), column("j", JSONB, key=True)]
    same = {"a": "1", "b": "dup", "j": '{"k": 1}'}
    changes = [
        Change("I", same),
        Change("I", same),
        Change("I", {"a": "2", "b": None, "j": None}),
        Change("U", {"a": "1", "b": "changed", "j": '{"k": 1}'}, old_key=same),
        Change("D", {"a": "2", "b": None, "j": None}),
    ]
    rows = run_lifecycle(
        destination, TableRef("public", "events"), cols, changes, read_rows=reader(database), batch_size=2
    )
    assert sorted(r["b"] for r in rows) == ["changed", "dup"]


def test_added_and_dropped_columns_continue(database: Database, destination: PostgresDestination) -> None:
    added = [*ORDER_COLUMNS[:3], column("at", TIMESTAMPTZ), column("extra", INT4)]
    run_lifecycle(
        destination,
        ORDERS,
        ORDER_COLUMNS,
        [Change("I", order(1))],
        read_rows=reader(database),
        new_columns=added,
        changes_after=[Change("I", {**order(2), "extra": "7"}), Change("U", {**order(1), "extra": "8"})],
    )
    columns = database.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'public.orders'::regclass AND attnum > 0"
        " AND NOT attisdropped ORDER BY attnum"
    )
    assert [c[0] for c in columns] == ["id", "note", "amount", "at", "extra"]


def test_changed_type_or_key_asks_for_a_rebaseline(destination: PostgresDestination) -> None:
    destination.open_table(ORDERS, ORDER_COLUMNS, 0)
    retyped = [column("id", INT8, key=True), column("note", INT4), *ORDER_COLUMNS[2:]]
    rekeyed = [column("id", INT8), column("note", TEXT, key=True), *ORDER_COLUMNS[2:]]
    assert destination.schema_changed(ORDERS, ORDER_COLUMNS, retyped) is SchemaAnswer.REBASELINE
    assert destination.schema_changed(ORDERS, ORDER_COLUMNS, rekeyed) is SchemaAnswer.REBASELINE


def test_a_failing_batch_applies_nothing(database: Database, destination: PostgresDestination) -> None:
    """A batch and its watermark commit together: a bad value leaves neither (exactly once)."""
    destination.open_table(ORDERS, ORDER_COLUMNS, 0)
    destination.apply(
        ORDERS, ORDER_COLUMNS, change_batch(ORDER_COLUMNS, [Change("I", order(1))], first_lsn=16), (16, 1)
    )
    bad = change_batch(
        ORDER_COLUMNS, [Change("I", order(2)), Change("I", order(3, amount="not a number"))], first_lsn=32
    )

    with pytest.raises(DestinationError, match=r"orders.*commit LSN 48.*invalid input syntax"):
        destination.apply(ORDERS, ORDER_COLUMNS, bad, (48, 1))

    assert destination.watermark(ORDERS) == (16, 1)
    assert [r["id"] for r in reader(database)(ORDERS)] == ["1"]


@pytest.mark.parametrize("op", ["U", "D"])
def test_a_plain_change_of_a_row_the_replica_lacks_is_an_error(
    destination: PostgresDestination, op: str
) -> None:
    destination.open_table(ORDERS, ORDER_COLUMNS, 0)
    lost = change_batch(ORDER_COLUMNS, [Change(op, order(9))], first_lsn=16)
    with pytest.raises(DestinationError, match=r"lacks 1 of 1 rows.*lost rows; rebaseline"):
        destination.apply(ORDERS, ORDER_COLUMNS, lost, (16, 1))
    assert destination.watermark(ORDERS) is None


def test_an_insert_of_a_row_the_replica_holds_is_an_error(
    database: Database, destination: PostgresDestination
) -> None:
    destination.open_table(ORDERS, ORDER_COLUMNS, 0)
    first = change_batch(ORDER_COLUMNS, [Change("I", order(1))], first_lsn=16)
    destination.apply(ORDERS, ORDER_COLUMNS, first, (16, 1))
    again = change_batch(
        ORDER_COLUMNS, [Change("I", order(2)), Change("I", order(1, note="x"))], first_lsn=32
    )
    with pytest.raises(DestinationError, match=r"orders already has a row.*\(id\)=\(1\).*rebaseline"):
        destination.apply(ORDERS, ORDER_COLUMNS, again, (32, 2))
    assert destination.watermark(ORDERS) == (16, 1)
    assert [(r["id"], r["note"]) for r in reader(database)(ORDERS)] == [("1", "n")]


def test_an_update_of_a_row_the_replica_lacks_is_an_error(destination: PostgresDestination) -> None:
    destination.open_table(ORDERS, ORDER_COLUMNS, 0)
    lost = change_batch(ORDER_COLUMNS, [Change("U", order(9), unchanged=("doc",))], first_lsn=16)
    with pytest.raises(DestinationError, match=r"lacks 1 of 1 rows.*rebaseline"):
        destination.apply(ORDERS, ORDER_COLUMNS, lost, (16, 1))
    assert destination.watermark(ORDERS) is None
