"""The PostgreSQL destination proves what it holds before apply writes (DESIGN §2 rule 11), on a
real server: a table dropped, replaced, truncated or written by someone else after its baseline
is refused with DestinationDivergedError, never created again empty; pgsync's own writes and a
new baseline pass."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.errors import DestinationDivergedError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.testing.destination_kit import Change, change_batch, column
from tests.conftest import Database

T = TableRef("public", "items")
COLUMNS = [column("id", 23, key=True), column("name", 25)]


@pytest.fixture
def destination(database: Database) -> Iterator[PostgresDestination]:
    dest = PostgresDestination(database.conninfo, name="replica")
    yield dest
    dest.close()


def _baseline(destination: PostgresDestination, lineage: str) -> None:
    """A baseline of an empty table, swapped in as the baseline job's finish does."""
    staging = destination.prepare_baseline(T, COLUMNS, lineage)
    destination.finish_baseline(T, staging, lineage, COLUMNS)


def _apply(destination: PostgresDestination, lsn: int, *ids: int) -> None:
    changes = [Change("I", {"id": str(i), "name": f"n{i}"}) for i in ids]
    destination.apply(T, COLUMNS, change_batch(COLUMNS, changes, first_lsn=lsn), (lsn + 16 * len(ids), 1))


def test_pgsyncs_own_writes_pass(database: Database, destination: PostgresDestination) -> None:
    _baseline(destination, "L1")
    destination.verify(T, "L1")
    destination.open_table(T, COLUMNS, 0)
    _apply(destination, 100, 1, 2, 3)
    truncate = change_batch(COLUMNS, [Change("T")], first_lsn=200)
    destination.apply(T, COLUMNS, truncate, (200, 1))  # a TRUNCATE of the source, applied
    destination.verify(T, "L1")
    # its trigger fires once per statement, for other sessions only
    assert database.execute("SELECT count(*) FROM pgsync.foreign_writes") == [(0,)]


@pytest.mark.parametrize(
    ("by_hand", "found"),
    [
        ("DROP TABLE items", "is gone"),
        (
            "DROP TABLE items; CREATE TABLE public.items (id int PRIMARY KEY, name text)",
            "not the table its baseline made",
        ),
        ("TRUNCATE items", "written outside pgsync: 1 statement(s)"),
        ("DELETE FROM items WHERE id = 1", "the first: DELETE by role"),
        ("UPDATE items SET name = 'x'", "the first: UPDATE by role"),
        ("INSERT INTO items VALUES (9, 'x')", "the first: INSERT by role"),
        ("ALTER TABLE items DISABLE TRIGGER pgsync_guard", "lost its trigger pgsync_guard (disabled"),
        ("DROP TRIGGER pgsync_guard ON items", "lost its trigger pgsync_guard (dropped"),
        ("DELETE FROM pgsync.watermarks", "has no watermark row"),
        ("DROP SCHEMA pgsync CASCADE", "has no watermark row"),
    ],
)
def test_a_table_touched_outside_pgsync_is_refused(
    database: Database, destination: PostgresDestination, by_hand: str, found: str
) -> None:
    _baseline(destination, "L1")
    _apply(destination, 100, 1, 2)
    for statement in by_hand.split("; "):
        database.execute(statement)
    again = PostgresDestination(database.conninfo, name="replica")  # the next apply run's session
    try:
        with pytest.raises(DestinationDivergedError, match=re.escape(found)) as raised:
            again.verify(T, "L1")
        assert "destination replica: table public.items" in str(raised.value)
        # and it is not created again empty, whatever apply asks next
        if "DROP" in by_hand and "TABLE" in by_hand and "CREATE" not in by_hand:
            with pytest.raises(DestinationDivergedError, match="is gone"):
                again.open_table(T, COLUMNS, 0)
            assert database.execute("SELECT to_regclass('public.items')") == [(None,)]
        # the remedy: a rebaseline makes a new table, forgets what was done to the old one
        _baseline(again, "L2")
        again.verify(T, "L2")
        with pytest.raises(DestinationDivergedError, match="holds baseline L2, not L1"):
            again.verify(T, "L1")
    finally:
        again.close()


def test_a_table_of_an_earlier_version_is_adopted_once(
    database: Database, destination: PostgresDestination
) -> None:
    _baseline(destination, "L1")
    database.execute("DROP TRIGGER pgsync_guard ON items")
    database.execute("UPDATE pgsync.watermarks SET relid = NULL")  # as an earlier version left it
    destination.verify(T, "L1")
    assert database.execute("SELECT relid = 'public.items'::regclass FROM pgsync.watermarks") == [(True,)]
    database.execute("DELETE FROM items")
    with pytest.raises(DestinationDivergedError, match="DELETE by role"):
        destination.verify(T, "L1")


def test_a_table_never_baselined_is_created_with_its_guard(
    database: Database, destination: PostgresDestination
) -> None:
    destination.open_table(T, COLUMNS, 0)
    _apply(destination, 100, 1)
    database.execute("DROP TABLE items")
    with pytest.raises(DestinationDivergedError, match="is gone"):
        destination.open_table(T, COLUMNS, 0)
