"""Capture on a real server (DESIGN §2 rules 1-4, §4): exact changes in cut batches, schema changes, re-runs.

Commit LSNs are checked against a reference: a second slot created at the same
position as the pipeline's, peeked with ``PgReplicationHook.peek`` and read by the
reference ``PgOutputDecoder`` (``Begin.final_lsn`` of each transaction).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from psycopg import sql

from airflow_provider_pgsync.capture.run import CaptureResult
from airflow_provider_pgsync.changelog.metadata import change_of, columns_of
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.failpoints import EXIT_CODE
from airflow_provider_pgsync.pgoutput import LSN, pg_timestamp
from airflow_provider_pgsync.state.model import ColumnInfo, Init
from tests.capture.conftest import (
    Change,
    MakePipeline,
    Pipeline,
    ReferenceTransaction,
    reference_transactions,
)
from tests.conftest import REPO, Database

TEXT, INT4 = 25, 23
TABLES_DDL = [
    "CREATE TABLE items (id int PRIMARY KEY, name text, qty int)",
    "CREATE TABLE events (a int, b text)",
    "ALTER TABLE events REPLICA IDENTITY FULL",
]
ITEMS, EVENTS = "public.items", "public.events"


def _picked(changes: Sequence[Change], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """(op, xid, seq, *columns) of each change."""
    return [(c["_op"], c["_xid"], c["_seq"], *(c[name] for name in columns)) for c in changes]


def _check_against_reference(changes: Sequence[Change], reference: dict[int, ReferenceTransaction]) -> None:
    """Commit LSN and timestamp of every change are those of its transaction; order strict."""
    for change in changes:
        tx = reference[change["_xid"]]
        assert change["_commit_lsn"] == tx.final_lsn.value, change
        assert change["_commit_ts"] == pg_timestamp(tx.commit_ts), change
    keys = [(c["_commit_lsn"], c["_seq"]) for c in changes]
    assert keys == sorted(set(keys)), "changes out of order or repeated"


def _check_slot_matches_state(pipeline: Pipeline, result: CaptureResult) -> None:
    state = pipeline.state()
    assert result.advanced_to is not None
    assert pipeline.slot_info().confirmed_flush_lsn == state.last_end_lsn == result.advanced_to


def test_changes_over_cut_batches_are_exact(database: Database, make_pipeline: MakePipeline) -> None:
    pipeline = make_pipeline(TABLES_DDL, ["items", "events"], reference_slot=True)
    x_bulk = database.transaction("INSERT INTO items SELECT g, 'n' || g, g FROM generate_series(1, 30) g")
    x_mixed = database.transaction(
        "INSERT INTO events VALUES (1, 'a'), (2, NULL)",
        "UPDATE items SET qty = 100 WHERE id = 3",
        "UPDATE items SET name = NULL WHERE id = 4",
    )
    x_rolled_back = database.transaction(
        "INSERT INTO items VALUES (99, 'gone', 0)", "DELETE FROM events", commit=False
    )
    x_key = database.transaction("UPDATE items SET id = 31, name = 'moved' WHERE id = 1")
    x_full = database.transaction("UPDATE events SET b = 'b' WHERE a = 2")
    x_delete = database.transaction("DELETE FROM items WHERE id = 2", "DELETE FROM events WHERE a = 1")
    small = sql.SQL("INSERT INTO events VALUES ({}, {})")
    x_small = [database.transaction(small.format(i, f"e{i}")) for i in range(10, 50)]
    x_truncate = database.transaction("TRUNCATE items, events")
    x_after = database.transaction("INSERT INTO items VALUES (7, 'after', 7)")

    results: list[CaptureResult] = []
    while not results or not results[-1].idle:
        assert len(results) < 20
        results.append(pipeline.capture(max_changes=50))
        _check_slot_matches_state(pipeline, results[-1])

    reference = {tx.xid: tx for tx in reference_transactions(pipeline.hook, f"{pipeline.slot}_ref")}
    expected_xids = [x_bulk, x_mixed, x_key, x_full, x_delete, *x_small, x_truncate, x_after]
    assert list(reference) == expected_xids  # the rolled-back transaction is not there
    assert x_rolled_back not in reference

    # the batches were cut at whole transactions, each run advancing to the end of its last one
    assert len(results) >= 3
    ends = {tx.end_lsn for tx in reference.values()}
    for result in results[:-1]:
        assert (result.idle, result.payloads >= 50) == (False, True)
        assert result.advanced_to in ends
    assert results[-1].payloads < 50
    assert sum(r.transactions for r in results) == len(expected_xids)
    assert sum(r.changes for r in results) == 30 + 4 + 1 + 1 + 2 + 40 + 2 + 1

    items = pipeline.changes(ITEMS)
    _check_against_reference(items, reference)
    assert _picked(items, ["_old_key_id", "id", "name", "qty", "_unchanged"]) == [
        *[("I", x_bulk, i - 1, None, str(i), f"n{i}", str(i), None) for i in range(1, 31)],
        ("U", x_mixed, 2, None, "3", "n3", "100", None),
        ("U", x_mixed, 3, None, "4", None, "4", None),
        ("U", x_key, 0, "1", "31", "moved", "1", None),
        ("D", x_delete, 0, "2", None, None, None, None),
        ("T", x_truncate, 0, None, None, None, None, None),
        ("I", x_after, 0, None, "7", "after", "7", None),
    ]

    events = pipeline.changes(EVENTS)
    _check_against_reference(events, reference)
    assert _picked(events, ["_old_key_a", "_old_key_b", "a", "b"]) == [
        ("I", x_mixed, 0, None, None, "1", "a"),
        ("I", x_mixed, 1, None, None, "2", None),
        # REPLICA IDENTITY FULL: every column is the key, the old row travels along
        ("U", x_full, 0, "2", None, "2", "b"),
        ("D", x_delete, 1, "1", "a", None, None),
        *[("I", x, 0, None, None, str(i), f"e{i}") for i, x in zip(range(10, 50), x_small, strict=True)],
        ("T", x_truncate, 1, None, None, None, None),
    ]

    # every segment of the state is in the changelog and they hold exactly these changes
    state = pipeline.state()
    assert sum(s.rows for s in state.segments) == len(items) + len(events)
    assert sorted(s.path for s in state.segments) == sorted(s.path for r in results for s in r.segments)
    changelog = Changelog(pipeline.settings.changelog_uri)
    for segment in state.segments:
        assert changelog.segment_info(segment.path) == segment
    assert {k: (v.phase, v.schema_version) for k, v in state.tables.items()} == {
        ITEMS: (Init(), 0),
        EVENTS: (Init(), 0),
    }
    assert state.table(EVENTS).columns == (  # attnums from the catalog read at the first capture
        ColumnInfo("a", INT4, -1, True, attnum=1),
        ColumnInfo("b", TEXT, -1, True, attnum=2),
    )

    # nothing new: two more runs write nothing, only the idle advance moves the state
    before = pipeline.state()
    for _ in range(2):
        again = pipeline.capture(max_changes=50)
        assert (again.changes, again.transactions, again.segments, again.idle) == (0, 0, (), True)
        _check_slot_matches_state(pipeline, again)
        after = pipeline.state()
        assert after.last_end_lsn is not None and before.last_end_lsn is not None
        assert after.last_end_lsn >= before.last_end_lsn
        assert dataclasses.replace(after, version=before.version, last_end_lsn=before.last_end_lsn) == before
    assert pipeline.changes(ITEMS) == items
    assert pipeline.changes(EVENTS) == events


def test_schema_changes_start_new_versions(database: Database, make_pipeline: MakePipeline) -> None:
    pipeline = make_pipeline(TABLES_DDL, ["items", "events"])
    x0 = database.transaction("INSERT INTO items VALUES (1, 'one', 1)")
    # a Relation with the same columns (sent again after TRUNCATE of the other table) is no new version
    database.transaction("TRUNCATE events")
    x0b = database.transaction("INSERT INTO items VALUES (2, 'two', 2)")
    first = pipeline.capture()
    database.execute("ALTER TABLE items ADD COLUMN extra text")
    x1 = database.transaction("INSERT INTO items VALUES (3, 'three', 3, '33')")
    second = pipeline.capture()
    database.execute("ALTER TABLE items DROP COLUMN qty")
    x2 = database.transaction("UPDATE items SET extra = '11' WHERE id = 1")
    database.execute("ALTER TABLE items ALTER COLUMN extra TYPE int USING extra::int")
    x3 = database.transaction("INSERT INTO items VALUES (4, 'four', 44)", "DELETE FROM items WHERE id = 2")
    third = pipeline.capture()
    assert [r.idle for r in (first, second, third)] == [True, True, True]

    changes = pipeline.changes(ITEMS)
    rows = [
        (c["_schema_version"], c["_op"], c["_xid"], c["id"], c["name"], c.get("qty"), c.get("extra"))
        for c in changes
    ]
    assert rows == [
        (0, "I", x0, "1", "one", "1", None),
        (0, "I", x0b, "2", "two", "2", None),
        (1, "I", x1, "3", "three", "3", "33"),
        (2, "U", x2, "1", "one", None, "11"),
        (3, "I", x3, "4", "four", None, "44"),
        (3, "D", x3, None, None, None, None),
    ]
    assert changes[-1]["_old_key_id"] == "2"

    # attnums from the DDL trigger (make_pipeline installs it, as setup does)
    key = ColumnInfo("id", INT4, -1, True, attnum=1)
    name = ColumnInfo("name", TEXT, -1, False, attnum=2)
    qty = ColumnInfo("qty", INT4, -1, False, attnum=3)
    expected_columns = {
        0: (key, name, qty),
        1: (key, name, qty, ColumnInfo("extra", TEXT, -1, False, attnum=4)),
        2: (key, name, ColumnInfo("extra", TEXT, -1, False, attnum=4)),
        3: (key, name, ColumnInfo("extra", INT4, -1, False, attnum=4)),
    }
    reserved = ["_op", "_commit_lsn", "_seq", "_xid", "_commit_ts", "_unchanged", "_old_key_id"]
    for change in changes:
        columns = expected_columns[change["_schema_version"]]
        assert list(change) == [*reserved, *(c.name for c in columns), "_schema_version"]

    state = pipeline.state()
    changelog = Changelog(pipeline.settings.changelog_uri)
    items_segments = [s for s in state.segments if s.table == ITEMS]
    assert sorted({s.schema_version for s in items_segments}) == [0, 1, 2, 3]
    for segment in items_segments:
        recorded = changelog.segment_metadata(segment.path)
        assert recorded["schema_version"] == segment.schema_version
        assert columns_of(recorded, segment.path) == list(expected_columns[segment.schema_version])
    # the type change had a USING clause and rewrote the table: version 3 says so
    v3 = next(s for s in items_segments if s.schema_version == 3)
    change = change_of(changelog.segment_metadata(v3.path), v3.path)
    assert (change.rewrite, change.using, change.unproven, len(change.xids)) == (4, True, "", 1)
    assert (state.table(ITEMS).schema_version, state.table(ITEMS).columns) == (3, expected_columns[3])
    assert state.table(EVENTS).schema_version == 0
    assert pipeline.changes(EVENTS)[0]["_op"] == "T"


_CRASHING_CAPTURE = """
import sys
from airflow_provider_pgsync import failpoints
from airflow_provider_pgsync.capture.run import CaptureSettings, capture
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore

