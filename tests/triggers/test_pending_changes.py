"""PendingChangesTrigger on a real server: waits, fires on changes, at its deadline, around a busy slot."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.triggers.checks import PendingCount
from airflow_provider_pgsync.triggers.pending_changes import PendingChangesTrigger
from airflow_provider_pgsync.triggers.probes import count_pending
from tests.triggers.conftest import POLL, PUBLICATION, Running, Source, first_event, held_slot, run_async


def _trigger(
    source: Source, min_changes: int, *, deadline: datetime | None = None, poll_interval: float = POLL
) -> PendingChangesTrigger:
    return PendingChangesTrigger(
        slot_name=source.slot,
        publication_name=PUBLICATION,
        min_changes=min_changes,
        deadline=deadline,
        postgres_conn_id=source.conn_id,
        poll_interval=poll_interval,
    )


def test_waits_for_enough_changes_then_fires_without_consuming_the_slot(source: Source) -> None:
    async def scenario() -> dict[str, object]:
        running = Running(_trigger(source, 5))
        await running.assert_quiet()  # nothing pending
        await source.aexecute("INSERT INTO items VALUES (1, 'one'), (2, 'two')")
        await running.assert_quiet()  # 2 of 5
        await source.aexecute("UPDATE items SET name = 'uno' WHERE id = 1")
        await source.aexecute("DELETE FROM items WHERE id = 2")
        await running.assert_quiet()  # 4 of 5
        await source.aexecute("TRUNCATE items")
        return await running.event()

    payload = run_async(scenario)

    assert payload["status"] == "success"
    assert (payload["fired"], payload["pending_changes"], payload["busy"]) == ("changes", 5, None)
    assert (payload["slot_name"], payload["min_changes"], payload["message_limit"]) == (source.slot, 5, 20)
    # Begin, Relation and Commit messages are not changes
    assert isinstance(payload["messages"], int) and payload["messages"] > 5
    assert source.confirmed_flush_lsn() == source.creation_lsn, "the sensor must only peek"


def test_changes_to_unpublished_tables_are_not_counted(source: Source) -> None:
    source.execute("CREATE TABLE other (id int)")

    async def scenario() -> dict[str, object]:
        running = Running(_trigger(source, 1))
        await source.aexecute("INSERT INTO other SELECT generate_series(1, 50)")
        await running.assert_quiet()
        await source.aexecute("INSERT INTO items VALUES (1, 'one')")
        return await running.event()

    assert run_async(scenario)["pending_changes"] == 1


def test_fires_at_its_deadline_with_too_few_changes(source: Source) -> None:
    source.execute("INSERT INTO items VALUES (1, 'one')")
    wait = 1.5
    # a poll interval far beyond the deadline: the trigger must cut its sleep short
    trigger = _trigger(source, 1000, deadline=datetime.now(UTC) + timedelta(seconds=wait), poll_interval=600)
    started = time.monotonic()

    payload = first_event(trigger)

    elapsed = time.monotonic() - started
    assert (payload["status"], payload["fired"], payload["pending_changes"]) == ("success", "max_wait", 1)
    assert wait - 0.2 <= elapsed < wait + 10, elapsed


def test_a_peek_cut_by_its_message_bound_fires(source: Source) -> None:
    # five enum columns: each first change of the table comes with five Type messages, so
    # one change fills the bound of 2 * 4 messages
    for i in range(5):
        source.execute(f"CREATE TYPE e{i} AS ENUM ('a', 'b')")
    source.execute("CREATE TABLE wide (id int PRIMARY KEY, c0 e0, c1 e1, c2 e2, c3 e3, c4 e4)")
    source.hook.ensure_publication(PUBLICATION, ["items", "wide"])
    source.execute("INSERT INTO wide VALUES (1, 'a', 'a', 'a', 'a', 'a')")

    payload = first_event(_trigger(source, 2))

    assert (payload["fired"], payload["pending_changes"], payload["message_limit"]) == ("messages", 1, 8)
    assert isinstance(payload["messages"], int) and payload["messages"] >= 8


def test_a_slot_held_by_another_process_is_polled_again(source: Source) -> None:
    async def scenario() -> dict[str, object]:
        with held_slot(source) as walsender:
            await source.aexecute("INSERT INTO items SELECT generate_series(1, 10), 'x'")
            # the error the server gives this sensor's peek meanwhile: busy, not a failure
            with source.hook.connect() as conn:
                count = count_pending(conn, source.slot, PUBLICATION, 1)
            assert count == PendingCount(
                busy=f'replication slot "{source.slot}" is active for PID {walsender}'
            )
            running = Running(_trigger(source, 1))
            await running.assert_quiet()
        return await running.event()

    payload = run_async(scenario)

    assert (payload["fired"], payload["pending_changes"], payload["busy"]) == ("changes", 10, None)


def test_a_running_capture_is_waited_for(source: Source) -> None:
    source.execute("INSERT INTO items VALUES (1, 'one')")

    async def scenario() -> dict[str, object]:
        with source.hook.capture_lock(source.slot, "pgsync capture test-run"):
            running = Running(_trigger(source, 1))
            await running.assert_quiet()
        return await running.event()

    assert run_async(scenario)["fired"] == "changes"


def test_a_busy_slot_at_the_deadline_fires_max_wait(source: Source) -> None:
    with held_slot(source):
        trigger = _trigger(source, 1, deadline=datetime.now(UTC) + timedelta(seconds=0.5))
        payload = first_event(trigger)

    assert (payload["fired"], payload["pending_changes"]) == ("max_wait", None)
    assert f'replication slot "{source.slot}" is active for PID' in str(payload["busy"])


def test_a_missing_slot_is_an_error_event(source: Source) -> None:
    trigger = PendingChangesTrigger(
        slot_name="no_such_slot",
        publication_name=PUBLICATION,
        postgres_conn_id=source.conn_id,
        poll_interval=POLL,
    )

    payload = first_event(trigger)

    assert (payload["status"], payload["error"], payload["retryable"]) == ("error", "SlotError", False)
    assert "replication slot no_such_slot does not exist" in payload["message"]
    assert "setup DAG" in payload["message"]


def test_a_missing_publication_is_an_error_event(source: Source) -> None:
    source.execute("INSERT INTO items VALUES (1, 'one')")  # the publication is only looked up for a change
    trigger = PendingChangesTrigger(
        slot_name=source.slot,
        publication_name="no_such_pub",
        postgres_conn_id=source.conn_id,
        poll_interval=POLL,
    )

    payload = first_event(trigger)

    assert (payload["status"], payload["error"]) == ("error", "ConfigError")
    assert 'publication "no_such_pub" does not exist' in payload["message"]
    assert "PgCreatePublicationOperator" in payload["message"]


def test_an_unreachable_server_is_a_retryable_error_event(
    source: Source, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = source.database.cluster
    nowhere = cluster.url(source.database.name).replace(f":{cluster.port}/", ":1/")  # nothing listens there
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_NOWHERE", nowhere)
    trigger = PendingChangesTrigger(
        slot_name=source.slot,
        publication_name=PUBLICATION,
        postgres_conn_id="pgsync_nowhere",
        poll_interval=POLL,
    )

    payload = first_event(trigger)

    assert (payload["error"], payload["retryable"]) == ("SourceUnavailableError", True)
    assert "pgsync_nowhere" in payload["message"]


def test_the_sync_probe_counts_like_the_trigger(source: Source) -> None:
    source.execute("INSERT INTO items SELECT generate_series(1, 7), 'x'")
    hook = PgReplicationHook(postgres_conn_id=source.conn_id)
    with hook.connect() as conn:
        count = count_pending(conn, source.slot, PUBLICATION, 3)
    payload = first_event(_trigger(source, 3))
    assert (count.changes, count.messages) == (payload["pending_changes"], payload["messages"]) == (7, 10)
