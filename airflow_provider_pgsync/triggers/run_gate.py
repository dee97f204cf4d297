"""When the pending-changes watcher of an event-driven cdc DAG requests a run; pure, no I/O.

The watcher's trigger polls forever and every event it yields becomes an asset event that
queues one cdc run (queued events coalesce while a run is active). ``RunGate`` decides from
the facts of one poll and the clock: fire ``changes`` when ``on_changes`` changes are pending
(``messages`` when the peek hit its message bound first), ``wal`` when the slot has
``wal_bytes`` of WAL past its confirmed position (then it does not peek: a peek decodes all
of that WAL, e.g. of unpublished tables, without reaching its message bound, so it would cost
a capture's work at every poll, while one capture reads it once and advances the slot), or
``max_wait`` when that long has passed since the last event (or the start), whatever was
counted, so an idle pipeline still runs and advances its slot, and a broken one still gets
a run that fails naming the cause.

After a ``changes``, ``messages`` or ``wal`` event the gate *holds*: it neither peeks nor fires
for them until the slot's ``confirmed_flush_lsn`` has moved past where it was at that event,
i.e. until a capture consumed them; otherwise every poll before the run's capture would see
the same changes and request another run. ``max_wait`` still applies while holding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.triggers.checks import (
    MESSAGES_PER_CHANGE,
    Payload,
    PendingCount,
    check_positive,
    message_limit,
)

REASONS = ("changes", "messages", "wal", "max_wait")
"""Why the watcher fired: enough changes, a peek full up to its message bound, enough WAL past
the slot's confirmed position, or the wait."""
DEFAULT_WAL_BYTES = 64 * 2**20
MAX_ON_CHANGES = (2**31 - 1) // MESSAGES_PER_CHANGE
"""The most ``on_changes`` can be: the peek's message bound (4 per change) is a PostgreSQL int4."""


def check_on_changes(value: object) -> int:
    """``value`` if it is an integer from 1 to MAX_ON_CHANGES; ConfigError otherwise."""
    count = check_positive(value, "on_changes")
    if count > MAX_ON_CHANGES:
        raise ConfigError(f"on_changes must be at most {MAX_ON_CHANGES}, not {value!r}")
    return count


def check_seconds(value: object, what: str, *, least: float = 0.0) -> float:
    """``value`` as float seconds if it is a finite positive number, at least ``least``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (0 < value < math.inf)
        or value < least
    ):
        bound = f"at least {least:g}" if least > 0 else "positive"
        raise ConfigError(f"{what} must be a {bound} number of seconds, not {value!r}")
    return float(value)


@dataclass(frozen=True)
class Observation:
    """What one poll found: the slot's confirmed position and the WAL bytes written since, the
    count (None: not counted) and the error that cut the poll short, if any."""

    confirmed: LSN | None = None
    count: PendingCount | None = None
    error: str | None = None
    unconfirmed_bytes: int | None = None


@dataclass
class RunGate:
    """The watcher's state between polls; ``now`` is any monotonic clock in seconds."""

    slot_name: str
    on_changes: int
    max_wait: float
    last_event: float
    """Clock of the last event, or of the start."""
    wal_bytes: int = DEFAULT_WAL_BYTES
    held_at: LSN | None = None
    """The slot's confirmed position at the last changes event, while no capture moved it."""

    def __post_init__(self) -> None:
        check_on_changes(self.on_changes)
        check_seconds(self.max_wait, "max_wait")
        check_positive(self.wal_bytes, "wal_bytes")

    def counting(self, confirmed: LSN | None, unconfirmed_bytes: int | None = None) -> bool:
        """Whether to peek and count pending changes now: not while holding for a requested
        run, nor when the WAL to decode is ``wal_bytes`` or more (that fires ``wal``)."""
        self._release(confirmed)
        return self.held_at is None and not self._wal_full(unconfirmed_bytes)

    def _wal_full(self, unconfirmed_bytes: int | None) -> bool:
        return unconfirmed_bytes is not None and unconfirmed_bytes >= self.wal_bytes

    def _release(self, confirmed: LSN | None) -> None:
        if self.held_at is not None and confirmed is not None and confirmed > self.held_at:
            self.held_at = None

    def decide(self, now: float, seen: Observation) -> Payload | None:
        """The event payload when a run is due now (and record it), else None."""
        self._release(seen.confirmed)
        waited = now - self.last_event
        reason = self._reason(seen)
        if reason is None and waited >= self.max_wait:
            reason = "max_wait"
        if reason is None:
            return None
        holding = self.held_at is not None
        if reason != "max_wait" and seen.confirmed is not None:
            self.held_at = seen.confirmed
        self.last_event = now
        count = seen.count or PendingCount()
        return {
            "reason": reason,
            "slot_name": self.slot_name,
            "on_changes": self.on_changes,
            "max_wait_s": self.max_wait,
            "waited_s": round(waited, 3),
            "pending_changes": count.changes,
            "messages": count.messages,
            "busy": count.busy,
            "unconfirmed_bytes": seen.unconfirmed_bytes,
            "holding": holding,
            "confirmed_flush_lsn": None if seen.confirmed is None else str(seen.confirmed),
            "poll_error": seen.error,
        }

    def _reason(self, seen: Observation) -> str | None:
        count = seen.count
        if self.held_at is not None:
            return None
        if self._wal_full(seen.unconfirmed_bytes):
            return "wal"
        if count is None or count.busy is not None:
            return None
        if count.changes is not None and count.changes >= self.on_changes:
            return "changes"
        if count.messages is not None and count.messages >= message_limit(self.on_changes):
            return "messages"
        return None

    def next_sleep(self, now: float, poll_interval: float) -> float:
        """Seconds to the next poll: ``poll_interval``, cut short so ``max_wait`` fires on time."""
        return max(0.0, min(poll_interval, self.last_event + self.max_wait - now))
