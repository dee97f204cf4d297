"""Capture, then apply into a PostgreSQL replica: the baseline hand-off by the visibility rule,
TOAST, key changes, deletes, TRUNCATE and a table without a key, compared with the source."""

from __future__ import annotations

from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.phases import DataSync, Errored, Init, Ready, SyncDone
from airflow_provider_pgsync.state.store import update_state
from tests.capture.conftest import MakePipeline
from tests.conftest import Database
from tests.support.replica import (
    apply_all,
    copy_base,
    empty_capture_baseline,
    exported_snapshot,
    rows,
)

DDL = [
    "CREATE TABLE orders (id bigint PRIMARY KEY, note text, doc text, amount numeric(10,2),"
    " at timestamptz DEFAULT '2024-01-01 10:00+00')",
    "ALTER TABLE orders ALTER COLUMN doc SET STORAGE EXTERNAL",
    "CREATE TABLE events (kind text, payload jsonb)",
    "ALTER TABLE events REPLICA IDENTITY FULL",
]
TABLES = ["public.orders", "public.events"]


def test_capture_and_apply_reach_the_source_exactly(
    make_pipeline: MakePipeline, database: Database, replica: Database
) -> None:
    pipeline = make_pipeline(DDL, TABLES)
    # committed before the baseline snapshot: captured, and in the base -> must not apply twice
    database.execute(
        "INSERT INTO orders (id, note, doc, amount)"
        " SELECT g, 'n' || g, repeat('toast', 3000), g * 1.5 FROM generate_series(1, 20) g"
    )
    database.execute("""INSERT INTO events VALUES ('a', '{"n": 1}'), ('a', '{"n": 1}'), ('b', NULL)""")
    # in progress while the snapshot is taken: in its xip -> must be applied
    pending = database.connect(autocommit=False)
    pending.execute("INSERT INTO orders (id, note) VALUES (100, 'in flight')")
    source = database.connect(autocommit=False)
    source.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    done = exported_snapshot(source)
    pending.commit()
    pending.close()
    # after the snapshot: TOAST kept, a key change keeping TOAST, deletes, an update in FULL identity
    database.transaction(
        "UPDATE orders SET note = 'changed' WHERE id <= 5",
        "UPDATE orders SET id = 200 WHERE id = 6",
        "DELETE FROM orders WHERE id BETWEEN 10 AND 12",
        """UPDATE events SET payload = '{"n": 2}' WHERE kind = 'b'""",
    )
    database.execute("""DELETE FROM events WHERE ctid = (SELECT min(ctid) FROM events WHERE kind = 'a')""")
    pipeline.capture_until_idle()

    destination = PostgresDestination(replica.conninfo, name="replica")
    for table in TABLES:  # the baseline, into tables the destination creates
        destination.open_table(TableRef.parse(table), pipeline.state().table(table).columns, 0)
        copy_base(source, replica, table)
    destination.close()
    source.close()
    for table in TABLES:
        update_state(pipeline.store, pipeline.name, lambda s, t=table: s.with_table_phase(t, DataSync()))
        update_state(pipeline.store, pipeline.name, lambda s, t=table: s.with_table_phase(t, done))

    phases = apply_all(pipeline, replica)

    assert phases == {"public.orders": Ready(), "public.events": Ready()}
    for table in TABLES:
        assert rows(replica, table) == rows(database, table), table

    # streaming once Ready: more changes, a TRUNCATE in the middle, TOAST kept across batches
    database.transaction(
        "UPDATE orders SET amount = amount + 1 WHERE id > 10",
        "UPDATE orders SET id = 300, note = 'moved again' WHERE id = 200",
    )
    database.transaction("TRUNCATE events", "INSERT INTO events VALUES ('c', '[]')")
    database.execute("UPDATE orders SET doc = repeat('toast', 3000) || 'x' WHERE id = 1")
    pipeline.capture_until_idle()

    assert apply_all(pipeline, replica) == {"public.orders": Ready(), "public.events": Ready()}
    for table in TABLES:
        assert rows(replica, table) == rows(database, table), table
    doc = replica.execute("SELECT length(doc) FROM orders WHERE id = 300")
    assert doc == [(15000,)]


def test_a_failing_destination_errors_its_table_and_leaves_capture_alone(
    make_pipeline: MakePipeline, database: Database, replica: Database
) -> None:
    pipeline = make_pipeline(DDL[:2], TABLES[:1])
    row = database.execute(
        "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_insert_lsn()::text"
    )[0]
    done = SyncDone("00000003-00000002-1", LSN.parse(str(row[1])), int(str(row[0])), int(str(row[0])))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase("public.orders", DataSync()))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase("public.orders", done))
    database.execute("INSERT INTO orders (id, note) VALUES (1, 'a'), (2, 'b')")
    pipeline.capture_until_idle()
    slot_before = pipeline.slot_info().confirmed_flush_lsn
    segments_before = pipeline.state().segments
    # the replica's table refuses the rows
    replica.execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, note text CHECK (note <> 'b'), doc text,"
        " amount numeric(10,2), at timestamptz)"
    )

    phases = apply_all(pipeline, replica)

    phase = phases["public.orders"]
    assert isinstance(phase, Errored)
    assert "orders" in phase.reason and "check constraint" in phase.reason and "rebaseline" in phase.solution
    assert replica.execute("SELECT count(*) FROM orders") == [(0,)]
    assert pipeline.slot_info().confirmed_flush_lsn == slot_before
    assert pipeline.state().segments == segments_before
    assert isinstance(pipeline.state().table("public.orders").phase, Errored)


