"""Capture follows a table renamed in the source by its relation OID (real server): the table keeps
streaming under the pipeline's name, the other tables too; changes of a table the pipeline does not
follow (also one that took a followed table's old name) are left out with a warning naming it and
the remedy, and the remedy works."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_pgsync.source.names import TableRef
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


def test_renamed_table_keeps_streaming_under_the_pipelines_name(
    database: Database, make_pipeline: MakePipeline
) -> None:
    pipeline = make_pipeline(DDL, [ITEMS, EVENTS])  # a state without relation OIDs (older pgsync)
    items_oid = _oid(database, "items")
    database.execute("INSERT INTO items VALUES (1, 'a')")
    database.execute("INSERT INTO events VALUES (1, 'x')")
    # the rename inside a transaction with writes before and after it, in the first batch
    with database.connect() as conn, conn.transaction():
        conn.execute("INSERT INTO items VALUES (2, 'b')")
        conn.execute("ALTER TABLE items RENAME TO items_new")
        conn.execute("INSERT INTO items_new VALUES (3, 'c')")
    database.execute("INSERT INTO items_new VALUES (4, 'd')")
    database.execute("INSERT INTO events VALUES (2, 'y')")
    pipeline.capture_until_idle()

    state = pipeline.state()
    items = state.table(ITEMS)
    assert items.relation_id == items_oid
    assert items.source_name == TableRef("public", "items_new")
    assert state.table(EVENTS).relation_id == _oid(database, "events")
    assert state.table(EVENTS).source_name is None
    assert set(state.tables) == {ITEMS, EVENTS}
    assert {s.table for s in state.segments} == {ITEMS, EVENTS}
    assert [c["id"] for c in pipeline.changes(ITEMS)] == ["1", "2", "3", "4"]
    assert [c["a"] for c in pipeline.changes(EVENTS)] == ["1", "2"]

    # renamed again, captured by the decoding worker process: still the same table
    database.execute("ALTER TABLE items_new RENAME TO items_newer")
    database.execute("UPDATE items_newer SET name = 'z' WHERE id = 1")
    database.execute("INSERT INTO events VALUES (3, 'z')")
    pipeline.capture_until_idle(worker_from_bytes=1)
    state = pipeline.state()
    assert state.table(ITEMS).source_name == TableRef("public", "items_newer")
    assert state.table(ITEMS).relation_id == items_oid
    assert [(c["_op"], c["id"], c["name"]) for c in pipeline.changes(ITEMS)][-1] == ("U", "1", "z")
    assert [c["a"] for c in pipeline.changes(EVENTS)] == ["1", "2", "3"]
    assert {s.table for s in state.segments} == {ITEMS, EVENTS}


def test_a_published_table_the_pipeline_does_not_follow_is_left_out_naming_it(
    database: Database, make_pipeline: MakePipeline, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = make_pipeline([*DDL, "CREATE TABLE stranger (id int PRIMARY KEY)"], [ITEMS, EVENTS])
    database.execute("ALTER PUBLICATION pgsync_pub ADD TABLE stranger")
    database.execute("INSERT INTO items VALUES (1, 'a')")
    database.execute("INSERT INTO stranger VALUES (1)")
    database.execute("INSERT INTO stranger VALUES (2)")
    with caplog.at_level(logging.WARNING):
        result = pipeline.capture()
    assert result.idle and pipeline.slot_info().confirmed_flush_lsn == result.advanced_to
    assert {s.table for s in pipeline.state().segments} == {ITEMS}
    assert set(pipeline.state().tables) == {ITEMS, EVENTS}
    assert [c["id"] for c in pipeline.changes(ITEMS)] == ["1"]
    assert "2 change(s) of table public.stranger left out" in caplog.text
    assert "does not follow it" in caplog.text


def test_another_table_taking_a_followed_tables_name_is_left_out_and_the_remedy_works(
    database: Database, make_pipeline: MakePipeline, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = make_pipeline(DDL, [ITEMS, EVENTS])
    database.execute("INSERT INTO items VALUES (1, 'a')")
    pipeline.capture_until_idle()  # records the OIDs
    items_oid = _oid(database, "items")
    database.execute("ALTER TABLE items RENAME TO items_old")
    database.execute("CREATE TABLE public.items (id int PRIMARY KEY, name text)")
    database.execute("ALTER PUBLICATION pgsync_pub ADD TABLE public.items")  # by hand, behind setup's back
    database.execute("INSERT INTO public.items VALUES (7, 'new')")
    database.execute("INSERT INTO items_old VALUES (2, 'b')")
    with caplog.at_level(logging.WARNING):
        pipeline.capture_until_idle()
    # the followed table streams on under the pipeline's name; the new one is not taken for it
    state = pipeline.state()
    assert state.table(ITEMS).relation_id == items_oid
    assert state.table(ITEMS).source_name == TableRef("public", "items_old")
    assert [c["id"] for c in pipeline.changes(ITEMS)] == ["1", "2"]
    warning = "1 change(s) of table public.items left out: it is another table than public.items"
    assert warning in caplog.text and "Take it out of the publication" in caplog.text

    # what the warning says: the publication back to the pipeline's tables (what setup does)
    caplog.clear()
    pipeline.hook.ensure_publication("pgsync_pub", pipeline.hook.source_specs([ITEMS, EVENTS], state))
    published = database.execute(
        "SELECT tablename::text FROM pg_publication_tables WHERE pubname = 'pgsync_pub' ORDER BY 1"
    )
    assert [r[0] for r in published] == ["events", "items_old"]
    database.execute("INSERT INTO public.items VALUES (8, 'new')")
    database.execute("INSERT INTO items_old VALUES (3, 'c')")
    with caplog.at_level(logging.WARNING):
        results = pipeline.capture_until_idle()
    assert "left out" not in caplog.text, "the new table's changes are not even decoded any more"
    assert sum(r.changes for r in results) == 1
    assert [c["id"] for c in pipeline.changes(ITEMS)] == ["1", "2", "3"]
