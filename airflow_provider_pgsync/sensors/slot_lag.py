"""PgSlotLagSensor: wait until a slot lags too far behind or its WAL is at risk (alerting, throttling)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context

from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.sensors.base import PgSyncSensor
from airflow_provider_pgsync.triggers.checks import (
    DEFAULT_WAL_STATUSES,
    Payload,
    check_lag_condition,
    check_lag_measure,
    lag_event,
)
from airflow_provider_pgsync.triggers.probes import read_slot_lag
from airflow_provider_pgsync.triggers.slot_lag import SlotLagTrigger


class PgSlotLagSensor(PgSyncSensor):
    """Succeed when the slot's lag reaches ``threshold_bytes`` or its ``wal_status`` is in ``wal_statuses``.

    ``lag_measure="retained"`` (default) measures current WAL position - ``restart_lsn``:
    the WAL kept on disk for the slot, which ``max_slot_wal_keep_size`` limits;
    ``"unconfirmed"`` measures current - ``confirmed_flush_lsn``: how far capture is
    behind. ``wal_statuses`` defaults to ``unreserved`` and ``lost`` (the slot is about to
    lose, or has lost, WAL it needs). The XCom is the event payload with every figure
    (see ``SlotLagTrigger``). A missing slot fails the task with a SlotError.

    :param slot_name: the slot (templated).
    :param threshold_bytes: the lag that makes the sensor succeed; None to watch the WAL status only.
    :param wal_statuses: WAL statuses that make the sensor succeed; empty to watch the lag only.
    :param lag_measure: ``retained`` or ``unconfirmed``.
    :param postgres_conn_id: the Airflow connection of the source database.
    """

    template_fields: Sequence[str] = ("slot_name", "postgres_conn_id")

    def __init__(
        self,
        *,
        slot_name: str,
        threshold_bytes: int | None = None,
        wal_statuses: Sequence[str] = DEFAULT_WAL_STATUSES,
        lag_measure: str = "retained",
        postgres_conn_id: str = "postgres_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.slot_name = slot_name
        self.wal_statuses = check_lag_condition(threshold_bytes, wal_statuses)
        self.threshold_bytes = threshold_bytes
        self.lag_measure = check_lag_measure(lag_measure)
        self.postgres_conn_id = postgres_conn_id

    def make_trigger(self, context: Context) -> SlotLagTrigger:
        return SlotLagTrigger(
            slot_name=self.slot_name,
            threshold_bytes=self.threshold_bytes,
            wal_statuses=self.wal_statuses,
            lag_measure=self.lag_measure,
            postgres_conn_id=self.postgres_conn_id,
            poll_interval=self.poke_interval,
        )

    def check(self, context: Context) -> Payload | None:
        hook = PgReplicationHook(postgres_conn_id=self.postgres_conn_id)
        with hook.connect() as conn:
            lag = read_slot_lag(conn, self.slot_name)
        return lag_event(
            lag,
            slot_name=self.slot_name,
            threshold_bytes=self.threshold_bytes,
            wal_statuses=self.wal_statuses,
            lag_measure=self.lag_measure,
        )
