"""PgPendingChangesSensor: wait until the pipeline's slot holds enough changes for a capture run."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import Context

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.run_locks import PEEK_SENSOR_APP
from airflow_provider_pgsync.sensors.base import PgSyncSensor
from airflow_provider_pgsync.triggers.checks import Payload, check_positive, pending_event
from airflow_provider_pgsync.triggers.pending_changes import PendingChangesTrigger
from airflow_provider_pgsync.triggers.probes import count_pending


def _seconds(value: timedelta | float | None, what: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise ConfigError(f"{what} must be a timedelta or a number of seconds >= 0, not {value!r}")
    return float(seconds)


class PgPendingChangesSensor(PgSyncSensor):
    """Succeed when slot ``slot_name`` holds ``min_changes`` changes, or after ``max_wait_for_changes``.

    Counting peeks the slot without consuming it (at most about ``4 * min_changes``
    messages; see ``PendingChangesTrigger``); while a capture or another session holds
    the slot the sensor waits. After ``max_wait_for_changes`` it succeeds whatever the
    count (``fired == "max_wait"``), so a scheduled capture runs anyway; the sensor's
    ``timeout`` still fails it if that comes first. The XCom is the event payload.
    A missing slot fails the task with a SlotError naming the slot and the remedy.

    :param slot_name: the pipeline's slot (templated).
    :param publication_name: its publication (templated).
    :param min_changes: the number of data changes (inserts, updates, deletes, truncates) to wait for.
    :param max_wait_for_changes: succeed after this long (timedelta or seconds) even with fewer changes.
    :param postgres_conn_id: the Airflow connection of the source database.
    """

    template_fields: Sequence[str] = ("slot_name", "publication_name", "postgres_conn_id")

    def __init__(
        self,
        *,
        slot_name: str,
        publication_name: str,
        min_changes: int = 1,
        max_wait_for_changes: timedelta | float | None = None,
        postgres_conn_id: str = "postgres_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.slot_name = slot_name
        self.publication_name = publication_name
        self.min_changes = check_positive(min_changes, "min_changes")
        self.max_wait_seconds = _seconds(max_wait_for_changes, "max_wait_for_changes")
        self.postgres_conn_id = postgres_conn_id
        self._deadline: datetime | None = None

    def _deadline_from(self, start: datetime) -> datetime | None:
        return None if self.max_wait_seconds is None else start + timedelta(seconds=self.max_wait_seconds)

    def make_trigger(self, context: Context) -> PendingChangesTrigger:
        return PendingChangesTrigger(
            slot_name=self.slot_name,
            publication_name=self.publication_name,
            min_changes=self.min_changes,
            deadline=self._deadline_from(datetime.now(UTC)),
            postgres_conn_id=self.postgres_conn_id,
            poll_interval=self.poke_interval,
        )

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            # the wait starts at the first poke of this try, also across reschedules
            first = context["ti"].get_first_reschedule_date(context) if self.reschedule else None
            self._deadline = self._deadline_from(first or datetime.now(UTC))
        return super().execute(context)

    def check(self, context: Context) -> Payload | None:
        hook = PgReplicationHook(postgres_conn_id=self.postgres_conn_id)
        with hook.connect() as conn:
            app = f"{PEEK_SENSOR_APP} {self.slot_name}"
            conn.execute("SELECT set_config('application_name', %s, false)", (app[:63],))
            count = count_pending(conn, self.slot_name, self.publication_name, self.min_changes)
        if count.busy:
            self.log.info("slot %s is busy, poking again: %s", self.slot_name, count.busy)
        return pending_event(
            count,
            slot_name=self.slot_name,
            min_changes=self.min_changes,
            deadline_passed=self._deadline is not None and datetime.now(UTC) >= self._deadline,
        )
