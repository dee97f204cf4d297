"""The error hierarchy of pgsync.

Every error says what went wrong with which object and how to fix it. ``retryable``
tells an orchestrator whether running the same task again may succeed without a
human changing anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class PgSyncError(Exception):
    """Base class of every error pgsync raises on purpose."""

    retryable: bool = False

    def __reduce__(self) -> tuple[object, ...]:
        # subclasses take their own constructor arguments: rebuild from args and attributes,
        # so errors travel between processes (capture's decode worker) unchanged
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[PgSyncError], args: tuple[object, ...], attributes: dict[str, object]) -> PgSyncError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(attributes)
    return error


class ConfigError(PgSyncError):
    """A name, option or argument given by the user is not acceptable."""


class DecodeError(PgSyncError):
    """A pgoutput payload is malformed: names the message tag and the byte offset."""

    def __init__(self, reason: str, *, tag: str | None, offset: int) -> None:
        self.reason = reason
        self.tag = tag
        self.offset = offset
        where = f"message {tag!r}" if tag is not None else "message"
        super().__init__(f"cannot decode pgoutput {where} at byte {offset}: {reason}")


@dataclass(frozen=True)
class Problem:
    """One reason the source is not fit for replication, with the fix."""

    subject: str
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.problem}\n    fix: {self.fix}"


class PreflightError(PgSyncError):
    """The source database is not fit for logical replication; lists every problem found."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        lines = [f"preflight found {len(self.problems)} problem(s):"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))


class SlotError(PgSyncError):
    """A replication slot is missing, lost, in use or otherwise unusable."""


class CaptureBusyError(PgSyncError):
    """Another capture of the same slot is running; this one did nothing."""

    retryable = True

    def __init__(self, slot_name: str, holder: str) -> None:
        self.slot_name = slot_name
        self.holder = holder
        super().__init__(
            f"capture of slot {slot_name} is already running in {holder}; this run did nothing: "
            "wait for it to finish (the cdc DAG runs one capture at a time)"
        )


class ApplyBusyError(PgSyncError):
    """Another apply of the same pipeline is running; this one did nothing."""

    retryable = True

    def __init__(self, pipeline: str, holder: str) -> None:
        self.pipeline = pipeline
        self.holder = holder
        super().__init__(
            f"apply of pipeline {pipeline!r} is already running in {holder}; this run did nothing: "
            "wait for it to finish (the cdc DAG runs one apply at a time)"
        )


class LockLostError(PgSyncError):
    """A run's advisory lock went with its session (terminated, or the connection dropped);
    the run stopped before its next state write or slot advance."""

    retryable = True


class SourceUnavailableError(PgSyncError):
    """The source server could not be reached; running again later may succeed."""

    retryable = True


class StateError(PgSyncError):
    """The pipeline state is malformed or forbids the requested change."""


class PhaseTransitionError(StateError):
    """A table was asked to move between two phases that the state machine does not connect."""

    def __init__(
        self, table: str, from_phase: str, to_phase: str, remedy: str, *, destination: str | None = None
    ) -> None:
        self.table = table
        self.from_phase = from_phase
        self.to_phase = to_phase
        self.destination = destination
        where = f"table {table}" + (f" in destination {destination}" if destination else "")
        super().__init__(f"{where}: illegal phase transition {from_phase} -> {to_phase}; {remedy}")


class StaleDecisionError(StateError):
    """A phase move was decided for a baseline that is no longer the destination's; it was dropped."""


class StateConflictError(StateError):
    """Another task run saved the pipeline state between this run's load and save."""

    retryable = True

    def __init__(self, pipeline: str, expected: int, found: int | None) -> None:
        self.pipeline = pipeline
        self.expected = expected
        self.found = found
        now = "it no longer exists" if found is None else f"found version {found}"
        super().__init__(
            f"state of pipeline {pipeline!r} was updated by another task run: expected version "
            f"{expected}, {now}; rerun the task so it reloads the state"
        )


class LockTimeoutError(PgSyncError):
    """An advisory lock stayed held by another session for longer than the wait allowed."""

    retryable = True


class ChangelogError(PgSyncError):
    """A changelog segment is malformed, missing or does not match what was asked for."""


class ChangelogStorageError(ChangelogError):
    """The changelog's filesystem failed to read or write a segment; running again may succeed."""

    retryable = True


class UnsupportedTypeError(PgSyncError):
    """A column's type or name cannot be carried to a destination; raised before data is written."""


class BaselineError(PgSyncError):
    """A baseline job failed; the table is Errored and a rebaseline (after the fix) runs it again."""

    retryable = True


class BaselinePartlyFailedError(PgSyncError):
    """A baseline failed in some destinations of a table (each named, Errored) and succeeded in the others."""

    retryable = False  # running the task again would rebaseline the destinations that succeeded


class DestinationError(PgSyncError):
    """A destination cannot take a table's changes; its tables go Errored, capture goes on."""


class DestinationDivergedError(DestinationError):
    """A destination no longer holds what its watermark says (its table dropped, replaced, emptied
    or written by someone else); only a rebaseline of that table in that destination repairs it."""


class PublishConflictError(DestinationError):
    """A lake publish was decided for a generation or lineage another writer has replaced since;
    nothing of it was published (running again decides anew)."""

    retryable = True


class DestinationUnavailableError(DestinationError):
    """A destination could not be reached or lost its connection; running again later may succeed
    (apply leaves the phases as they were and fails its task for Airflow to retry)."""

    retryable = True


class ApplyFailedError(PgSyncError):
    """Apply ended with tables Errored in some destination: lists each with reason and remedy;
    ``retryable`` when a destination could not be reached (the rest needs a human)."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        self.retryable = retryable
        super().__init__(message)


class SchemaRebaselineError(PgSyncError):
    """A change of a table's columns sent destinations back to baseline: names each table,
    destination and change, and the rebaseline triggered (or how to trigger it)."""


class TableErroredError(StateError):
    """A table a sensor waits for is Errored: names the table, the reason and the remedy."""

    def __init__(
        self, *, pipeline: str, table: str, reason: str, solution: str, retry: str, previous: str
    ) -> None:
        self.pipeline = pipeline
        self.table = table
        self.reason = reason
        self.solution = solution
        self.retry = retry
        self.previous = previous
        super().__init__(
            f"table {table} of pipeline {pipeline!r} is Errored (it left {previous or 'an unknown phase'}): "
            f"{reason}; remedy: {solution.rstrip('. ')}, then rebaseline the table (Errored -> Init)"
        )


class ReconcileError(PgSyncError):
    """A reconciliation found differences, or could not compare a table with a destination."""
