"""Problems and durations of pipeline configs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pipeline.problems import (
    ConfigProblem,
    PipelineConfigError,
    format_duration,
    parse_duration,
)


@pytest.mark.parametrize(("text", "value"), [("36h", timedelta(hours=36)), ("7d", timedelta(days=7)),
                                             ("2w", timedelta(days=14)), ("90m", timedelta(minutes=90)),
                                             ("0h", timedelta(0))])  # fmt: skip
def test_durations(text: str, value: timedelta) -> None:
    assert parse_duration(text) == value
    assert parse_duration(format_duration(value)) == value


def test_a_duration_needs_a_number_and_a_unit() -> None:
    with pytest.raises(ConfigError, match=r"'a week' is not a duration"):
        parse_duration("a week")


def test_a_problem_inside_a_part_gets_the_part_s_key_path() -> None:
    assert str(ConfigProblem("row_filter", "x").under("tables[1]")) == "tables[1].row_filter: x"
    assert str(ConfigProblem("[0]", "x").under("tables")) == "tables[0]: x"
    error = PipelineConfigError([ConfigProblem("", "is empty")], source="f.yaml")
    assert isinstance(error, ConfigError) and str(error) == "f.yaml has 1 problem(s):\n  - is empty"
