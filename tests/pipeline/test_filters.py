"""Filters in pipeline configs: the ``baseline.backfill_filters`` option and the tables'
``row_filter``, which the baseline embeds in its query: one expression, each problem named by
its key path."""

from __future__ import annotations

import re
from typing import Any

import pytest

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pipeline import PipelineConfig, PipelineConfigError, parse_pipelines
from airflow_provider_pgsync.source.publication import PublishedTable, published_table

BASE: dict[str, Any] = {"name": "shop", "source_conn_id": "shop_db", "tables": ["orders"]}


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(PipelineConfigError) as error:
        parse_pipelines(data)
    return [str(p) for p in error.value.problems]


def test_backfill_filters_is_safe_unless_set_to_sql() -> None:
    assert PipelineConfig.from_mapping(BASE).baseline.backfill_filters == "safe"
    config = PipelineConfig.from_mapping({**BASE, "baseline": {"backfill_filters": "sql"}})
    assert config.baseline.backfill_filters == "sql"
    assert PipelineConfig.from_mapping(config.to_mapping()) == config


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("SQL", "baseline.backfill_filters: 'SQL' is not allowed; use one of: safe, sql"),
        (
            "any; DROP TABLE x",
            "baseline.backfill_filters: 'any; DROP TABLE x' is not allowed; use one of: safe, sql",
        ),
        (True, "baseline.backfill_filters: must be a string, not the boolean True"),
    ],
)
def test_a_wrong_backfill_filters_value_is_named(value: object, problem: str) -> None:
    assert _problems({**BASE, "baseline": {"backfill_filters": value}}) == [problem]


ROW_FILTERS = [
    ("country = 'NL'; DROP TABLE x", r"at character 15 .*';' is not allowed"),
    ("country = 'NL') OR (true", r"'\)' closes no '\(' of the filter"),
    ("country = 'NL' -- all", r"a comment \(--\) is not allowed"),
    ("country = 'NL' /*", r"a comment \(/\*\) is not allowed"),
    ("country = 'NL", r"this string is never closed"),
    ("country = 'N\x00L'", r"contains a NUL character"),
    ("country = $1", r"a parameter \(\$1\) is not allowed"),
]


@pytest.mark.parametrize(("row_filter", "problem"), ROW_FILTERS)
def test_a_row_filter_must_be_one_expression(row_filter: str, problem: str) -> None:
    data = {**BASE, "tables": ["orders", {"table": "customers", "row_filter": row_filter}]}
    [found] = _problems(data)
    assert found.startswith("tables[1].row_filter: "), found  # (a NUL is refused in any config value)
    assert re.search(problem, found), found
    # operators given the table directly refuse it too
    with pytest.raises(ConfigError, match=rf"^table public.customers: row_filter: .*{problem}"):
        published_table({"table": "customers", "row_filter": row_filter})


def test_hostile_looking_row_filters_that_are_one_expression_are_kept() -> None:
    kept = "country IN ('N;L', 'it''s -- /* fine */', $$x)$$) AND \"Weird;Name\" <> 'é€𝄞'"
    data = {**BASE, "tables": [{"table": "customers", "row_filter": kept}]}
    (config,) = parse_pipelines(data)
    assert config.tables[0].row_filter == kept
    assert PublishedTable(published_table("customers").table, row_filter=kept).row_filter == kept
