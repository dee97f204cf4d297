"""Capture, then apply into a PostgreSQL replica: the baseline hand-off by the visibility rule,
TOAST, key changes, deletes, TRUNCATE and a table without a key, compared with the source."""

from __future__ import annotations

import psycopg
from psycopg import sql

from airflow_provider_pgsync.apply.destination import Destination
from airflow_provider_pgsync.apply.run import apply_table
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.hooks.catalog import column_infos
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.phases import DataSync, Errored, Init, Ready, SyncDone
from airflow_provider_pgsync.state.store import update_state
from tests.capture.conftest import MakePipeline, Pipeline
from tests.conftest import Database

DDL = [
    "CREATE TABLE orders (id bigint PRIMARY KEY, note text, doc text, amount numeric(10,2),"
    " at timestamptz DEFAULT '2024-01-01 10:00+00')",
    "ALTER TABLE orders ALTER COLUMN doc SET STORAGE EXTERNAL",
    "CREATE TABLE events (kind text, payload jsonb)",
    "ALTER TABLE events REPLICA IDENTITY FULL",
]
TABLES = ["public.orders", "public.events"]


def column_names(database: Database, table: str) -> list[str]:
    with database.connect() as conn:
        found = conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
            " AND NOT attisdropped ORDER BY attnum",
            (table,),
        ).fetchall()
    return [r[0] for r in found]


def rows(database: Database, table: str) -> list[tuple[str | None, ...]]:
    """The table's rows as text, sorted (a multiset for tables without a key)."""
    names = column_names(database, table)
    with database.connect() as conn:
        conn.execute("SET TimeZone = 'UTC'")
        query = sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(n)) for n in names),
            TableRef.parse(table).identifier,
        )
        return sorted(conn.execute(query).fetchall(), key=lambda r: tuple((v is None, v or "") for v in r))


def exported_snapshot(conn: psycopg.Connection) -> SyncDone:  # type: ignore[type-arg]
    """The hand-off a baseline reading in ``conn``'s REPEATABLE READ snapshot records."""
    row = conn.execute(
        "SELECT pg_export_snapshot(), pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint,"
        " ARRAY(SELECT pg_snapshot_xip(s)::text::bigint), pg_current_wal_insert_lsn()::text"
        " FROM pg_current_snapshot() s"
    ).fetchone()
    assert row is not None
    return SyncDone(row[0], LSN.parse(row[4]), row[1], row[2], tuple(row[3]))


def copy_base(source: psycopg.Connection, replica: Database, table: str) -> None:  # type: ignore[type-arg]
    """The test's baseline: the table as ``source``'s open snapshot sees it, into the replica."""
    ident = TableRef.parse(table).identifier
    with (
        replica.connect() as out,
        out.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(ident)) as sink,
        source.cursor().copy(sql.SQL("COPY {} TO STDOUT").format(ident)) as data,
    ):
        for block in data:
            sink.write(block)


def empty_baseline(source: Database, replica: Database, name: str, table: str, lineage: str) -> None:
    """A real baseline of the empty ``table`` into the PostgreSQL destination ``name`` on
    ``replica``: the table made, its lineage and identity recorded, as the baseline's swap does."""
    ref = TableRef.parse(table)
    with source.connect() as conn:
        columns = column_infos(conn, ref)
    destination = PostgresDestination(replica.conninfo, name=name)
    try:
        staging = destination.prepare_baseline(ref, columns, lineage)
        destination.finish_baseline(ref, staging, lineage, columns)
    finally:
        destination.close()


def apply_all(pipeline: Pipeline, replica: Database) -> dict[str, object]:
    """One apply run of every table into the replica; records the phases; returns them."""
    return apply_into(pipeline, PostgresDestination(replica.conninfo, name="replica"))


def apply_into(pipeline: Pipeline, destination: Destination) -> dict[str, object]:
    """One apply run of every table into ``destination`` (closed after); records the phases."""
    state = pipeline.state()
    try:
        results = {
            key: apply_table(Changelog(pipeline.settings.changelog_uri), state, ts, destination, batch_rows=7)
            for key, ts in state.tables.items()
        }
    finally:
        destination.close()

    def record(current: PipelineState) -> PipelineState:
        for key, result in results.items():
            if result.phase != current.tables[key].phase:
                current = current.with_table_phase(key, result.phase)
        return current

    update_state(pipeline.store, pipeline.name, record)
    return {key: r.phase for key, r in results.items()}


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


def _empty_baseline(pipeline: Pipeline, database: Database, table: str) -> None:
    """The baseline of an empty table: nothing to copy, every later transaction applies."""
    xmax, lsn = database.execute(
        "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_insert_lsn()::text"
    )[0]
    done = SyncDone("00000003-00000002-1", LSN.parse(str(lsn)), int(str(xmax)), int(str(xmax)))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(table, DataSync()))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(table, done))


def test_schema_changes_continue_or_send_the_table_back_to_baseline(
    make_pipeline: MakePipeline, database: Database, replica: Database
) -> None:
    pipeline = make_pipeline(["CREATE TABLE items (id int PRIMARY KEY, name text)"], ["public.items"])
    _empty_baseline(pipeline, database, "public.items")
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
    _empty_baseline(pipeline, database, "public.orders")
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
