"""PendingChangesEventTrigger: the AssetWatcher trigger of an event-driven cdc DAG.

Unlike the sensors' triggers it never ends: the triggerer runs it for as long as the DAG
schedules on its Asset, and every event it yields is an asset event that queues a cdc run.
``triggers.run_gate`` decides when; this module only polls and sleeps.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_provider_pgsync.hooks.run_locks import PEEK_WATCHER_APP
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import validate_publication_name, validate_slot_name
from airflow_provider_pgsync.triggers.checks import check_positive, slot_missing
from airflow_provider_pgsync.triggers.connection import connect
from airflow_provider_pgsync.triggers.probes import acount_pending, aread_slot_lag
from airflow_provider_pgsync.triggers.run_gate import (
    DEFAULT_WAL_BYTES,
    Observation,
    RunGate,
    check_on_changes,
    check_seconds,
)

DEFAULT_POLL_INTERVAL = 5.0
"""Seconds between two polls of the watcher (cut to ``max_wait`` when that is shorter)."""


class PendingChangesEventTrigger(BaseEventTrigger):
    """Request a cdc run when slot ``slot_name`` holds ``on_changes`` changes, or every ``max_wait``.

    Every ``poll_interval`` seconds it reads the slot's ``confirmed_flush_lsn`` and counts
    the pending changes of ``publication_name`` with the sensors' bounded peek (nothing is
    consumed; a peek that would meet a running capture is skipped). It yields an event
    (``reason`` ``changes`` | ``messages`` | ``wal`` | ``max_wait``, the counts, the slot
    position, the last poll error) when ``on_changes`` changes are pending, when the slot has
    ``wal_bytes`` of WAL past its confirmed position (without peeking it), or when ``max_wait``
    seconds passed since its last event, counted or not; after a changes event it waits for
    a capture to move the slot before it counts again (``triggers.run_gate``). A failed
    poll (an unreachable source, a missing slot) is logged as a warning and the trigger
    goes on: the run that ``max_wait`` still requests fails naming the cause and remedy. A
    poll is cut short at ``max_wait`` (at least 1 s), so a source that does not answer
    delays no request.

    Serialized arguments are names, numbers and the connection id, fixed by the pipeline
    config: Airflow identifies a watcher's trigger by them, so they must not change from
    one DAG parse to the next.

    :param postgres_conn_id: the Airflow connection of the source database.
    :param max_wait: seconds; :param poll_interval: seconds, at most ``max_wait`` in effect.
    """

    def __init__(
        self,
        *,
        slot_name: str,
        publication_name: str,
        postgres_conn_id: str,
        on_changes: int,
        max_wait: float,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        wal_bytes: int = DEFAULT_WAL_BYTES,
    ) -> None:
        super().__init__()
        self.slot_name = validate_slot_name(slot_name)
        self.publication_name = validate_publication_name(publication_name)
        self.postgres_conn_id = postgres_conn_id
        self.on_changes = check_on_changes(on_changes)
        self.max_wait = check_seconds(max_wait, "max_wait")
        self.poll_interval = check_seconds(poll_interval, "poll_interval")
        self.wal_bytes = check_positive(wal_bytes, "wal_bytes")

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The classpath and keyword arguments (names, numbers and the connection id only)."""
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "slot_name": self.slot_name,
            "publication_name": self.publication_name,
            "postgres_conn_id": self.postgres_conn_id,
            "on_changes": self.on_changes,
            "max_wait": self.max_wait,
            "poll_interval": self.poll_interval,
            "wal_bytes": self.wal_bytes,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll forever; yield an event each time a cdc run is due. Never raises for a poll."""
        gate = RunGate(
            self.slot_name,
            self.on_changes,
            self.max_wait,
            last_event=time.monotonic(),
            wal_bytes=self.wal_bytes,
        )
        last_error: str | None = None
        while True:
            # a poll that hangs (a black-holed host, a stuck query) must not hold max_wait back
            limit = max(1.0, gate.next_sleep(time.monotonic(), math.inf))
            try:
                seen = await asyncio.wait_for(self._observe(gate), limit)
            except TimeoutError:
                seen = Observation(error=f"no answer from the source within {limit:.0f}s")
            if seen.error is not None and seen.error != last_error:
                self.log.warning(
                    "pending-changes watcher of slot %s: poll failed: %s; a cdc run is still requested "
                    "every %gs, and its capture task fails with this error and its remedy until it is fixed",
                    self.slot_name,
                    seen.error,
                    self.max_wait,
                )
            last_error = seen.error
            payload = gate.decide(time.monotonic(), seen)
            if payload is not None:
                self.log.info("requesting a cdc run: %s", payload)
                yield TriggerEvent(payload)
            await asyncio.sleep(gate.next_sleep(time.monotonic(), self.poll_interval))

    async def _observe(self, gate: RunGate) -> Observation:
        """One poll: the slot's position, and the count unless the gate holds; errors as text."""
        confirmed: LSN | None = None
        wal: int | None = None
        try:
            app = f"{PEEK_WATCHER_APP} {self.slot_name}"
            async with await connect(self.postgres_conn_id, application_name=app) as conn:
                lag = await aread_slot_lag(conn, self.slot_name)
                if lag is None:
                    raise slot_missing(self.slot_name)
                if lag.confirmed_flush_lsn is not None:
                    confirmed = LSN.parse(lag.confirmed_flush_lsn)
                wal = lag.unconfirmed_bytes
                if not gate.counting(confirmed, wal):
                    return Observation(confirmed, unconfirmed_bytes=wal)
                count = await acount_pending(conn, self.slot_name, self.publication_name, self.on_changes)
        except Exception as exc:  # any failed poll is logged, and max_wait still fires
            return Observation(
                confirmed, error=f"{type(exc).__name__}: {str(exc).strip()}", unconfirmed_bytes=wal
            )
        return Observation(confirmed, count, unconfirmed_bytes=wal)
