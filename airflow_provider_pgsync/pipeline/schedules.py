"""When a pipeline's DAGs run: cron schedules, event-driven cdc runs (``OnChanges``), and the
retries of the cdc tasks, as frozen dataclasses checked like the other parts (``parts``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow_provider_pgsync.pipeline.problems import Checks, choice, format_duration
from airflow_provider_pgsync.source.names import shown
from airflow_provider_pgsync.triggers.run_gate import MAX_ON_CHANGES

SCHEDULE_PRESETS = (
    "@once",
    "@continuous",
    "@hourly",
    "@daily",
    "@weekly",
    "@monthly",
    "@quarterly",
    "@yearly",
)
DEFAULT_CDC_SCHEDULE = "*/5 * * * *"
DEFAULT_COMPACT_SCHEDULE = "@daily"
DEFAULT_ON_CHANGES = 1000
DEFAULT_MAX_WAIT = timedelta(seconds=60)
DEFAULT_POLL_INTERVAL = timedelta(seconds=5)
MAX_RETRIES = 100


def _whole_seconds(checks: Checks, path: str, value: object, least: timedelta) -> None:
    if not isinstance(value, timedelta) or value < least:
        checks.add(path, f"must be a duration of at least {format_duration(least)}, not {shown(value)}")
    elif value % timedelta(seconds=1):
        checks.add(path, f"must be whole seconds, not {value}")


@dataclass(frozen=True)
class OnChanges:
    """An event-driven cdc schedule: a run as soon as the slot holds ``on_changes`` changes of the
    publication, or ``max_wait`` after the last run was requested, whichever comes first; the
    triggerer checks every ``poll_interval`` (``triggers.PendingChangesEventTrigger``)."""

    on_changes: int = DEFAULT_ON_CHANGES
    max_wait: timedelta = DEFAULT_MAX_WAIT
    poll_interval: timedelta = DEFAULT_POLL_INTERVAL

    def __post_init__(self) -> None:
        checks = Checks()
        count = self.on_changes
        if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= MAX_ON_CHANGES:
            checks.add("on_changes", f"must be an integer from 1 to {MAX_ON_CHANGES}, not {shown(count)}")
        _whole_seconds(checks, "max_wait", self.max_wait, timedelta(seconds=1))
        _whole_seconds(checks, "poll_interval", self.poll_interval, timedelta(seconds=1))
        if not checks.found and self.poll_interval > self.max_wait:
            checks.add(
                "poll_interval",
                f"{format_duration(self.poll_interval)} is longer than max_wait "
                f"({format_duration(self.max_wait)}); make it at most that",
            )
        checks.raise_any("schedules.cdc")

    def to_mapping(self) -> dict[str, Any]:
        return {
            "on_changes": self.on_changes,
            "max_wait": format_duration(self.max_wait),
            "poll_interval": format_duration(self.poll_interval),
        }

    def __str__(self) -> str:
        return (
            f"on {self.on_changes} pending changes, at the latest every {format_duration(self.max_wait)} "
            f"(checked every {format_duration(self.poll_interval)})"
        )


@dataclass(frozen=True)
class Schedules:
    """When the DAGs run: a cron expression, an Airflow preset (``SCHEDULE_PRESETS``) or None
    (manual runs only); the cdc DAG also ``OnChanges`` (event-driven). ``retries`` and
    ``retry_delay``: of the cdc DAG's capture and apply tasks, so a task whose process died
    (a killed worker, a lost connection) runs again without waiting for the next run."""

    cdc: str | OnChanges | None = DEFAULT_CDC_SCHEDULE
    compact: str | None = DEFAULT_COMPACT_SCHEDULE
    retries: int = 2
    retry_delay: timedelta = timedelta(seconds=10)

    def __post_init__(self) -> None:
        checks = Checks()
        if not isinstance(self.cdc, OnChanges):
            problem = schedule_problem(self.cdc)
            if problem:
                checks.add("cdc", f"{problem}; or event-driven: {{on_changes: N, max_wait: 60s}}")
        problem = schedule_problem(self.compact)
        if problem:
            checks.add("compact", problem)
        retries = self.retries
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
            checks.add("retries", f"must be an integer from 0 to {MAX_RETRIES}, not {shown(retries)}")
        _whole_seconds(checks, "retry_delay", self.retry_delay, timedelta(0))
        checks.raise_any("schedules")

    @property
    def event_driven(self) -> OnChanges | None:
        """The cdc DAG's event-driven schedule, None when it runs on a cron schedule or manually."""
        return self.cdc if isinstance(self.cdc, OnChanges) else None

    def to_mapping(self) -> dict[str, Any]:
        return {
            "cdc": self.cdc.to_mapping() if isinstance(self.cdc, OnChanges) else self.cdc,
            "compact": self.compact,
            "retries": self.retries,
            "retry_delay": format_duration(self.retry_delay),
        }


def schedule_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a cron or preset schedule, None if nothing."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        presets = ", ".join(SCHEDULE_PRESETS)
        return f"must be a cron expression, a preset ({presets}) or null, not {shown(value)}"
    if value.startswith("@"):
        return choice(value, SCHEDULE_PRESETS)
    # Airflow's own check, so a schedule accepted here is accepted by the DAG
    from airflow.sdk import CronTriggerTimetable
    from airflow.sdk.exceptions import AirflowTimetableInvalid

    try:
        CronTriggerTimetable(value, timezone="UTC").validate()
    except (AirflowTimetableInvalid, ValueError) as exc:
        return f"{value!r} is not a cron expression ({exc}); or use a preset: {', '.join(SCHEDULE_PRESETS)}"
    return None
