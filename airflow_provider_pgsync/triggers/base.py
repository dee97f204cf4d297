"""PollingTrigger: the loop every pgsync trigger runs (poll, decide, sleep) and its serialization."""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_pgsync.errors import ConfigError, PgSyncError
from airflow_provider_pgsync.triggers.checks import Payload, error_event


class PollingTrigger(BaseTrigger):
    """Poll until ``poll()`` returns a payload, then fire it as the one event of the trigger.

    A ``PgSyncError`` raised by ``poll()`` (a missing slot, an Errored table, an
    unreachable server ...) fires an error event instead (``triggers.checks.error_event``),
    which the sensor turns back into that error. Subclasses keep only names, numbers and
    connection ids as attributes: ``arguments()`` is what ``serialize()`` sends to the
    triggerer, so it must never hold a secret.

    :param poll_interval: seconds between two polls.
    """

    def __init__(self, *, poll_interval: float) -> None:
        super().__init__()
        if (
            isinstance(poll_interval, bool)
            or not isinstance(poll_interval, int | float)
            or poll_interval <= 0
        ):
            raise ConfigError(f"poll_interval must be a positive number of seconds, not {poll_interval!r}")
        self.poll_interval = float(poll_interval)

    @abstractmethod
    def arguments(self) -> dict[str, Any]:
        """The keyword arguments that re-create this trigger, except ``poll_interval``."""

    @abstractmethod
    async def poll(self) -> Payload | None:
        """Check once: the event payload when the trigger should fire, None to poll again."""

    def next_sleep(self) -> float:
        """Seconds to wait before the next poll."""
        return self.poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The classpath and keyword arguments of this trigger (names and numbers only)."""
        classpath = f"{type(self).__module__}.{type(self).__qualname__}"
        return classpath, {**self.arguments(), "poll_interval": self.poll_interval}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll until the condition holds or an error is found; yield exactly one event."""
        while True:
            try:
                payload = await self.poll()
            except PgSyncError as exc:
                self.log.error("%s", exc)
                yield TriggerEvent(error_event(exc))
                return
            if payload is not None:
                self.log.info("firing: %s", payload)
                yield TriggerEvent(payload)
                return
            await asyncio.sleep(self.next_sleep())
