"""Tables without a key (REPLICA IDENTITY FULL) in the PostgreSQL destination: batches as
multiset operations give the rows that applying the changes one by one gives (the kit's model)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pyarrow as pa
import pytest
from psycopg import sql

from airflow_provider_pgsync.apply.multiset import MultisetRun
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.destinations.postgres_keyless import _TEXT_EQUALITY, cancelled
from airflow_provider_pgsync.errors import DestinationError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.testing.destination_kit import Change, change_batch, column, run_lifecycle
from tests.conftest import Database
from tests.support.postgres_replica import reader
from tests.support.random_changes import Row, delete, insert, random_changes, row, update

INT4, TEXT, NUMERIC, FLOAT8, JSON, JSONB, POINT, TIMESTAMPTZ = 23, 25, 1700, 701, 114, 3802, 600, 1184
EVENTS = TableRef("public", "events")

# every column a key column: what pgoutput says of REPLICA IDENTITY FULL
COLUMNS = [
    column("a", INT4, key=True),
    column("b", TEXT, key=True),
    column("n", NUMERIC, key=True),
    column("j", JSON, key=True),
]


@pytest.fixture
def destination(database: Database) -> Iterator[PostgresDestination]:
    dest = PostgresDestination(database.conninfo, name="replica")
    yield dest
    dest.close()


def lifecycle(
    database: Database, destination: PostgresDestination, changes: list[Change], batch_size: int
) -> list[Row]:
    """The changes applied in batches and compared with the model (AssertionError if they differ)."""
    return run_lifecycle(
        destination, EVENTS, COLUMNS, changes, read_rows=reader(database), batch_size=batch_size
    )


BATCHES = pytest.mark.parametrize("batch_size", [1, 3, 1000])


@BATCHES
def test_one_of_two_identical_rows_is_deleted_or_updated(
    database: Database, destination: PostgresDestination, batch_size: int
) -> None:
    same, other = row("1"), row("2")
    changes = [
        insert(same),
        insert(same),
        insert(other),
        insert(other),
        delete(same),
        update(other, row("3")),
    ]
    rows = lifecycle(database, destination, changes, batch_size)
    assert sorted(r["a"] for r in rows) == ["1", "2", "3"]  # type: ignore[type-var]
    # no row is ever updated in place: the table is packed, whatever the destination's fillfactor
    assert database.execute("SELECT reloptions FROM pg_class WHERE oid = 'events'::regclass") == [
        (["fillfactor=100"],)
    ]


@BATCHES
def test_nulls_and_empty_strings_are_told_apart(
    database: Database, destination: PostgresDestination, batch_size: int
) -> None:
    # a row of NULLs only: an UPDATE's old row is all NULLs, and still one row to remove
    nulls, empty = row(None, None, None, None), row(None, "", None, None)
    changes = [
        insert(nulls),
        insert(empty),
        insert(nulls),
        insert(nulls),
        insert(empty),
        delete(nulls),
        update(empty, row(None, "y", None, None)),
        update(nulls, row(None, "z", None, None)),
    ]
    rows = lifecycle(database, destination, changes, batch_size)
    assert sorted((r["b"] if r["b"] is not None else "-") for r in rows) == ["", "-", "y", "z"]


@BATCHES
def test_values_equal_as_numbers_but_not_as_text_stay_apart(
    database: Database, destination: PostgresDestination, batch_size: int
) -> None:
    """numeric 1.0 = 1.00 and json has no equality: rows compare by their text, as change by change."""
    changes = [
        insert(row("1", n="1.0", j='{"k": 1}')),
        insert(row("1", n="1.00", j='{"k": 1}')),
        insert(row("1", n="1.0", j='{"k":1}')),
        delete(row("1", n="1.00", j='{"k": 1}')),
        update(row("1", n="1.0", j='{"k":1}'), row("1", n="2", j="[]")),
    ]
    rows = lifecycle(database, destination, changes, batch_size)
    assert sorted((r["n"], r["j"]) for r in rows) == [("1.0", '{"k": 1}'), ("2", "[]")]  # type: ignore[type-var]


@BATCHES
def test_a_row_inserted_and_deleted_or_deleted_and_inserted_in_one_batch(
    database: Database, destination: PostgresDestination, batch_size: int
) -> None:
    first, second = row("1"), row("2")
    changes = [
        insert(first),
        delete(first),  # gone again in the same batch
        insert(second),
        delete(second),
        insert(second),  # back again
        insert(first),
        update(first, row("4")),
        update(row("4"), first),  # and back
        update(first, row("5"), unchanged=("j",)),  # j from the old row (unchanged TOAST)
    ]
    rows = lifecycle(database, destination, changes, batch_size)
    assert sorted((r["a"], r["j"]) for r in rows) == [("2", '{"k": 1}'), ("5", '{"k": 1}')]  # type: ignore[type-var]


@BATCHES
def test_truncate_cuts_a_batch_into_runs(
    database: Database, destination: PostgresDestination, batch_size: int
) -> None:
    changes = [
        insert(row("1")),
        insert(row("1")),
        Change("T"),
        insert(row("1")),
        insert(row("2")),
        delete(row("1")),
        Change("T"),
        insert(row("3")),
        update(row("3"), row("4")),
    ]
    rows = lifecycle(database, destination, changes, batch_size)
    assert [r["a"] for r in rows] == ["4"]


@pytest.mark.parametrize("seed", [1, 7, 2026])
def test_random_changes_reach_the_model(
    database: Database, destination: PostgresDestination, seed: int
) -> None:
    changes = random_changes(seed, 300)
    lifecycle(database, destination, changes, batch_size=random.Random(seed).choice([17, 60, 300]))


def test_a_table_with_no_column_to_hash_compares_whole_rows(
    database: Database, destination: PostgresDestination
) -> None:
    """json and point have no hash opclass: candidates come from a hash of the row's text."""
    cols = [column("j", JSON, key=True), column("p", POINT, key=True), column("f", FLOAT8, key=True)]
    values: list[Row] = [
        {"j": "[1]", "p": "(1,2)", "f": None},
        {"j": "[1]", "p": "(1,2)", "f": "0"},
        {"j": "[1]", "p": "(1,2)", "f": "-0"},
        {"j": None, "p": None, "f": "NaN"},
    ]
    changes = [Change("I", v) for v in values * 2] + [
        Change("D", values[0]),
        Change("D", values[2]),
        Change("U", values[1], old_key=values[3]),
    ]
    rows = run_lifecycle(
        destination, EVENTS, cols, changes, read_rows=reader(database), batch_size=len(changes)
    )
    assert len(rows) == 6


