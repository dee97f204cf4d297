"""Schedules: event-driven cdc (``schedules.cdc: {on_changes, max_wait}``) and the cdc tasks'
retries, read from plain data with every mistake named by its key path, and round trips."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_pgsync.pipeline import OnChanges, PipelineConfig, PipelineConfigError, Schedules
from airflow_provider_pgsync.pipeline.reading import load_pipelines
from airflow_provider_pgsync.triggers import run_gate
from tests.pipeline.helpers import MINIMAL, problem, write


def _read(schedules: dict[str, Any]) -> Schedules:
    return PipelineConfig.from_mapping({**MINIMAL, "schedules": schedules}).schedules


def test_event_driven_cdc_is_read_and_round_trips(tmp_path: Path) -> None:
    schedules = _read({"cdc": {"on_changes": 500, "max_wait": "30s", "poll_interval": "2s"}})

    assert schedules.cdc == OnChanges(500, timedelta(seconds=30), timedelta(seconds=2))
    assert schedules.event_driven == schedules.cdc
    assert (schedules.retries, schedules.retry_delay) == (2, timedelta(seconds=10))
    config = PipelineConfig.from_mapping({**MINIMAL, "schedules": {"cdc": {"on_changes": 500}}})
    assert config.to_mapping()["schedules"] == {
        "cdc": {"on_changes": 500, "max_wait": "1m", "poll_interval": "5s"},
        "compact": "@daily",
        "retries": 2,
        "retry_delay": "10s",
    }
    assert PipelineConfig.from_mapping(config.to_mapping()) == config
    dumped = write(tmp_path, yaml.safe_dump({"pipelines": [config.to_mapping()]}))
    assert load_pipelines(dumped) == (config,)


def test_defaults_of_an_event_driven_schedule_and_of_retries() -> None:
    assert _read({"cdc": {}}).cdc == OnChanges(1000, timedelta(seconds=60), timedelta(seconds=5))
    assert _read({"cdc": {"max_wait": "10m"}}).cdc == OnChanges(max_wait=timedelta(minutes=10))
    cron = _read({"retries": 0, "retry_delay": "1m"})
    assert (cron.cdc, cron.event_driven, cron.retries, cron.retry_delay) == (
        "*/5 * * * *",
        None,
        0,
        timedelta(minutes=1),
    )
    # a cron cdc schedule and null still read as before
    assert _read({"cdc": "@hourly"}).cdc == "@hourly"
    assert _read({"cdc": None}).event_driven is None


MISTAKES: list[tuple[dict[str, Any], str, list[str]]] = [
    ({"cdc": {"on_change": 5}}, "schedules.cdc.on_change",
     ["unknown key", "on_changes, max_wait, poll_interval"]),
    ({"cdc": {"on_changes": 0}}, "schedules.cdc.on_changes", ["integer from 1 to 536870911", "0"]),
    ({"cdc": {"on_changes": -5}}, "schedules.cdc.on_changes", ["from 1"]),
    ({"cdc": {"on_changes": 2**40}}, "schedules.cdc.on_changes", ["to 536870911"]),
    ({"cdc": {"on_changes": "1000"}}, "schedules.cdc.on_changes",
     ["must be an integer", "the string '1000'"]),
    ({"cdc": {"on_changes": True}}, "schedules.cdc.on_changes", ["must be an integer", "boolean"]),
    ({"cdc": {"on_changes": 1.5}}, "schedules.cdc.on_changes", ["must be an integer"]),
    ({"cdc": {"on_changes": {"a": 1}}}, "schedules.cdc.on_changes", ["must be an integer", "a mapping"]),
    ({"cdc": {"max_wait": "0s"}}, "schedules.cdc.max_wait", ["at least 1s"]),
    ({"cdc": {"max_wait": 60}}, "schedules.cdc.max_wait", ["must be a string"]),
    ({"cdc": {"max_wait": "soon"}}, "schedules.cdc.max_wait", ["36h, 7d"]),
    ({"cdc": {"max_wait": "99999999999999999999d"}}, "schedules.cdc.max_wait", ["too long a duration"]),
    ({"cdc": {"max_wait": "x" * 100_000}}, "schedules.cdc.max_wait", ["not a duration"]),
    ({"cdc": {"poll_interval": "0s"}}, "schedules.cdc.poll_interval", ["at least 1s"]),
    ({"cdc": {"max_wait": "10s", "poll_interval": "1m"}}, "schedules.cdc.poll_interval",
     ["1m is longer than max_wait (10s)"]),
    ({"cdc": ["on_changes"]}, "schedules.cdc", ["cron expression", "on_changes"]),
    ({"cdc": 5}, "schedules.cdc", ["cron expression", "null"]),
    ({"cdc": "every minute"}, "schedules.cdc", ["is not a cron expression", "on_changes: N"]),
    ({"retries": -1}, "schedules.retries", ["integer from 0 to 100"]),
    ({"retries": 1000}, "schedules.retries", ["integer from 0 to 100", "1000"]),
    ({"retries": "2"}, "schedules.retries", ["must be an integer"]),
    ({"retry_delay": "later"}, "schedules.retry_delay", ["36h, 7d"]),
    ({"retry_delay": 10}, "schedules.retry_delay", ["must be a string"]),
]  # fmt: skip


@pytest.mark.parametrize(("schedules", "path", "fragments"), MISTAKES, ids=[m[1] for m in MISTAKES])
def test_each_mistake_is_named_by_its_key_path(
    schedules: dict[str, Any], path: str, fragments: list[str]
) -> None:
    with pytest.raises(PipelineConfigError) as raised:
        _read(schedules)
    message = problem(raised.value, path)
    for fragment in fragments:
        assert fragment in message, message
    assert len(str(raised.value)) < 2000, "the error echoes a huge value in full"


def test_every_problem_of_an_event_driven_schedule_is_reported_at_once() -> None:
    with pytest.raises(PipelineConfigError) as raised:
        _read({"cdc": {"on_changes": 0, "max_wait": "0s", "poll_interval": "soon"}, "retries": -1})
    paths = [p.path for p in raised.value.problems]
    assert sorted(paths) == [
        "schedules.cdc.max_wait",
        "schedules.cdc.on_changes",
        "schedules.cdc.poll_interval",
        "schedules.retries",
    ]


def test_python_api_mistakes_name_the_field() -> None:
    with pytest.raises(PipelineConfigError, match=r"- on_changes: must be an integer from 1"):
        OnChanges(0)
    with pytest.raises(PipelineConfigError, match=r"- max_wait: must be whole seconds"):
        OnChanges(max_wait=timedelta(seconds=1.5))
    with pytest.raises(PipelineConfigError, match=r"- cdc: must be a cron expression.*on_changes"):
        Schedules(cdc={"on_changes": 5})  # type: ignore[arg-type]
    with pytest.raises(PipelineConfigError, match=r"- retry_delay: must be a duration"):
        Schedules(retry_delay=timedelta(seconds=-1))


def test_the_bound_of_on_changes_is_the_watchers() -> None:
    assert OnChanges(run_gate.MAX_ON_CHANGES).on_changes == run_gate.MAX_ON_CHANGES
    with pytest.raises(PipelineConfigError, match=f"to {run_gate.MAX_ON_CHANGES}"):
        _read({"cdc": {"on_changes": run_gate.MAX_ON_CHANGES + 1}})
