"""What the pgsync sensors decide, from facts already fetched; pure, no I/O and no Airflow.

Each sensor's poke (sync) and its trigger (async) fetch the same facts and hand them to
one function here, which returns the event payload when the sensor should fire, None
to poll again, or raises a ``PgSyncError`` naming the object and the remedy. Payloads
are plain JSON values; every one has ``status`` (``success`` or ``error``) and, on
success, ``fired`` (why it fired).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from airflow_provider_pgsync.errors import ConfigError, PgSyncError, SlotError, StateError, TableErroredError
from airflow_provider_pgsync.state.followed import pipeline_name
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.phases import PHASES, Errored

Payload: TypeAlias = dict[str, Any]
"""An event payload: JSON values only."""

MESSAGES_PER_CHANGE = 4
"""The pending-changes peek reads at most about this many messages per wanted change.

A data change (I/U/D/T) comes with Begin and Commit messages and, the first time a
table is seen in a peek, a Relation message: at most four messages per change when
every transaction changes one row. More messages per change than that (Type messages
of user-defined column types, empty transactions of PostgreSQL 14) end the peek at its
message bound before ``min_changes`` changes are counted: the sensor fires then too
(``fired == "messages"``), since capture has at least that many messages to read.
"""

WAL_STATUSES = ("reserved", "extended", "unreserved", "lost")
"""The values of ``pg_replication_slots.wal_status`` (PostgreSQL 13+)."""

DEFAULT_WAL_STATUSES = ("lost", "unreserved")
"""The WAL statuses a slot-lag sensor fires on by default: the slot is about to lose WAL, or has."""

LagMeasure: TypeAlias = Literal["retained", "unconfirmed"]
LAG_MEASURES: tuple[LagMeasure, ...] = ("retained", "unconfirmed")

PHASE_ORDER = ("Init", "DataSync", "SyncDone", "Ready")
"""The main line of table phases: a table at a later one has passed the earlier ones."""


# ---- arguments ----------------------------------------------------------------------------


def check_positive(value: object, what: str) -> int:
    """``value`` if it is an integer >= 1; ConfigError naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{what} must be an integer of at least 1, not {value!r}")
    return value


def check_wal_statuses(statuses: Iterable[str]) -> tuple[str, ...]:
    """The statuses as a sorted tuple; ConfigError for one that PostgreSQL never reports."""
    if isinstance(statuses, str):
        statuses = [statuses]
    found = tuple(sorted(set(statuses)))
    unknown = [s for s in found if s not in WAL_STATUSES]
    if unknown:
        raise ConfigError(
            f"wal_statuses {unknown} are not slot WAL statuses; use some of {', '.join(WAL_STATUSES)}"
        )
    return found


def check_lag_condition(threshold_bytes: int | None, wal_statuses: Iterable[str]) -> tuple[str, ...]:
    """Validate the slot-lag conditions (at least one is needed); returns the statuses as a tuple."""
    if threshold_bytes is not None:
        check_positive(threshold_bytes, "threshold_bytes")
    statuses = check_wal_statuses(wal_statuses)
    if threshold_bytes is None and not statuses:
        raise ConfigError("give threshold_bytes, wal_statuses or both: with neither the sensor never fires")
    return statuses


def check_lag_measure(measure: str) -> LagMeasure:
    """``measure`` if it is one of LAG_MEASURES; ConfigError otherwise."""
    for known in LAG_MEASURES:
        if measure == known:
            return known
    raise ConfigError(f"lag_measure {measure!r} is unknown; use one of {', '.join(LAG_MEASURES)}")


def check_phase(phase: str) -> str:
    """``phase`` if it is a table phase name; ConfigError listing them otherwise."""
    if phase not in PHASES:
        raise ConfigError(f"phase {phase!r} is not a table phase; use one of {', '.join(PHASES)}")
    return phase


# ---- pending changes ----------------------------------------------------------------------


@dataclass(frozen=True)
class PendingCount:
    """What a bounded peek of the slot found, or who held the slot so it could not peek."""

    changes: int | None = None
    """Data changes (Insert, Update, Delete, Truncate messages) in the peek."""
    messages: int | None = None
    """Every message of the peek (Begin, Relation, Commit ... included)."""
    busy: str | None = None
    """Set (to who holds it) when the slot or capture's lock was held by another session."""


def message_limit(min_changes: int) -> int:
    """The message bound of the pending-changes peek for ``min_changes`` wanted changes."""
    return check_positive(min_changes, "min_changes") * MESSAGES_PER_CHANGE


def pending_event(
    count: PendingCount, *, slot_name: str, min_changes: int, deadline_passed: bool
) -> Payload | None:
    """Fire when ``min_changes`` changes are pending (or the peek hit its bound), or at the deadline.

    ``fired`` is ``changes``, ``messages`` or ``max_wait``; the deadline is checked last,
    so a run that finds enough changes at its deadline reports them.
    """
    limit = message_limit(min_changes)
    payload: Payload = {
        "status": "success",
        "slot_name": slot_name,
        "min_changes": min_changes,
        "message_limit": limit,
        "pending_changes": count.changes,
        "messages": count.messages,
        "busy": count.busy,
    }
    if count.busy is None and count.changes is not None and count.messages is not None:
        if count.changes >= min_changes:
            return {**payload, "fired": "changes"}
        if count.messages >= limit:
            return {**payload, "fired": "messages"}
    if deadline_passed:
        return {**payload, "fired": "max_wait"}
    return None


