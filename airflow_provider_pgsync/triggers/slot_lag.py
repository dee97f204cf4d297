"""SlotLagTrigger: fires when a slot retains too much WAL or its WAL status turns bad."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_pgsync.source.names import validate_slot_name
from airflow_provider_pgsync.triggers.base import PollingTrigger
from airflow_provider_pgsync.triggers.checks import (
    DEFAULT_WAL_STATUSES,
    Payload,
    check_lag_condition,
    check_lag_measure,
    lag_event,
)
from airflow_provider_pgsync.triggers.connection import connect
from airflow_provider_pgsync.triggers.probes import aread_slot_lag


class SlotLagTrigger(PollingTrigger):
    """Fire when the lag of slot ``slot_name`` is at least ``threshold_bytes``, or its WAL status is bad.

    The lag is measured from the server's current WAL position (the replay position on
    a standby): with ``lag_measure="retained"`` (the default) to the slot's
    ``restart_lsn`` — the WAL the server keeps on disk for the slot, which is what fills
    the disk and what ``max_slot_wal_keep_size`` limits, the same figure as
    ``PgReplicationHook.slot_info().retained_bytes`` — and with ``"unconfirmed"`` to its
    ``confirmed_flush_lsn``, how far capture is behind. ``wal_statuses`` (default
    ``unreserved`` and ``lost``) fire whatever the lag.

    Event: ``status`` ``success``, ``fired`` ``threshold`` | ``wal_status``, ``slot_name``,
    ``lag_measure``, ``lag_bytes``, ``threshold_bytes``, ``threshold_crossed``,
    ``wal_status``, ``wal_statuses``, ``active``, ``current_lsn``, ``restart_lsn``,
    ``confirmed_flush_lsn``, ``retained_bytes``, ``unconfirmed_bytes``, ``safe_wal_size``;
    or an error event (a SlotError when the slot does not exist).

    :param postgres_conn_id: the Airflow connection of the source database.
    """

    def __init__(
        self,
        *,
        slot_name: str,
        threshold_bytes: int | None = None,
        wal_statuses: Sequence[str] = DEFAULT_WAL_STATUSES,
        lag_measure: str = "retained",
        postgres_conn_id: str = "postgres_default",
        poll_interval: float = 60.0,
    ) -> None:
        super().__init__(poll_interval=poll_interval)
        self.slot_name = validate_slot_name(slot_name)
        self.wal_statuses = check_lag_condition(threshold_bytes, wal_statuses)
        self.threshold_bytes = threshold_bytes
        self.lag_measure = check_lag_measure(lag_measure)
        self.postgres_conn_id = postgres_conn_id

    def arguments(self) -> dict[str, Any]:
        return {
            "slot_name": self.slot_name,
            "threshold_bytes": self.threshold_bytes,
            "wal_statuses": list(self.wal_statuses),
            "lag_measure": self.lag_measure,
            "postgres_conn_id": self.postgres_conn_id,
        }

    async def poll(self) -> Payload | None:
        app = f"pgsync slot-lag sensor {self.slot_name}"
        async with await connect(self.postgres_conn_id, application_name=app) as conn:
            lag = await aread_slot_lag(conn, self.slot_name)
        return lag_event(
            lag,
            slot_name=self.slot_name,
            threshold_bytes=self.threshold_bytes,
            wal_statuses=self.wal_statuses,
            lag_measure=self.lag_measure,
        )
