"""PendingChangesEventTrigger on a real server: requests a run for changes, at max_wait, and not
again for the same changes until the slot moves; a failed poll never ends it."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from airflow.sdk import Asset, AssetWatcher
from airflow.sdk.module_loading import import_string
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_provider_pgsync.triggers.pending_changes_event import PendingChangesEventTrigger
from pgcluster import dev_password
from tests.triggers.conftest import FIRE_WITHIN, POLL, PUBLICATION, QUIET, Source, run_async


def _trigger(source: Source, on_changes: int, max_wait: float, **kwargs: Any) -> PendingChangesEventTrigger:
    settings: dict[str, Any] = {
        "slot_name": source.slot,
        "publication_name": PUBLICATION,
        "postgres_conn_id": source.conn_id,
        "on_changes": on_changes,
        "max_wait": max_wait,
        "poll_interval": POLL,
        **kwargs,
    }
    return PendingChangesEventTrigger(**settings)


class Watching:
    """A never-ending trigger's ``run()``, read one event at a time."""

    def __init__(self, trigger: PendingChangesEventTrigger) -> None:
        self.events: AsyncIterator[TriggerEvent] = trigger.run()
        self.next: asyncio.Task[TriggerEvent] | None = None

    def _task(self) -> asyncio.Task[TriggerEvent]:
        if self.next is None:
            self.next = asyncio.ensure_future(anext(self.events))
        return self.next

    async def event(self, timeout: float = FIRE_WITHIN) -> dict[str, Any]:
        event = await asyncio.wait_for(self._task(), timeout)
        self.next = None
        assert isinstance(event.payload, dict)
        json.dumps(event.payload)  # an asset event's extra: JSON only
        return event.payload

    async def assert_quiet(self, seconds: float = QUIET) -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._task()), seconds)

    async def stop(self) -> None:
        if self.next is not None:
            self.next.cancel()
            with pytest.raises(asyncio.CancelledError):
                await self.next
        await self.events.aclose()


def test_requests_a_run_for_changes_and_not_again_until_the_slot_moves(source: Source) -> None:
    async def scenario() -> list[dict[str, Any]]:
        watching = Watching(_trigger(source, 5, max_wait=600))
        try:
            await watching.assert_quiet()  # nothing pending
            await source.aexecute("INSERT INTO items SELECT generate_series(1, 4), 'x'")
            await watching.assert_quiet()  # 4 of 5
            await source.aexecute("DELETE FROM items WHERE id = 1")
            first = await watching.event()
            # the requested run has not captured yet: more changes must not request another
            await source.aexecute("INSERT INTO items SELECT generate_series(10, 30), 'y'")
            await watching.assert_quiet()
            # a capture consumes everything (as capture advances the slot), then 5 new changes
            await source.aexecute(
                "SELECT pg_replication_slot_advance(%s, pg_current_wal_flush_lsn())", (source.slot,)
            )
            await watching.assert_quiet()
            await source.aexecute("UPDATE items SET name = 'z' WHERE id BETWEEN 10 AND 14")
            second = await watching.event()
            return [first, second]
        finally:
            await watching.stop()

    first, second = run_async(scenario)

    assert (first["reason"], first["pending_changes"], first["busy"]) == ("changes", 5, None)
    assert (first["slot_name"], first["on_changes"], first["poll_error"]) == (source.slot, 5, None)
    assert first["confirmed_flush_lsn"] == str(source.creation_lsn)
    assert (second["reason"], second["pending_changes"], second["holding"]) == ("changes", 5, False)
    assert second["confirmed_flush_lsn"] != first["confirmed_flush_lsn"]


def test_requests_a_run_every_max_wait_when_idle_and_only_peeks(source: Source) -> None:
    wait = 1.0

    async def scenario() -> list[tuple[float, dict[str, Any]]]:
        started = time.monotonic()
        # a poll interval far beyond max_wait: the trigger must cut its sleep short
        watching = Watching(_trigger(source, 1000, max_wait=wait, poll_interval=600))
        try:
            events = []
            for _ in range(2):
                payload = await watching.event()
                events.append((time.monotonic() - started, payload))
            await source.aexecute("INSERT INTO items VALUES (1, 'one')")
            events.append((time.monotonic() - started, await watching.event()))
            return events
        finally:
            await watching.stop()

    events = run_async(scenario)

    assert [p["reason"] for _, p in events] == ["max_wait"] * 3
    assert [p["pending_changes"] for _, p in events] == [0, 0, 1]
    assert wait - 0.2 <= events[0][0] < wait + 10, events
    assert events[1][0] - events[0][0] >= wait - 0.2, events
    assert source.confirmed_flush_lsn() == source.creation_lsn, "the watcher must only peek"


