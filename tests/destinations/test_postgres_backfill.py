"""The PostgreSQL destination's backfill, driven by the destination test kit against a real server:
staged rows written, absent keys deleted, touched keys left to the stream, with the watermark."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_provider_pgsync.apply.backfill import TouchedKeys
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.errors import DestinationError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.testing.destination_kit import Change, column, run_backfill_lifecycle
from tests.conftest import Database
from tests.support.postgres_replica import JSONB, ORDER_COLUMNS, ORDERS, TEXT, order, reader


def test_a_backfill_writes_staged_rows_and_deletes_absent_keys(database: Database) -> None:
    final = run_backfill_lifecycle(
        PostgresDestination(database.conninfo, name="replica"),
        ORDERS,
        ORDER_COLUMNS,
        [Change("I", order(i, note="streamed")) for i in range(1, 7)],
        read_rows=reader(database),
        # 1 differs, 7 is missing; 2 and 3 are not in the source; 4 and 5 were touched since
        staged=[order(1, note="source"), order(7, note="source"), order(4, note="older")],
        absent=[{"id": "2"}, {"id": "3"}, {"id": "5"}, {"id": "99"}],
        touched=[{"id": "4"}, {"id": "5"}],
    )
    assert [(r["id"], r["note"]) for r in final] == [
        ("1", "source"),
        ("4", "streamed"),
        ("5", "streamed"),
        ("6", "streamed"),
        ("7", "source"),
    ]
    with database.connect() as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'pgsync' AND tablename LIKE %s", ("backfill%",)
        )
        assert left.fetchone() == (0,), "discard_backfill left a staging table"


def test_a_backfill_whose_staged_rows_are_gone_fails_naming_the_remedy(database: Database) -> None:
    destination = PostgresDestination(database.conninfo, name="replica")
    try:
        destination.open_table(ORDERS, ORDER_COLUMNS, 0)
        keys = pa.table({"id": pa.array([], pa.string())})
        with pytest.raises(
            DestinationError,
            match=r"staged rows of a backfill of public.orders .* are gone; run the backfill again",
        ):
            destination.backfill(ORDERS, ORDER_COLUMNS, "pgsync.backfill_lost", TouchedKeys(keys), (1, 1))
        with pytest.raises(
            DestinationError, match=r"'public.orders' is not a backfill staging table of its control schema"
        ):
            destination.backfill(ORDERS, ORDER_COLUMNS, "public.orders", TouchedKeys(keys), (1, 1))
        assert destination.watermark(ORDERS) is None
    finally:
        destination.close()


def test_a_backfill_of_rows_sets_how_many_times_a_keyless_table_holds_them(database: Database) -> None:
    columns = [column("kind", TEXT, key=True), column("payload", JSONB, key=True)]
    row = lambda kind, payload=None: {"kind": kind, "payload": payload}  # noqa: E731
    final = run_backfill_lifecycle(
        PostgresDestination(database.conninfo, name="replica"),
        TableRef("public", "events"),
        columns,
        [Change("I", row("a", '{"n": 1}')), Change("I", row("a", '{"n": 1}'))]
        + [Change("I", row(kind)) for kind in ("b", "c", "d", "d")],
        read_rows=reader(database),
        # a: once in the source; e: twice, missing here; b: not in the source; d: touched since
        staged=[row("a", '{"n": 1}'), row("e"), row("e"), row("d")],
        absent=[row("b"), row("zz")],
        touched=[row("d")],
    )
    assert [(r["kind"], r["payload"]) for r in final] == [
        ("a", '{"n": 1}'),
        ("c", None),
        ("d", None),
        ("d", None),
        ("e", None),
        ("e", None),
    ]


def test_a_new_backfill_drops_the_stale_staging_table_of_its_table(database: Database) -> None:
    destination = PostgresDestination(database.conninfo, name="replica")
    try:
        destination.open_table(ORDERS, ORDER_COLUMNS, 0)
        rows = pa.table({c.name: pa.array([], pa.string()) for c in ORDER_COLUMNS})
        keys = pa.table({"id": pa.array(["1"])})
        first = destination.stage_backfill(ORDERS, ORDER_COLUMNS, "b-old", rows, keys)
        second = destination.stage_backfill(ORDERS, ORDER_COLUMNS, "b-new", rows, keys)
        found = database.execute("SELECT to_regclass(%s) IS NULL, to_regclass(%s) IS NULL", (first, second))
        assert found == [(True, False)]
    finally:
        destination.close()
