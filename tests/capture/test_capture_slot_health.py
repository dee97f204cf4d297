"""Slot health before each capture (DESIGN §2 rule 10): a dropped, replaced or lost slot errs every table.

Nothing is captured from a slot that is not the one the state was built from, and the
tables go to Errored with a reason naming the slot and a remedy saying to rebaseline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from airflow_provider_pgsync.errors import SlotError
from airflow_provider_pgsync.state.model import Errored, PipelineState
from tests.capture.conftest import MakePipeline, Pipeline, wait_for
from tests.conftest import Database

DDL = [
    "CREATE TABLE items (id int PRIMARY KEY, name text)",
    "CREATE TABLE events (a int, b text)",
    "ALTER TABLE events REPLICA IDENTITY FULL",
    "CREATE TABLE unpublished (id int, pad text)",
]
TABLES = ["items", "events"]


def _assert_all_errored(state: PipelineState, *, reason_has: list[str]) -> Errored:
    phases = [ts.phase for ts in state.tables.values()]
    assert len(phases) == 2 and all(isinstance(p, Errored) for p in phases), phases
    first = phases[0]
    assert isinstance(first, Errored)
    assert all(p == first for p in phases)
    assert (first.retry, first.previous) == ("manual", "Init")
    for word in reason_has:
        assert word in first.reason, first.reason
    assert "rebaseline" in first.solution, first.solution
    return first


def _capture_fails(pipeline: Pipeline) -> SlotError:
    before = pipeline.state()
    with pytest.raises(SlotError) as caught:
        pipeline.capture()
    after = pipeline.state()
    # nothing captured: no segments, no end LSN moved
    assert (after.segments, after.last_end_lsn) == (before.segments, before.last_end_lsn)
    return caught.value


def test_dropped_slot_errs_every_table(make_pipeline: MakePipeline) -> None:
    pipeline = make_pipeline(DDL, TABLES)
    pipeline.database.execute("INSERT INTO items VALUES (1, 'one')")
    assert pipeline.capture().changes == 1
    assert pipeline.hook.drop_slot(pipeline.slot) is True

    error = _capture_fails(pipeline)

    phase = _assert_all_errored(pipeline.state(), reason_has=[pipeline.slot, "does not exist"])
    assert str(error) == f"{phase.reason}; {phase.solution}"
    assert (
        "run the pipeline's setup DAG" in phase.solution
        and f"creates slot {pipeline.slot} again" in phase.solution
    )
    # a second run fails the same way and keeps the tables as they are
    errored = pipeline.state()
    _capture_fails(pipeline)
    assert pipeline.state() == errored


def test_replaced_slot_errs_every_table(make_pipeline: MakePipeline) -> None:
    pipeline = make_pipeline(DDL, TABLES)
    pipeline.database.execute("INSERT INTO items VALUES (1, 'one')")
    assert pipeline.capture().changes == 1
    left_at = pipeline.state().last_end_lsn
    # changes the pipeline never sees, then a new slot of the same name past them
    pipeline.database.execute("INSERT INTO items VALUES (2, 'two')")
    assert pipeline.hook.drop_slot(pipeline.slot) is True
    assert pipeline.hook.ensure_slot(pipeline.slot).created is True
    confirmed = pipeline.slot_info().confirmed_flush_lsn
    assert left_at is not None and confirmed is not None and confirmed > left_at

    error = _capture_fails(pipeline)

    phase = _assert_all_errored(
        pipeline.state(), reason_has=[pipeline.slot, f"is at {confirmed}", f"past {left_at}", "replaced"]
    )
    assert str(error) == f"{phase.reason}; {phase.solution}"
    assert [c["id"] for c in pipeline.changes("items")] == ["1"]


@pytest.fixture
def small_slot_wal_limit(database: Database) -> Iterator[None]:
    """``max_slot_wal_keep_size = 1MB`` on the session's cluster, reset afterwards whatever happens."""
    try:
        database.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
        database.execute("SELECT pg_reload_conf()")
        wait_for("the new max_slot_wal_keep_size", lambda: _setting(database) == "1MB", timeout=10)
        yield
    finally:
        database.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
        database.execute("SELECT pg_reload_conf()")
        wait_for("max_slot_wal_keep_size reset", lambda: _setting(database) == "-1", timeout=10)


def _setting(database: Database) -> object:
    return database.execute("SELECT current_setting('max_slot_wal_keep_size')")[0][0]


@pytest.mark.usefixtures("small_slot_wal_limit")
def test_lost_slot_errs_every_table(make_pipeline: MakePipeline) -> None:
    pipeline = make_pipeline(DDL, TABLES)
    pipeline.database.execute("INSERT INTO items VALUES (1, 'one')")
    assert pipeline.capture().changes == 1

    # more than 64 MB of WAL past the slot (every switch starts a new 16 MB segment),
    # then checkpoints until the server invalidates the slot
    deadline = time.monotonic() + 60
    while not pipeline.slot_info().lost:
        assert time.monotonic() < deadline, f"slot never lost: {pipeline.slot_info()}"
        for _ in range(5):
            pipeline.database.execute("INSERT INTO unpublished SELECT g, 'x' FROM generate_series(1, 100) g")
            pipeline.database.execute("SELECT pg_switch_wal()")
        pipeline.database.execute("CHECKPOINT")
    assert pipeline.slot_info().wal_status == "lost"

    error = _capture_fails(pipeline)

    phase = _assert_all_errored(pipeline.state(), reason_has=[pipeline.slot, "'lost'"])
    assert str(error) == f"{phase.reason}; {phase.solution}"
    assert "max_slot_wal_keep_size" in phase.reason
    assert phase.solution.startswith("drop the slot (PgDropSlotOperator, or SELECT pg_drop_replication_slot(")
    # the lost slot cannot be read any more either: the server agrees
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState), pipeline.database.connect() as conn:
        conn.execute(
            "SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL,"
            " 'proto_version', '2', 'publication_names', 'pgsync_pub')",
            (pipeline.slot,),
        )
