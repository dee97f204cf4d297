"""Capture against a server whose database and role defaults are 1 s timeouts (statement, idle,
idle in transaction): a peek that takes longer than that still succeeds, exactly; and a run
whose lock session is terminated stops before its state write or its slot advance."""

from __future__ import annotations

import dataclasses

import psycopg
import pytest

from airflow_provider_pgsync.capture import run as run_module
from airflow_provider_pgsync.capture.run import capture
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.errors import LockLostError
from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from tests.capture.conftest import PUBLICATION, MakePipeline, Pipeline, wait_for
from tests.conftest import Database
from tests.hooks.low_timeouts import LowTimeouts, low_timeouts_fixture, session_of, unlimited  # noqa: F401

DDL = ["CREATE TABLE items (id int PRIMARY KEY, name text)"]


def _ids(pipeline: Pipeline) -> list[int]:
    """The ids of every change of items in the state's segments, in changelog order."""
    changelog = Changelog(pipeline.settings.changelog_uri)
    changes = changelog.read_changes("public.items", pipeline.state().segments)
    return [int(i) for _, batch in changes for i in batch.column("id").to_pylist()]


def _peek_is_cut_by_the_defaults(database: Database, conn_id: str, slot: str) -> bool:
    """Whether a plain peek of the whole slot, in a session with the role's and database's
    defaults, is cancelled by their statement_timeout (so it takes longer than 1 s)."""
    with PgReplicationHook(postgres_conn_id=conn_id).get_conn() as conn:
        try:
            conn.execute(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL,"
                " 'proto_version', '2', 'publication_names', %s)",
                (slot, PUBLICATION),
            )
        except psycopg.errors.QueryCanceled:
            return True
    return False


def test_a_peek_longer_than_the_statement_timeout_default_captures_everything(
    make_pipeline: MakePipeline, database: Database, low_timeouts: LowTimeouts
) -> None:
    pipeline = make_pipeline(DDL, ["items"])
    conn_id = low_timeouts.conn_id(database, "low_source")
    rows = 0
    # a backlog large enough that peeking it takes the server longer than the 1 s default
    # (measured, not assumed: a plain peek with the defaults must be cancelled)
    for size in (1_500_000, 3_000_000, 6_000_000):
        with unlimited(database) as conn:
            conn.execute(
                "INSERT INTO items SELECT g, 'name ' || g FROM generate_series(%s::int + 1, %s::int) g",
                (rows, size),
            )
        rows = size
        if _peek_is_cut_by_the_defaults(database, conn_id, pipeline.slot):
            break
    else:
        pytest.fail(f"a peek of {rows:,} changes still ran within 1 s: the precondition does not hold")

    hook = PgReplicationHook(postgres_conn_id=conn_id)
    low = dataclasses.replace(
        pipeline, hook=hook, store=PostgresStateStore(hook), settings=dataclasses.replace(
            pipeline.settings, max_changes=50_000_000
        )
    )
    result = capture(low.hook, low.store, low.settings, holder="pgsync capture low-timeouts")

    assert (result.changes, result.idle) == (rows, True)
    assert low.slot_info().confirmed_flush_lsn == result.upto_lsn == result.advanced_to
    ids = _ids(low)
    assert ids == list(range(1, rows + 1))  # each row once, in commit order


@pytest.mark.parametrize("point", ["before_state_write", "after_state_write"])
def test_a_lost_capture_lock_neither_writes_state_nor_advances_after_it(
    make_pipeline: MakePipeline, database: Database, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    pipeline = make_pipeline(DDL, ["items"])
    database.execute("INSERT INTO items SELECT g, 'name ' || g FROM generate_series(1, 1000) g")
    state_before, slot_before = pipeline.state(), pipeline.slot_info().confirmed_flush_lsn
    holder = "pgsync capture lost-lock"
    real = run_module.fail_point
    terminated: list[int] = []

    def terminate_the_lock_session(name: str) -> None:
        if name == point:
            (pid,) = [row[0] for row in session_of(database, "application_name = %s", holder)]
            database.execute("SELECT pg_terminate_backend(%s)", (pid,))
            wait_for("the lock session to end", lambda: not session_of(database, "pid = %s", pid))
            terminated.append(int(pid))  # type: ignore[call-overload]
        real(name)

    monkeypatch.setattr(run_module, "fail_point", terminate_the_lock_session)
    with pytest.raises(LockLostError, match=rf"capture of slot {pipeline.slot} lost its lock \(its session"):
        capture(pipeline.hook, pipeline.store, pipeline.settings, holder=holder)
    assert terminated, f"capture did not reach {point}"

    assert pipeline.slot_info().confirmed_flush_lsn == slot_before  # never advanced
    if point == "before_state_write":
        assert pipeline.state() == state_before  # nothing written
    else:
        assert pipeline.state().version == state_before.version + 1  # written before the loss

    monkeypatch.setattr(run_module, "fail_point", real)
    result = pipeline.capture()  # the next run: nothing lost, nothing twice
    assert result.idle and pipeline.slot_info().confirmed_flush_lsn == result.advanced_to
    assert _ids(pipeline) == list(range(1, 1001))