conn_id, pipeline, slot, publication, changelog = sys.argv[1:]
failpoints.arm("after_state_write")
hook = PgReplicationHook(postgres_conn_id=conn_id)
settings = CaptureSettings(pipeline, slot, publication, changelog)
capture(hook, PostgresStateStore(hook), settings)
print("capture returned")
"""


def test_crash_between_state_save_and_advance_captures_nothing_twice(
    database: Database, make_pipeline: MakePipeline, source_conn_id: str
) -> None:
    pipeline = make_pipeline(TABLES_DDL, ["items", "events"])
    x1 = database.transaction("INSERT INTO items VALUES (1, 'one', 1)", "INSERT INTO events VALUES (1, 'a')")
    x2 = database.transaction("UPDATE items SET qty = 2 WHERE id = 1")
    settings = pipeline.settings
    crashed = subprocess.run(
        [
            sys.executable,
            "-c",
            _CRASHING_CAPTURE,
            source_conn_id,
            settings.pipeline,
            settings.slot_name,
            settings.publication_name,
            settings.changelog_uri,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert crashed.returncode == EXIT_CODE, crashed.stderr[-3000:]
    assert "capture returned" not in crashed.stdout

    # the batch is durable and recorded, but the slot was not advanced
    state = pipeline.state()
    assert state.last_end_lsn is not None
    assert pipeline.slot_info().confirmed_flush_lsn == pipeline.creation_lsn < state.last_end_lsn
    recorded = pipeline.changes(ITEMS)
    assert [(c["_op"], c["_xid"], c["qty"]) for c in recorded] == [("I", x1, "1"), ("U", x2, "2")]

    x3 = database.transaction("DELETE FROM items WHERE id = 1", "INSERT INTO events VALUES (2, 'b')")
    rerun = pipeline.capture()

    # the re-run re-peeked x1 and x2 but dropped them: only x3 is new
    assert (rerun.transactions, rerun.changes, rerun.idle) == (3, 5, True)
    assert sum(s.rows for s in rerun.segments) == 2
    _check_slot_matches_state(pipeline, rerun)
    items = pipeline.changes(ITEMS)
    events = pipeline.changes(EVENTS)
    assert [(c["_op"], c["_xid"], c["_old_key_id"], c["id"]) for c in items] == [
        ("I", x1, None, "1"),
        ("U", x2, None, "1"),
        ("D", x3, "1", None),
    ]
    assert [(c["_op"], c["_xid"], c["a"]) for c in events] == [("I", x1, "1"), ("I", x3, "2")]
    assert sum(s.rows for s in pipeline.state().segments) == 5
    assert LSN(items[-1]["_commit_lsn"]) < pipeline.state().last_end_lsn  # type: ignore[operator]