def test_a_row_the_replica_lacks_is_an_error_and_nothing_is_applied(
    database: Database, destination: PostgresDestination
) -> None:
    destination.open_table(EVENTS, COLUMNS, 0)
    destination.apply(EVENTS, COLUMNS, change_batch(COLUMNS, [insert(row("1"))], first_lsn=16), (16, 1))
    lost = change_batch(COLUMNS, [insert(row("2")), delete(row("1")), delete(row("1"))], first_lsn=32)
    with pytest.raises(DestinationError, match=r"events lacks 1 of 2 rows.*lost rows; rebaseline"):
        destination.apply(EVENTS, COLUMNS, lost, (64, 1))
    assert destination.watermark(EVENTS) == (16, 1)
    assert [r["a"] for r in reader(database)(EVENTS)] == ["1"]


def test_a_failed_batch_applied_again_takes_effect_once(
    database: Database, destination: PostgresDestination
) -> None:
    """The batch and its watermark commit together: after a failure the same batch applies
    once; a batch at or below the watermark is what apply skips (``apply_table``)."""
    destination.open_table(EVENTS, COLUMNS, 0)
    first = [insert(row("1")), insert(row("1"))]
    destination.apply(EVENTS, COLUMNS, change_batch(COLUMNS, first, first_lsn=16), (32, 1))
    second = [insert(row("2")), delete(row("1")), update(row("1"), row("3"))]
    bad = [*second, insert(row("not a number"))]
    with pytest.raises(DestinationError, match=r"events.*invalid input syntax"):
        destination.apply(EVENTS, COLUMNS, change_batch(COLUMNS, bad, first_lsn=48), (96, 1))
    assert sorted(r["a"] for r in reader(database)(EVENTS)) == ["1", "1"]  # type: ignore[type-var]
    destination.apply(EVENTS, COLUMNS, change_batch(COLUMNS, second, first_lsn=48), (80, 1))
    assert destination.watermark(EVENTS) == (80, 1)
    assert sorted(r["a"] for r in reader(database)(EVENTS)) == ["2", "3"]  # type: ignore[type-var]


def test_rows_added_and_removed_in_one_run_cancel_as_many_times_as_both_hold() -> None:
    """``cancelled``: the common rows go from both sides, with their multiplicity; a NULL is
    not '' and '1.0' is not '1.00' (rows are the same when their texts are)."""
    inserts = pa.table(
        {
            "a": ["1", "1", "1", "2", None, "3", "4"],
            "b": ["x", "x", "x", None, "y", "", "1.0"],
        }
    )
    deletes = pa.table(
        {"a": ["1", "1", "2", None, "3", "4", "9"], "b": ["x", "x", "", "y", None, "1.00", "x"]}
    )

    run = cancelled(MultisetRun(inserts=inserts, deletes=deletes))

    def as_rows(t: pa.Table) -> list[tuple[str | None, ...]]:
        return sorted(tuple(r.values()) for r in t.to_pylist())  # type: ignore[misc]

    kept_inserts = pa.table({"a": ["1", "2", "3", "4"], "b": ["x", None, "", "1.0"]})
    kept_deletes = pa.table({"a": ["2", "3", "4", "9"], "b": ["", None, "1.00", "x"]})
    assert as_rows(run.inserts) == as_rows(kept_inserts)
    assert as_rows(run.deletes) == as_rows(kept_deletes)