def test_schema_changes_continue_or_send_the_table_back_to_baseline(
    make_pipeline: MakePipeline, database: Database, replica: Database
) -> None:
    pipeline = make_pipeline(["CREATE TABLE items (id int PRIMARY KEY, name text)"], ["public.items"])
    empty_capture_baseline(pipeline, database, "public.items")
    database.execute("INSERT INTO items VALUES (1, 'one'), (2, 'two')")
    pipeline.capture_until_idle()
    assert apply_all(pipeline, replica) == {"public.items": Ready()}

    # a nullable column added: the replica adds it too and goes on
    database.execute("ALTER TABLE items ADD COLUMN extra int")
    database.execute("INSERT INTO items VALUES (3, 'three', 33)")
    database.execute("UPDATE items SET extra = 11 WHERE id = 1")
    pipeline.capture_until_idle()
    assert apply_all(pipeline, replica) == {"public.items": Ready()}
    assert rows(replica, "public.items") == rows(database, "public.items")

    # a widening type change is followed in place
    database.execute("ALTER TABLE items ALTER COLUMN extra TYPE bigint")
    database.execute("UPDATE items SET extra = 12 WHERE id = 1")
    pipeline.capture_until_idle()
    assert apply_all(pipeline, replica) == {"public.items": Ready()}
    assert rows(replica, "public.items") == rows(database, "public.items")

    # a type change that may change values: the table goes back through its baseline
    database.execute("ALTER TABLE items ALTER COLUMN extra TYPE text")
    database.execute("UPDATE items SET extra = 'x' WHERE id = 1")
    pipeline.capture_until_idle()
    assert apply_all(pipeline, replica) == {"public.items": Init()}
    assert pipeline.state().table("public.items").phase == Init()


def test_a_batch_failing_while_the_next_is_read_keeps_the_earlier_batches_and_their_watermark(
    make_pipeline: MakePipeline, database: Database, replica: Database
) -> None:
    """Apply reads the next batch while the destination applies one (``apply/prefetch.py``):
    a batch that fails leaves every earlier batch applied with its watermark and nothing of
    itself or of the batch read ahead."""
    pipeline = make_pipeline(DDL[:2], TABLES[:1])
    empty_capture_baseline(pipeline, database, "public.orders")
    for first in (1, 11, 21):  # three transactions of 5 rows: batches of 7 rows cut between them
        database.execute(
            "INSERT INTO orders (id, note) SELECT g, 'n' || g FROM generate_series(%s::int, %s::int) g",
            (first, first + 4),
        )
    pipeline.capture_until_idle()
    replica.execute(  # refuses a row of the second transaction
        "CREATE TABLE orders (id bigint PRIMARY KEY, note text CHECK (note <> 'n13'), doc text,"
        " amount numeric(10,2), at timestamptz)"
    )

    phase = apply_all(pipeline, replica)["public.orders"]

    assert isinstance(phase, Errored) and "check constraint" in phase.reason
    assert replica.execute("SELECT min(id), max(id), count(*) FROM orders") == [(1, 5, 5)]
    destination = PostgresDestination(replica.conninfo, name="replica")
    first_commit = min(s.first_commit_lsn.value for s in pipeline.state().segments)
    watermark = destination.watermark(TableRef.parse("public.orders"))
    destination.close()
    assert watermark is not None and watermark[0] == first_commit


def test_a_column_change_right_after_the_baseline_is_checked_at_the_hand_off(
    make_pipeline: MakePipeline, database: Database, replica: Database
) -> None:
    """The baseline copies the table, then a column is added with a default and one dropped
    before any change is captured: the hand-off's first batch has the new columns, which the
    replica follows from the copied ones (the added column filled for older rows)."""
    ddl = "CREATE TABLE items (id int PRIMARY KEY, name text, f float8)"
    pipeline = make_pipeline([ddl], ["public.items"])
    database.execute("INSERT INTO items SELECT g, 'item ' || g, g / 4.0 FROM generate_series(1, 50) g")
    pipeline.capture_until_idle()  # the copied columns are in the changelog (schema version 0)
    source = database.connect(autocommit=False)
    source.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    done = exported_snapshot(source)
    replica.execute(ddl)
    copy_base(source, replica, "public.items")
    source.close()
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase("public.items", DataSync()))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase("public.items", done))

    database.execute("ALTER TABLE items ADD COLUMN note text DEFAULT 'n'")
    database.execute("ALTER TABLE items DROP COLUMN f")
    database.execute("UPDATE items SET note = 'changed' WHERE id <= 5")
    pipeline.capture_until_idle()
    # before the check, the replica was handed the new columns as its own and failed on them
    assert apply_all(pipeline, replica) == {"public.items": Ready()}
    assert rows(replica, "public.items") == rows(database, "public.items")
