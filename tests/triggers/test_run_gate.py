"""RunGate with a fake clock: when the event-driven cdc watcher requests a run."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.triggers.checks import PendingCount
from airflow_provider_pgsync.triggers.run_gate import Observation, RunGate

P0, P1 = LSN(0x1000), LSN(0x2000)


def _gate(on_changes: int = 10, max_wait: float = 60.0) -> RunGate:
    return RunGate("s", on_changes, max_wait, last_event=100.0)


def _seen(changes: int | None, confirmed: LSN | None = P0, *, messages: int | None = None) -> Observation:
    count = None if changes is None else PendingCount(changes, changes * 3 if messages is None else messages)
    return Observation(confirmed, count)


def _reason(payload: dict[str, Any] | None) -> str | None:
    return None if payload is None else payload["reason"]


def test_fires_for_changes_once_enough_are_pending() -> None:
    gate = _gate()
    assert gate.decide(101.0, _seen(9)) is None
    payload = gate.decide(102.0, _seen(10))
    assert payload == {
        "reason": "changes",
        "slot_name": "s",
        "on_changes": 10,
        "max_wait_s": 60.0,
        "waited_s": 2.0,
        "pending_changes": 10,
        "messages": 30,
        "busy": None,
        "unconfirmed_bytes": None,
        "holding": False,
        "confirmed_flush_lsn": "0/1000",
        "poll_error": None,
    }


def test_after_a_changes_event_it_holds_until_the_slot_moves() -> None:
    gate = _gate()
    assert _reason(gate.decide(101.0, _seen(10))) == "changes"
    # the run has not captured yet: the same (and more) changes must not request another run
    assert not gate.counting(P0)
    assert gate.decide(102.0, _seen(50)) is None
    assert gate.decide(103.0, Observation(P0)) is None
    # capture advanced the slot: counting resumes, and new changes request the next run
    assert gate.counting(P1)
    assert gate.decide(104.0, _seen(3, P1)) is None
    assert _reason(gate.decide(105.0, _seen(12, P1))) == "changes"
    assert gate.held_at == P1


def test_max_wait_fires_while_holding_and_keeps_holding() -> None:
    gate = _gate(max_wait=60)
    gate.decide(101.0, _seen(10))
    payload = gate.decide(161.0, Observation(P0))  # the requested run never moved the slot
    assert payload is not None
    assert (payload["reason"], payload["holding"], payload["pending_changes"]) == ("max_wait", True, None)
    assert not gate.counting(P0)
    assert gate.decide(162.0, _seen(99)) is None


def test_max_wait_fires_when_idle_and_counts_from_the_last_event() -> None:
    gate = _gate(max_wait=60)
    assert gate.decide(159.9, _seen(0)) is None
    payload = gate.decide(160.0, _seen(0))
    assert payload is not None
    assert (payload["reason"], payload["pending_changes"], payload["waited_s"]) == ("max_wait", 0, 60.0)
    assert gate.counting(P0), "a max_wait event with too few changes does not hold"
    assert gate.decide(219.0, _seen(0)) is None
    assert _reason(gate.decide(220.0, _seen(0))) == "max_wait"


def test_a_changes_event_restarts_the_max_wait() -> None:
    gate = _gate(max_wait=60)
    gate.decide(150.0, _seen(10))
    assert gate.decide(170.0, _seen(0, P1)) is None  # 70 s after the start, 20 after the event
    assert _reason(gate.decide(210.0, _seen(0, P1))) == "max_wait"


def test_max_wait_fires_without_a_count_and_reports_the_poll_error() -> None:
    gate = _gate(max_wait=5)
    failed = Observation(None, None, "SlotError: replication slot s does not exist")
    assert gate.decide(104.0, failed) is None
    payload = gate.decide(105.0, failed)
    assert payload is not None
    assert (payload["reason"], payload["confirmed_flush_lsn"]) == ("max_wait", None)
    assert payload["poll_error"] == "SlotError: replication slot s does not exist"


def test_a_busy_slot_fires_only_at_max_wait() -> None:
    gate = _gate(max_wait=5)
    busy = Observation(P0, PendingCount(busy="a capture of slot s holds its advisory lock"))
    assert gate.decide(101.0, busy) is None
    payload = gate.decide(105.0, busy)
    assert payload is not None and payload["reason"] == "max_wait"
    assert payload["busy"] == "a capture of slot s holds its advisory lock"


def test_a_peek_full_to_its_message_bound_fires_messages() -> None:
    gate = _gate(on_changes=10)
    assert gate.decide(101.0, _seen(2, messages=39)) is None
    assert _reason(gate.decide(102.0, _seen(2, messages=40))) == "messages"
    assert gate.held_at == P0


def test_a_wal_backlog_fires_wal_without_a_count_and_holds() -> None:
    gate = RunGate("s", 10, 60.0, last_event=100.0, wal_bytes=1000)
    assert gate.counting(P0, 999)
    assert not gate.counting(P0, 1000), "too much WAL to peek at every poll"
    payload = gate.decide(101.0, Observation(P0, unconfirmed_bytes=1000))
    assert payload is not None
    assert (payload["reason"], payload["unconfirmed_bytes"], payload["pending_changes"]) == (
        "wal",
        1000,
        None,
    )
    assert gate.decide(102.0, Observation(P0, unconfirmed_bytes=5000)) is None  # holds until the slot moves
    assert _reason(gate.decide(103.0, Observation(P1, unconfirmed_bytes=5000))) == "wal"


def test_an_unknown_position_does_not_release_the_hold() -> None:
    gate = _gate()
    gate.decide(101.0, _seen(10))
    assert not gate.counting(None)
    assert not gate.counting(P0)


def test_next_sleep_is_cut_to_max_wait() -> None:
    gate = _gate(max_wait=60)
    assert gate.next_sleep(101.0, 5.0) == 5.0
    assert gate.next_sleep(158.0, 5.0) == pytest.approx(2.0)
    assert gate.next_sleep(170.0, 5.0) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"on_changes": 0}, "on_changes must be an integer of at least 1"),
        ({"on_changes": True}, "on_changes must be an integer"),
        ({"on_changes": 2**29}, "on_changes must be at most 536870911"),  # 4 messages a change: > int4
        ({"max_wait": 0}, "max_wait must be a positive number of seconds"),
        ({"max_wait": float("nan")}, "max_wait"),
        ({"max_wait": float("inf")}, "max_wait"),
        ({"wal_bytes": 0}, "wal_bytes must be an integer of at least 1"),
    ],
)
def test_bad_settings_are_config_errors(kwargs: dict[str, Any], fragment: str) -> None:
    settings: dict[str, Any] = {"on_changes": 10, "max_wait": 60.0, **kwargs}
    with pytest.raises(ConfigError, match=fragment):
        RunGate("s", last_event=0.0, **settings)