def test_a_row_whose_text_changed_between_its_insert_and_delete_is_still_removed(
    database: Database, destination: PostgresDestination
) -> None:
    """The same instant sent as two texts (the source's TimeZone changed between two captures)
    does not cancel on the client; removing the old rows first finds no such row, and the run
    is applied again, new rows first, from a savepoint: nothing is left and nothing is lost."""
    cols = [column("a", INT4, key=True), column("at", TIMESTAMPTZ, key=True)]
    destination.open_table(EVENTS, cols, 0)
    first = [Change("I", {"a": "1", "at": "2024-01-01 00:00:00+00"})]
    destination.apply(EVENTS, cols, change_batch(cols, first, first_lsn=16), (16, 1))
    changes = [
        Change("I", {"a": "2", "at": "2024-01-01 01:00:00+01"}),
        Change("D", {"a": "2", "at": "2024-01-01 00:00:00+00"}),  # the same row
        Change("D", {"a": "1", "at": "2024-01-01 00:00:00+00"}),
    ]
    destination.apply(EVENTS, cols, change_batch(cols, changes, first_lsn=32), (48, 1))
    assert reader(database)(EVENTS) == []
    assert destination.watermark(EVENTS) == (48, 1)


def test_rows_equal_under_a_nondeterministic_collation_but_not_as_text_stay_apart(
    database: Database, destination: PostgresDestination
) -> None:
    """A replica's column under a case-insensitive collation: 'A' = 'a' there, yet the source
    removed only the row 'a' (in a later batch). Rows compare byte for byte, so both 'A' rows
    stay (the old row's candidates come from the column ``a``: all three rows are)."""
    with database.connect() as conn:
        conn.execute(
            "CREATE COLLATION pgsync_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)"
        )
        conn.execute("CREATE TABLE public.events (a integer, b text COLLATE pgsync_ci)")
        conn.commit()
    cols = [column("a", INT4, key=True), column("b", TEXT, key=True)]
    changes = [insert({"a": "1", "b": b}) for b in ("A", "A", "a")] + [delete({"a": "1", "b": "a"})]
    rows = run_lifecycle(destination, EVENTS, cols, changes, read_rows=reader(database), batch_size=3)
    assert rows == [{"a": "1", "b": "A"}, {"a": "1", "b": "A"}]


def test_types_compared_by_their_own_equality_are_equal_only_when_their_texts_are(
    database: Database,
) -> None:
    """``_TEXT_EQUALITY``: a type listed there whose values can be equal with two texts would
    let a DELETE remove the wrong one of two rows. Values close to each other, in several
    spellings, are equal as the type exactly when they print the same; every listed type is
    sampled (as float8 would fail: 0 = -0)."""
    samples = {
        "bool": ["t", "true", "yes", "f", "0"],
        "bytea": ["\\x00", "\\x0000", "\\x", "a"],
        '"char"': ["a", "b", ""],
        "name": ["a", "A", "a "],
        "bigint": ["1", "01", "-0", "0", "+1"],
        "smallint": ["1", "01", "-0", "0"],
        "integer": ["1", "01", "-0", "0"],
        "text": ["a", "a ", "A", ""],
        "oid": ["1", "01", "4294967295", "-1"],
        "varchar": ["a", "a ", "A"],
        "date": ["2024-01-01", "2024-1-1", "infinity", "20240101"],
        "time": ["01:00", "01:00:00", "01:00:00.000001", "24:00", "00:00"],
        "timestamp": [
            "2024-01-01 00:00",
            "2024-01-01 00:00:00.000000",
            "infinity",
            "2024-01-01 00:00:00.000001",
        ],
        "timestamptz": ["2024-01-01 00:00+00", "2024-01-01 01:00+01", "2024-01-01 00:00:00.1+00"],
        "uuid": ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "A0EEBC999C0B4EF8BB6D6BB9BD380A11"],
    }
    with database.connect() as conn:
        sampled = set()
        for name, values in samples.items():
            kind = sql.SQL(name)  # the names above
            sampled.add(
                conn.execute(sql.SQL("SELECT {}::regtype::oid::int").format(sql.Literal(name))).fetchone()
            )
            for a in values:
                for b in values:
                    row = conn.execute(
                        sql.SQL("SELECT %s::{0} = %s::{0}, %s::{0}::text = %s::{0}::text").format(kind),
                        (a, b, a, b),
                    ).fetchone()
                    assert row is not None and row[0] == row[1], (name, a, b, row)
    assert {r[0] for r in sampled if r is not None} == set(_TEXT_EQUALITY)
