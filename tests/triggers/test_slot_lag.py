"""SlotLagTrigger on a real server: a lag threshold, a WAL status, a missing slot."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.triggers.slot_lag import SlotLagTrigger
from tests.capture.conftest import wait_for
from tests.triggers.conftest import POLL, Running, Source, first_event, run_async


def _retained(source: Source) -> int:
    info = source.hook.slot_info(source.slot)
    assert info is not None and info.retained_bytes is not None
    return info.retained_bytes


def test_fires_when_the_retained_wal_crosses_the_threshold(source: Source) -> None:
    threshold = _retained(source) + 256 * 1024
    trigger = SlotLagTrigger(
        slot_name=source.slot, threshold_bytes=threshold, postgres_conn_id=source.conn_id, poll_interval=POLL
    )

    async def scenario() -> dict[str, object]:
        running = Running(trigger)
        await running.assert_quiet()
        # WAL of a table outside the publication counts: the slot retains all of it
        await source.aexecute(
            "CREATE TABLE filler AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 5000) g"
        )
        return await running.event()

    payload = run_async(scenario)

    [(restart, confirmed, status)] = source.execute(
        "SELECT restart_lsn::text, confirmed_flush_lsn::text, wal_status FROM pg_replication_slots"
        " WHERE slot_name = %s",
        (source.slot,),
    )
    assert (payload["status"], payload["fired"], payload["threshold_crossed"]) == (
        "success",
        "threshold",
        True,
    )
    assert (payload["slot_name"], payload["lag_measure"], payload["threshold_bytes"]) == (
        source.slot,
        "retained",
        threshold,
    )
    assert (payload["restart_lsn"], payload["confirmed_flush_lsn"], payload["wal_status"]) == (
        restart,
        confirmed,
        status,
    )
    assert status == "reserved" and payload["active"] is False
    current = LSN.parse(str(payload["current_lsn"]))
    assert payload["lag_bytes"] == payload["retained_bytes"] == int(current) - int(LSN.parse(str(restart)))
    assert payload["unconfirmed_bytes"] == int(current) - int(LSN.parse(str(confirmed)))
    assert isinstance(payload["lag_bytes"], int) and payload["lag_bytes"] >= threshold
    assert payload["safe_wal_size"] is None  # max_slot_wal_keep_size is unlimited


@pytest.fixture
def small_slot_wal_limit(source: Source) -> Iterator[None]:
    """``max_slot_wal_keep_size = 1MB`` on the test cluster for one test (reset afterwards)."""

    def set_limit(value: str | None) -> None:
        with psycopg.connect(source.database.conninfo, autocommit=True) as conn:
            if value is None:
                conn.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
            else:
                conn.execute(
                    sql.SQL("ALTER SYSTEM SET max_slot_wal_keep_size = {}").format(sql.Literal(value))
                )
            conn.execute("SELECT pg_reload_conf()")

        def applied() -> bool:
            [(shown,)] = source.execute("SHOW max_slot_wal_keep_size")
            return shown == (value or "-1")

        wait_for(f"max_slot_wal_keep_size = {value or 'default'}", applied)

    set_limit("1MB")
    try:
        yield
    finally:
        set_limit(None)


@pytest.mark.usefixtures("small_slot_wal_limit")
def test_fires_when_the_slot_is_about_to_lose_wal(source: Source) -> None:
    trigger = SlotLagTrigger(slot_name=source.slot, postgres_conn_id=source.conn_id, poll_interval=POLL)

    async def scenario() -> dict[str, object]:
        running = Running(trigger)
        await running.assert_quiet()  # reserved: the slot's WAL is still in the current segment
        # a new WAL segment: with 1MB allowed, the slot's segment is no longer reserved
        await source.aexecute("INSERT INTO items VALUES (1, 'one')")
        await source.aexecute("SELECT pg_switch_wal()")
        return await running.event()

    payload = run_async(scenario)

    assert (payload["status"], payload["fired"], payload["threshold_crossed"]) == (
        "success",
        "wal_status",
        False,
    )
    assert payload["wal_status"] in ("unreserved", "lost")
    assert (payload["wal_statuses"], payload["threshold_bytes"]) == (["lost", "unreserved"], None)
    [(status,)] = source.execute(
        "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (source.slot,)
    )
    assert status in ("unreserved", "lost")


def test_a_missing_slot_is_an_error_event(source: Source) -> None:
    trigger = SlotLagTrigger(
        slot_name="no_such_slot", threshold_bytes=1, postgres_conn_id=source.conn_id, poll_interval=POLL
    )

    payload = first_event(trigger)

    assert (payload["status"], payload["error"]) == ("error", "SlotError")
    assert "replication slot no_such_slot does not exist" in payload["message"]