def slot_missing(slot_name: str) -> SlotError:
    """The error for a slot that does not exist, with the remedy."""
    return SlotError(
        f"replication slot {slot_name} does not exist: run the pipeline's setup DAG (PgCreateSlotOperator "
        f"slot_name={slot_name!r}) first; if it existed before, rebaseline the pipeline's tables, since "
        "changes made while it was missing are not captured"
    )


# ---- slot lag -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SlotLag:
    """One row of ``pg_replication_slots`` with the server's current WAL position, as text and bytes."""

    slot_name: str
    active: bool
    wal_status: str | None
    current_lsn: str
    restart_lsn: str | None
    confirmed_flush_lsn: str | None
    retained_bytes: int | None
    """current - restart_lsn: WAL the server keeps on disk for this slot."""
    unconfirmed_bytes: int | None
    """current - confirmed_flush_lsn: WAL written since capture last advanced the slot."""
    safe_wal_size: int | None
    """Bytes that can still be written before the slot is lost (NULL without max_slot_wal_keep_size)."""


def lag_event(
    lag: SlotLag | None,
    *,
    slot_name: str,
    threshold_bytes: int | None,
    wal_statuses: Iterable[str],
    lag_measure: LagMeasure,
) -> Payload | None:
    """Fire when the measured lag reaches ``threshold_bytes`` or the WAL status is one of ``wal_statuses``.

    ``fired`` is ``wal_status`` when the status matched (the more urgent news), else
    ``threshold``; the payload carries every figure of the slot either way.
    """
    if lag is None:
        raise slot_missing(slot_name)
    statuses = check_wal_statuses(wal_statuses)
    lag_bytes = lag.retained_bytes if lag_measure == "retained" else lag.unconfirmed_bytes
    crossed = threshold_bytes is not None and lag_bytes is not None and lag_bytes >= threshold_bytes
    matched = lag.wal_status in statuses
    if not (crossed or matched):
        return None
    return {
        "status": "success",
        "fired": "wal_status" if matched else "threshold",
        "slot_name": lag.slot_name,
        "lag_measure": lag_measure,
        "lag_bytes": lag_bytes,
        "threshold_bytes": threshold_bytes,
        "threshold_crossed": crossed,
        "wal_status": lag.wal_status,
        "wal_statuses": list(statuses),
        "active": lag.active,
        "current_lsn": lag.current_lsn,
        "restart_lsn": lag.restart_lsn,
        "confirmed_flush_lsn": lag.confirmed_flush_lsn,
        "retained_bytes": lag.retained_bytes,
        "unconfirmed_bytes": lag.unconfirmed_bytes,
        "safe_wal_size": lag.safe_wal_size,
    }


# ---- table phase --------------------------------------------------------------------------


def phase_reached(current: str, target: str) -> bool:
    """Whether a table in ``current`` is at ``target`` or past it on Init -> DataSync -> SyncDone -> Ready."""
    if current == target:
        return True
    if current in PHASE_ORDER and target in PHASE_ORDER:
        return PHASE_ORDER.index(current) >= PHASE_ORDER.index(target)
    return False


def phase_event(state: PipelineState, table: str, target: str, *, where: str) -> Payload | None:
    """Fire when ``table`` has reached ``target``; TableErroredError when it is Errored instead.

    ``where`` describes the state store for the error when the pipeline has no saved state.
    """
    check_phase(target)
    if state.version == 0:
        raise StateError(
            f"pipeline {state.pipeline!r} has no saved state in {where}: run the pipeline's setup DAG "
            "first, or check the pipeline name and the state backend of the sensor"
        )
    # a table renamed in the source may be named by its new name; StateError naming the
    # pipeline when the table is not part of it
    ts = state.table(pipeline_name(state, table))
    phase = ts.phase
    if isinstance(phase, Errored) and target != Errored.kind:
        raise TableErroredError(
            pipeline=state.pipeline,
            table=ts.key,
            reason=phase.reason,
            solution=phase.solution,
            retry=phase.retry,
            previous=phase.previous,
        )
    if not phase_reached(phase.kind, target):
        return None
    return {
        "status": "success",
        "fired": "phase",
        "pipeline": state.pipeline,
        "table": ts.key,
        "phase": phase.kind,
        "target_phase": target,
        "state_version": state.version,
    }


# ---- errors as events ---------------------------------------------------------------------


def error_event(error: PgSyncError) -> Payload:
    """The payload of an error event: the error's class, message, retryable flag and simple attributes."""
    details = {
        key: value
        for key, value in vars(error).items()
        if not key.startswith("_") and (value is None or isinstance(value, str | int | float | bool))
    }
    return {
        "status": "error",
        "error": type(error).__name__,
        "message": str(error),
        "retryable": error.retryable,
        "details": details,
    }


def classify_peek_error(
    sqlstate: str | None, message: str, *, slot_name: str, publication_name: str
) -> PendingCount | PgSyncError:
    """What a failed peek means: the slot is busy (poll again), or the error to raise.

    PostgreSQL reports a slot held by another process (``replication slot "s" is active
    for PID 123``) as object_in_use (55006), a missing slot or publication as
    undefined_object (42704).
    """
    text = message.strip()
    if sqlstate == "55006":
        return PendingCount(busy=text)
    if sqlstate == "42704" and "publication" in text:
        return ConfigError(
            f"publication {publication_name} of slot {slot_name}: {text}; run the pipeline's setup DAG "
            f"(PgCreatePublicationOperator publication_name={publication_name!r}) or fix the sensor's "
            "publication_name"
        )
    if sqlstate == "42704":
        return slot_missing(slot_name)
    return SlotError(
        f"cannot peek replication slot {slot_name}: {text}; check that it is a pgoutput slot of this "
        f"database (PgCreateSlotOperator creates one) and that publication {publication_name} exists"
    )
