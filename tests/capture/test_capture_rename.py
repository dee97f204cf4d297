"""Capture follows a table renamed in the source by its relation OID (real server): the table keeps
streaming under the pipeline's name, the other tables too, and a table the pipeline does not
know stops capture with its name, OID and remedy."""

from __future__ import annotations

import pytest

from airflow_provider_pgsync.errors import StateError
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


def test_a_published_table_the_pipeline_does_not_know_stops_capture_naming_it(
    database: Database, make_pipeline: MakePipeline
) -> None:
    pipeline = make_pipeline([*DDL, "CREATE TABLE stranger (id int PRIMARY KEY)"], [ITEMS, EVENTS])
    database.execute("ALTER PUBLICATION pgsync_pub ADD TABLE stranger")
    database.execute("INSERT INTO items VALUES (1, 'a')")
    database.execute("INSERT INTO stranger VALUES (1)")
    before = pipeline.slot_info().confirmed_flush_lsn
    with pytest.raises(StateError) as caught:
        pipeline.capture()
    message = str(caught.value)
    assert f"table public.stranger (relation OID {_oid(database, 'stranger')})" in message
    assert "run the pipeline's setup" in message and "nothing was captured" in message
    assert pipeline.slot_info().confirmed_flush_lsn == before, "the slot moved past unknown data"
    assert pipeline.state().segments == ()


def test_another_table_taking_a_followed_tables_name_stops_capture(
    database: Database, make_pipeline: MakePipeline
) -> None:
    pipeline = make_pipeline(DDL, [ITEMS, EVENTS])
    database.execute("INSERT INTO items VALUES (1, 'a')")
    pipeline.capture_until_idle()  # records the OIDs
    database.execute("ALTER TABLE items RENAME TO items_old")
    database.execute("CREATE TABLE public.items (id int PRIMARY KEY, name text)")
    database.execute("ALTER PUBLICATION pgsync_pub ADD TABLE public.items")  # by hand, behind setup's back
    database.execute("INSERT INTO public.items VALUES (7, 'new')")
    replaced = r"follows public\.items as relation OID \d+: the table of that name was replaced"
    with pytest.raises(StateError, match=replaced):
        pipeline.capture()
