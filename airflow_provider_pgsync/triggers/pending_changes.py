"""PendingChangesTrigger: fires when a slot holds at least N changes, or at a deadline."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.hooks.run_locks import PEEK_SENSOR_APP
from airflow_provider_pgsync.source.names import validate_publication_name, validate_slot_name
from airflow_provider_pgsync.triggers.base import PollingTrigger
from airflow_provider_pgsync.triggers.checks import Payload, check_positive, pending_event
from airflow_provider_pgsync.triggers.connection import connect
from airflow_provider_pgsync.triggers.probes import acount_pending


class PendingChangesTrigger(PollingTrigger):
    """Fire when slot ``slot_name`` has at least ``min_changes`` changes of ``publication_name`` pending.

    Each poll peeks the slot without consuming it, bounded to about ``4 * min_changes``
    messages, and counts Insert, Update, Delete and Truncate messages on the server.
    While a capture holds the slot's lock, or another session holds the slot itself
    (``replication slot ... is active for PID ...``), the poll counts nothing and the
    trigger polls again. At ``deadline`` (a timezone-aware datetime) it fires anyway.

    Event: ``status`` ``success``, ``fired`` ``changes`` | ``messages`` | ``max_wait``,
    ``slot_name``, ``min_changes``, ``message_limit``, ``pending_changes``, ``messages``
    and ``busy`` (who held the slot at the last poll, else None); or an error event
    (``triggers.checks.error_event``), e.g. a SlotError when the slot does not exist.

    :param postgres_conn_id: the Airflow connection of the source database.
    """

    def __init__(
        self,
        *,
        slot_name: str,
        publication_name: str,
        min_changes: int = 1,
        deadline: datetime | None = None,
        postgres_conn_id: str = "postgres_default",
        poll_interval: float = 60.0,
    ) -> None:
        super().__init__(poll_interval=poll_interval)
        if deadline is not None and deadline.tzinfo is None:
            raise ConfigError(f"deadline {deadline} must be timezone-aware (e.g. in UTC)")
        self.slot_name = validate_slot_name(slot_name)
        self.publication_name = validate_publication_name(publication_name)
        self.min_changes = check_positive(min_changes, "min_changes")
        self.deadline = deadline
        self.postgres_conn_id = postgres_conn_id

    def arguments(self) -> dict[str, Any]:
        return {
            "slot_name": self.slot_name,
            "publication_name": self.publication_name,
            "min_changes": self.min_changes,
            "deadline": self.deadline,
            "postgres_conn_id": self.postgres_conn_id,
        }

    def _seconds_left(self) -> float | None:
        if self.deadline is None:
            return None
        return (self.deadline - datetime.now(UTC)).total_seconds()

    async def poll(self) -> Payload | None:
        app = f"{PEEK_SENSOR_APP} {self.slot_name}"
        async with await connect(self.postgres_conn_id, application_name=app) as conn:
            count = await acount_pending(conn, self.slot_name, self.publication_name, self.min_changes)
        if count.busy:
            self.log.info("slot %s is busy, polling again: %s", self.slot_name, count.busy)
        left = self._seconds_left()
        return pending_event(
            count,
            slot_name=self.slot_name,
            min_changes=self.min_changes,
            deadline_passed=left is not None and left <= 0,
        )

    def next_sleep(self) -> float:
        """The poll interval, cut short so the trigger fires at the deadline."""
        left = self._seconds_left()
        return self.poll_interval if left is None else max(0.0, min(self.poll_interval, left))
