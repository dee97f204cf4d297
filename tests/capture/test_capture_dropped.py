"""A table dropped in the source, as capture records it (real server): by the DDL trigger's message
at the DROP's place in the stream, or, where that trigger is not active, by the catalog once a
batch has read its whole peek; every change before the DROP is in the changelog, the other
tables stream on, and a table created later under its name is not taken for it."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.state.model import SourceDrop
from tests.capture.conftest import MakePipeline
from tests.conftest import Database

DDL = [
    "CREATE TABLE items (id int PRIMARY KEY, name text)",
    "CREATE TABLE events (a int, b text)",
    "ALTER TABLE events REPLICA IDENTITY FULL",
]
ITEMS, EVENTS = "public.items", "public.events"


def _oid(database: Database, table: str) -> int:
    return int(database.execute("SELECT %s::regclass::oid::int8", (table,))[0][0])


def test_the_ddl_triggers_message_records_the_drop_where_it_happened(
    database: Database, make_pipeline: MakePipeline, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = make_pipeline(DDL, [ITEMS, EVENTS])
    items_oid = _oid(database, "items")
    database.execute("INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 5) g")
    database.execute("INSERT INTO events VALUES (1, 'x')")
    pipeline.capture_until_idle()
    with database.connect() as conn, conn.transaction():  # changes right before the DROP
        conn.execute("UPDATE items SET name = 'last' WHERE id = 1")
        conn.execute("DELETE FROM items WHERE id = 2")
    with database.connect() as conn, conn.transaction():
        conn.execute("INSERT INTO events VALUES (2, 'y')")
        conn.execute("DROP TABLE items")
        drop_lsn = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    database.execute("INSERT INTO events VALUES (3, 'z')")
    with caplog.at_level(logging.WARNING):
        pipeline.capture_until_idle(max_changes=2)  # a few batches: the drop in one of them

    state = pipeline.state()
    dropped = state.table(ITEMS).dropped
    assert dropped is not None and dropped.relation_id == items_oid and dropped.exact
    assert drop_lsn is not None and dropped.lsn <= LSN.parse(drop_lsn[0])
    assert state.table(EVENTS).dropped is None
    changes = [(c["_op"], c["id"] or c["_old_key_id"]) for c in pipeline.changes(ITEMS)]
    assert changes == [*(("I", str(i)) for i in range(1, 6)), ("U", "1"), ("D", "2")]
    assert [c["a"] for c in pipeline.changes(EVENTS)] == ["1", "2", "3"]
    warning = f"table public.items of pipeline {pipeline.name!r} was dropped in the source at {dropped.lsn}"
    assert warning in caplog.text and "keep its rows as of the drop" in caplog.text

    # a table created later under its name (and published by hand) is another table: left out
    caplog.clear()
    database.execute("CREATE TABLE public.items (id int PRIMARY KEY, name text)")
    database.execute("ALTER PUBLICATION pgsync_pub ADD TABLE public.items")
    database.execute("INSERT INTO public.items VALUES (100, 'new')")
    database.execute("INSERT INTO events VALUES (4, 'w')")
    with caplog.at_level(logging.WARNING):
        pipeline.capture_until_idle()
    state = pipeline.state()
    assert state.table(ITEMS).relation_id == items_oid and state.table(ITEMS).dropped == dropped
    assert len(pipeline.changes(ITEMS)) == len(changes), "nothing of the new table"
    assert [c["a"] for c in pipeline.changes(EVENTS)] == ["1", "2", "3", "4"]
    assert "1 change(s) of table public.items left out: it is a new table under the name" in caplog.text
    assert "run the setup DAG: it follows the new table and baselines it" in caplog.text


def test_without_the_trigger_the_catalog_finds_the_drop_once_a_batch_read_its_whole_peek(
    database: Database, make_pipeline: MakePipeline, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = make_pipeline(DDL, [ITEMS, EVENTS])
    database.execute("INSERT INTO events VALUES (0, 'first')")
    pipeline.capture_until_idle()  # records the OIDs
    events_oid = _oid(database, "events")
    database.execute("DROP EVENT TRIGGER pgsync_table_drop")  # as a setup without superuser leaves it
    for i in range(1, 11):
        database.execute("INSERT INTO events VALUES (%s, 'e')", (i,))
    database.execute("DROP TABLE events")
    for i in range(1, 6):
        database.execute("INSERT INTO items VALUES (%s, 'i')", (i,))

    first = pipeline.capture(max_changes=3)  # cut by its limit: the drop is not recorded yet
    assert not first.idle
    assert pipeline.state().table(EVENTS).dropped is None
    with caplog.at_level(logging.WARNING):
        results = pipeline.capture_until_idle(max_changes=3)
    state = pipeline.state()
    dropped = state.table(EVENTS).dropped
    last = results[-1]
    assert last.idle and last.upto_lsn is not None
    assert dropped == SourceDrop(events_oid, last.upto_lsn, exact=False)
    assert [c["a"] for c in pipeline.changes(EVENTS)] == [str(i) for i in range(11)]
    assert [c["id"] for c in pipeline.changes(ITEMS)] == [str(i) for i in range(1, 6)]
    assert f"was dropped in the source at or before {last.upto_lsn}" in caplog.text
    # later runs keep the record as it is, and say so again
    caplog.clear()
    database.execute("INSERT INTO items VALUES (6, 'i')")
    with caplog.at_level(logging.WARNING):
        pipeline.capture_until_idle()
    assert pipeline.state().table(EVENTS).dropped == dropped
    assert "table public.events" in caplog.text and "was dropped in the source" in caplog.text
