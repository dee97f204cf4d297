"""Each kind of DDL, with a writer running, captured through the DDL trigger and applied: the
replica follows exactly (rename, default of older rows, drop, widening, drop and add again)
or goes back to baseline; the lake continues only for NULL-filled additions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.apply.destination import SchemaAnswer
from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_changes import LakeChanges
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.columns import REWRITE_COLUMN, REWRITE_DEFAULT
from airflow_provider_pgsync.state.model import ColumnInfo, SchemaChange
from airflow_provider_pgsync.state.phases import DataSync, Init, Ready, SyncDone
from airflow_provider_pgsync.state.schema_diff import diff_columns
from airflow_provider_pgsync.state.store import update_state
from tests.capture.conftest import MakePipeline, Pipeline
from tests.conftest import Database
from tests.support.replica import apply_all, copy_base, empty_capture_baseline, rows
from tests.support.writer import Writes, concurrent_writer

ITEMS = "public.items"


@contextmanager
def writer(database: Database) -> Iterator[Writes]:
    """Updates and inserts into items (columns id and a only) until the block ends, from its
    fifth transaction on."""
    [(last,)] = database.execute("SELECT greatest(max(id), 1000) FROM items")

    def transaction(conn: Any, n: int) -> None:
        conn.execute("UPDATE items SET a = a + 1 WHERE id = %s", (n % 20 + 1,))
        conn.execute("INSERT INTO items (id, a) VALUES (%s, %s)", (n, n))

    with concurrent_writer(database, transaction, first=int(str(last)), interval=0, at_least=5) as writes:
        writes.wait_for(5, "before the DDL")
        yield writes


def _step(pipeline: Pipeline, database: Database, replica: Database, ddl: list[str]) -> dict[str, object]:
    """Run ``ddl`` while the writer runs, then stop it, capture everything and apply once."""
    with writer(database) as writes:
        for statement in ddl:
            database.execute(statement)
        # counted after the last DDL: some of its transactions follow that DDL
        writes.wait_for(writes.done + 3, "under the new columns")
    pipeline.capture_until_idle()
    return apply_all(pipeline, replica)


@pytest.fixture
def items(make_pipeline: MakePipeline, database: Database, replica: Database) -> Pipeline:
    pipeline = make_pipeline(["CREATE TABLE items (id int PRIMARY KEY, a int, b text)"], [ITEMS])
    empty_capture_baseline(pipeline, database, ITEMS)
    database.execute("INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 50) g")
    pipeline.capture_until_idle()
    assert apply_all(pipeline, replica) == {ITEMS: Ready()}
    return pipeline


def test_replica_follows_each_ddl_exactly_between_transactions(
    items: Pipeline, database: Database, replica: Database
) -> None:
    # a constant default: older rows hold it in the source (no WAL), and in the replica
    assert _step(items, database, replica, ["ALTER TABLE items ADD COLUMN c text DEFAULT 'x'"]) == {
        ITEMS: Ready()
    }
    assert rows(replica, ITEMS) == rows(database, ITEMS)
    assert replica.execute("SELECT count(*) FROM items WHERE c = 'x'") == database.execute(
        "SELECT count(*) FROM items WHERE c = 'x'"
    )
    # a rename keeps the values
    assert _step(items, database, replica, ["ALTER TABLE items RENAME COLUMN b TO b_renamed"]) == {
        ITEMS: Ready()
    }
    assert rows(replica, ITEMS) == rows(database, ITEMS)
    assert replica.execute("SELECT count(*) FROM items WHERE b_renamed IS NOT NULL")[0][0] == 50
    # a widening type change in place
    assert _step(items, database, replica, ["ALTER TABLE items ALTER COLUMN a TYPE bigint"]) == {
        ITEMS: Ready()
    }
    assert rows(replica, ITEMS) == rows(database, ITEMS)
    assert replica.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
        "'items'::regclass AND attname = 'a'"
    ) == [("bigint",)]
    # a drop, and a column dropped and added again under its name (the same Relation message)
    assert _step(items, database, replica, ["ALTER TABLE items DROP COLUMN b_renamed"]) == {ITEMS: Ready()}
    assert rows(replica, ITEMS) == rows(database, ITEMS)
    again = ["ALTER TABLE items DROP COLUMN c", "ALTER TABLE items ADD COLUMN c text"]
    assert _step(items, database, replica, again) == {ITEMS: Ready()}
    assert rows(replica, ITEMS) == rows(database, ITEMS)
    assert replica.execute("SELECT count(*) FROM items WHERE c IS NOT NULL") == [(0,)]
    # rows computed without WAL: back to baseline, never a silent difference
    volatile = ["ALTER TABLE items ADD COLUMN d timestamptz DEFAULT clock_timestamp()"]
    assert _step(items, database, replica, volatile) == {ITEMS: Init()}


def test_replica_goes_back_to_baseline_for_a_type_change_with_using(
    items: Pipeline, database: Database, replica: Database
) -> None:
    ddl = ["ALTER TABLE items ALTER COLUMN a TYPE int USING a * 2"]  # the same type, new values
    assert _step(items, database, replica, ddl) == {ITEMS: Init()}


def test_replica_follows_ddl_inside_one_transaction(
    items: Pipeline, database: Database, replica: Database
) -> None:
    with database.connect() as conn, conn.transaction():
        conn.execute("INSERT INTO items (id, a, b) VALUES (100, 1, 'before')")
        conn.execute("ALTER TABLE items ADD COLUMN e text DEFAULT 'y'")
        conn.execute("INSERT INTO items (id, a, b, e) VALUES (101, 2, 'after', 'z')")
        conn.execute("ALTER TABLE items RENAME COLUMN b TO b2")
        conn.execute("UPDATE items SET b2 = 'changed' WHERE id = 1")
    items.capture_until_idle()
    assert apply_all(items, replica) == {ITEMS: Ready()}
    assert rows(replica, ITEMS) == rows(database, ITEMS)


def test_lake_continues_only_for_null_filled_additions(tmp_path: Path) -> None:
    lake = LakeChanges(LakeDestination(warehouse=str(tmp_path / "lake")))
    table = TableRef("public", "items")
    key = ColumnInfo("id", 23, -1, True, attnum=1)
    b = ColumnInfo("b", 25, -1, False, attnum=2)
    old = (key, b)

    def answer(new: tuple[ColumnInfo, ...], change: SchemaChange | None = None) -> SchemaAnswer:
        return lake.change_schema(table, diff_columns(old, new, change or SchemaChange()))

    assert answer((key, b, ColumnInfo("c", 25, -1, False, attnum=3))) is SchemaAnswer.CONTINUE
    rebaseline = [
        answer((key, b, ColumnInfo("c", 25, -1, False, attnum=3, missing="x"))),  # a default for older rows
        answer((key, ColumnInfo("b2", 25, -1, False, attnum=2))),  # a rename
        answer((key,)),  # a drop
        answer((key, ColumnInfo("b", 25, -1, False, attnum=3))),  # dropped and added again
        answer((key, ColumnInfo("b", 20, -1, False, attnum=2)), SchemaChange(rewrite=REWRITE_COLUMN)),
        answer((key, b, ColumnInfo("d", 1184, -1, False, attnum=3)), SchemaChange(rewrite=REWRITE_DEFAULT)),
        answer((key, b, ColumnInfo("c", 25, -1, False))),  # identities unknown (no DDL trigger)
    ]
    assert rebaseline == [SchemaAnswer.REBASELINE] * len(rebaseline)


def test_a_baseline_taken_after_the_ddl_is_not_changed_again(
    items: Pipeline, database: Database, replica: Database
) -> None:
    # b dropped and added again (the same Relation message), new values, then the replica is
    # baselined before capture has seen any of it: its copy has the new b already; a change
    # before the DDL whose xid is not below the snapshot's xmin puts the old version into the
    # hand-off (as a writer running during the baseline does)
    before = int(database.execute("SELECT pg_current_xact_id()::text::bigint")[0][0])
    database.execute("UPDATE items SET a = a + 1 WHERE id = 50")
    database.execute("ALTER TABLE items DROP COLUMN b")
    database.execute("ALTER TABLE items ADD COLUMN b text")
    database.execute("UPDATE items SET b = 'new' WHERE id <= 5")
    update_state(items.store, items.name, lambda s: s.with_table_phase(ITEMS, Init()))
    replica.execute("DELETE FROM pgsync.watermarks WHERE table_key = 'public.items'")
    replica.execute("TRUNCATE items")
    xmax, lsn = database.execute(
        "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_insert_lsn()::text"
    )[0]
    # a snapshot that sees the DDL, with xmin at the change before it
    done = SyncDone("00000003-00000002-1", LSN.parse(str(lsn)), before, int(str(xmax)))
    update_state(items.store, items.name, lambda s: s.with_table_phase(ITEMS, DataSync()))
    update_state(items.store, items.name, lambda s: s.with_table_phase(ITEMS, done))
    with database.connect() as source:
        copy_base(source, replica, ITEMS)
    items.capture_until_idle()
    assert apply_all(items, replica) == {ITEMS: Ready()}
    assert rows(replica, ITEMS) == rows(database, ITEMS)
    assert replica.execute("SELECT count(*) FROM items WHERE b = 'new'") == [(5,)]


def test_a_replica_that_already_follows_answers_continue_again(
    items: Pipeline, database: Database, replica: Database
) -> None:
    database.execute("ALTER TABLE items RENAME COLUMN b TO b2")
    database.execute("UPDATE items SET b2 = 'x' WHERE id = 1")
    items.capture_until_idle()
    destination = PostgresDestination(replica.conninfo, name="replica")
    state = items.state()
    try:
        old, new = state.table(ITEMS).columns, state.table(ITEMS).columns
        assert [c.name for c in new] == ["id", "a", "b2"]
        renamed = (old[0], old[1], ColumnInfo("b", 25, -1, False, attnum=old[2].attnum))
        diff = diff_columns(renamed, new, SchemaChange())
        assert destination.change_schema(TableRef("public", "items"), diff) is SchemaAnswer.CONTINUE
        # done twice (an apply retried after its batch failed): nothing left to do, Continue
        assert destination.change_schema(TableRef("public", "items"), diff) is SchemaAnswer.CONTINUE
    finally:
        destination.close()
    assert [
        c
        for (c,) in replica.execute(
            "SELECT attname::text FROM pg_attribute WHERE attrelid = "
            "'items'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
        )
    ] == [
        "id",
        "a",
        "b2",
    ]



def test_a_ddl_captured_before_any_change_under_it_is_kept_for_the_next_capture(
    items: Pipeline, database: Database, replica: Database
) -> None:
    database.execute("ALTER TABLE items ADD COLUMN c text DEFAULT 'x'")
    items.capture_until_idle()  # the DDL's message, no change of the table after it yet
    assert items.state().table(ITEMS).ddl is not None
    database.execute("INSERT INTO items (id, a) VALUES (500, 1)")
    items.capture_until_idle()
    assert apply_all(items, replica) == {ITEMS: Ready()}
    assert rows(replica, ITEMS) == rows(database, ITEMS)
