"""The baseline DAG's backfill filter as built and checked (no database): the pipeline option
``baseline.backfill_filters`` reaches the backfill task and the trigger form's description, and
param ``backfill_filter`` is read with that grammar before any task touches the source."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_pgsync.dags import build_dags
from airflow_provider_pgsync.dags.params import chosen_tables
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pipeline import PipelineConfig
from airflow_provider_pgsync.source.row_condition import SAFE_GRAMMAR

MINIMAL = {"name": "shop", "source_conn_id": "shop_db", "tables": ["orders"]}


def _config(grammar: str | None) -> PipelineConfig:
    extra = {"baseline": {"backfill_filters": grammar}} if grammar else {}
    return PipelineConfig.from_mapping({**MINIMAL, **extra})


@pytest.mark.parametrize(("grammar", "expected"), [(None, "safe"), ("safe", "safe"), ("sql", "sql")])
def test_the_option_reaches_the_backfill_task_and_the_form(grammar: str | None, expected: str) -> None:
    dag = build_dags(_config(grammar))["pgsync_shop_baseline"]
    backfill: Any = dag.get_task("backfill")
    assert backfill.partial_kwargs["filter_grammar"] == expected
    described = dag.params.get_param("backfill_filter").description or ""
    if expected == "safe":
        assert SAFE_GRAMMAR in described and SAFE_GRAMMAR in (dag.doc_md or "")
    else:
        assert "no ';', no comments; it runs in a read-only transaction" in described


HOSTILE = [
    "id > 0) ; COMMIT; DROP TABLE x; --",
    "id > 0; DROP TABLE x",
    "id > 0 -- rest",
    "id > 0 /* rest */",
    "(id > 0",
    "name = 'x",
    "id > 0\x00",
    "id = $1",
    "{{ 7 * 7 }} = 49",
]


@pytest.mark.parametrize("grammar", ["safe", "sql"])
@pytest.mark.parametrize("condition", HOSTILE)
def test_hostile_filters_are_refused_naming_the_param(grammar: str, condition: str) -> None:
    with pytest.raises(
        ConfigError,
        match=r"^param 'backfill_filter': (at character \d+ \(near .*\): |contains a NUL character)",
    ):
        chosen_tables(_config(grammar), {"mode": "backfill", "backfill_filter": condition})


def test_the_safe_grammar_is_the_default_of_the_form() -> None:
    with pytest.raises(
        ConfigError, match=r"^param 'backfill_filter': .*only plain columns .* after 'lo_create'"
    ):
        chosen_tables(_config(None), {"mode": "backfill", "backfill_filter": "lo_create(0) > 0"})
    chosen = chosen_tables(
        _config("sql"), {"tables": ["orders"], "mode": "backfill", "backfill_filter": "lo_create(0) > 0"}
    )
    assert chosen["backfill"] == [{"table": "public.orders", "backfill_filter": "lo_create(0) > 0"}]
    typed = {"tables": ["orders"], "mode": "backfill", "backfill_filter": "note = '{{ 7 * 7 }}; --'"}
    quoted = chosen_tables(_config(None), typed)
    assert quoted["backfill"][0]["backfill_filter"] == "note = '{{ 7 * 7 }}; --'"  # a literal, as typed