def test_a_wal_backlog_requests_a_run_without_peeking_it(source: Source) -> None:
    source.execute("CREATE TABLE other (id int, pad text)")

    async def scenario() -> dict[str, Any]:
        watching = Watching(_trigger(source, 1000, max_wait=600, wal_bytes=2**20))
        try:
            await watching.assert_quiet()
            # about 5 MB of WAL of an unpublished table: nothing to count, much to decode
            await source.aexecute(
                "INSERT INTO other SELECT g, repeat('x', 500) FROM generate_series(1, 10000) g"
            )
            return await watching.event()
        finally:
            await watching.stop()

    payload = run_async(scenario)

    assert (payload["reason"], payload["pending_changes"]) == ("wal", None)
    assert payload["unconfirmed_bytes"] >= 2**20


def test_a_failing_poll_is_logged_and_max_wait_still_requests_runs(
    source: Source, capsys: pytest.CaptureFixture[str]
) -> None:
    trigger = _trigger(source, 1, max_wait=0.5, slot_name="no_such_slot")

    async def scenario() -> list[dict[str, Any]]:
        watching = Watching(trigger)
        try:
            return [await watching.event(), await watching.event()]
        finally:
            await watching.stop()

    events = run_async(scenario)

    for payload in events:
        assert (payload["reason"], payload["pending_changes"], payload["confirmed_flush_lsn"]) == (
            "max_wait",
            None,
            None,
        )
        assert "replication slot no_such_slot does not exist" in payload["poll_error"]
    # Airflow's structlog writes task and trigger logs to stdout
    warnings = [line for line in capsys.readouterr().out.splitlines() if "poll failed" in line]
    assert len(warnings) == 1, "the same error is logged once, not at every poll"
    assert "warning" in warnings[0] and "slot no_such_slot" in warnings[0] and "setup DAG" in warnings[0]


def test_an_unreachable_source_does_not_end_the_trigger(
    source: Source, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = source.database.cluster
    nowhere = cluster.url(source.database.name).replace(f":{cluster.port}/", ":1/")  # nothing listens
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_NOWHERE", nowhere)
    trigger = _trigger(source, 1, max_wait=0.5, postgres_conn_id="pgsync_nowhere")

    async def scenario() -> dict[str, Any]:
        watching = Watching(trigger)
        try:
            return await watching.event()
        finally:
            await watching.stop()

    payload = run_async(scenario)

    assert payload["reason"] == "max_wait"
    assert "SourceUnavailableError" in payload["poll_error"] and "pgsync_nowhere" in payload["poll_error"]
    assert dev_password() not in payload["poll_error"]


def test_a_source_that_never_answers_does_not_hold_max_wait_back(
    source: Source, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        cluster = source.database.cluster
        monkeypatch.setenv(
            "AIRFLOW_CONN_PGSYNC_SILENT",
            cluster.url(source.database.name).replace(f":{cluster.port}/", f":{port}/"),
        )
        trigger = _trigger(source, 1, max_wait=1.0, postgres_conn_id="pgsync_silent", poll_interval=0.5)

        async def scenario() -> list[tuple[float, dict[str, Any]]]:
            started = time.monotonic()
            watching = Watching(trigger)
            try:
                return [(time.monotonic() - started, await watching.event(timeout=10)) for _ in range(2)]
            finally:
                await watching.stop()

        events = run_async(scenario)

    assert [p["reason"] for _, p in events] == ["max_wait", "max_wait"]
    assert events[0][1]["poll_error"] == "no answer from the source within 1s"
    assert events[1][0] < 5, events


def test_serialized_kwargs_are_stable_names_and_numbers_only(source: Source) -> None:
    password = dev_password()
    assert password in os.environ[f"AIRFLOW_CONN_{source.conn_id.upper()}"]
    trigger = _trigger(source, 500, max_wait=60)

    classpath, kwargs = trigger.serialize()

    assert kwargs == {
        "slot_name": source.slot,
        "publication_name": PUBLICATION,
        "postgres_conn_id": source.conn_id,
        "on_changes": 500,
        "max_wait": 60.0,
        "poll_interval": POLL,
        "wal_bytes": 64 * 2**20,
    }
    assert password not in json.dumps(kwargs) and password not in repr(trigger)
    again = import_string(classpath)(**kwargs)
    assert again.serialize() == (classpath, kwargs)
    # Airflow identifies a watcher's trigger by this hash: the same config gives the same one
    assert BaseEventTrigger.hash(classpath, kwargs) == BaseEventTrigger.hash(*again.serialize())
    Asset(name="a", uri="pgsync://p/slot/s", watchers=[AssetWatcher(name="w", trigger=trigger)])


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"slot_name": "Bad-Name"}, "replication slot name"),
        ({"on_changes": 0}, "on_changes"),
        ({"max_wait": -1}, "max_wait"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"wal_bytes": 0}, "wal_bytes"),
    ],
)
def test_bad_arguments_are_config_errors(source: Source, kwargs: dict[str, Any], fragment: str) -> None:
    from airflow_provider_pgsync.errors import ConfigError

    with pytest.raises(ConfigError, match=fragment):
        _trigger(source, **{"on_changes": 1, "max_wait": 1.0, **kwargs})
