"""The config option ``on_schema_change`` and the cdc DAG's parts that answer a schema change
(no database): the option read, refused and passed on; the baseline DAG confs per destination
set; the error that fails the run; the cdc DAG's tasks and trigger rules."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_pgsync.dags import build_dags
from airflow_provider_pgsync.dags.schema_changes import rebaseline_confs, rebaseline_error
from airflow_provider_pgsync.errors import ConfigError, SchemaRebaselineError
from airflow_provider_pgsync.operators.apply import PgApplyOperator
from airflow_provider_pgsync.pipeline import PipelineConfig, PipelineConfigError

CONFIG = {
    "name": "shop",
    "source_conn_id": "shop_db",
    "tables": ["orders", "customers", "notes"],
    "destinations": [{"kind": "lake"}, {"kind": "postgres", "conn_id": "replica_db", "name": "replica"}],
}


def test_on_schema_change_defaults_to_rebaseline_round_trips_and_reaches_apply() -> None:
    config = PipelineConfig.from_mapping(CONFIG)
    assert config.on_schema_change == "rebaseline"
    failing = PipelineConfig.from_mapping({**CONFIG, "on_schema_change": "fail"})
    assert failing.to_mapping()["on_schema_change"] == "fail"
    assert PipelineConfig.from_mapping(failing.to_mapping()) == failing
    assert failing.apply_kwargs()["on_schema_change"] == "fail"
    apply: Any = build_dags(failing)["pgsync_shop_cdc"].get_task("apply")
    assert apply.on_schema_change == "fail" and apply.baseline_dag_id == "pgsync_shop_baseline"
    assert not apply.fail_on_rebaseline  # the cdc DAG's outcome task fails the run instead


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("FAIL", "on_schema_change: 'FAIL' is not allowed; use one of: rebaseline, fail"),
        ("skip", "on_schema_change: 'skip' is not allowed; use one of: rebaseline, fail"),
        (" fail", "on_schema_change: ' fail' is not allowed"),
        ("fail\x00", "on_schema_change: 'fail\\x00' is not allowed"),
        ("x" * 5000, "(4922 more characters)"),
        (None, "on_schema_change: must be a string, not null"),
        (1, "on_schema_change: must be a string, not the integer 1"),
        (["fail"], "on_schema_change: must be a string, not a list"),
    ],
)
def test_a_hostile_on_schema_change_is_refused_naming_the_option(value: object, problem: str) -> None:
    with pytest.raises(PipelineConfigError) as caught:
        PipelineConfig.from_mapping({**CONFIG, "on_schema_change": value})
    assert problem in str(caught.value)
    assert len(str(caught.value)) < 400


def test_the_operator_refuses_an_unknown_on_schema_change() -> None:
    with pytest.raises(ConfigError, match="PgApplyOperator on_schema_change must be one of rebaseline, fail"):
        PgApplyOperator(
            task_id="apply", pipeline="shop", changelog_uri="/tmp/x", destinations=[{"kind": "lake"}],
            on_schema_change="ignore",
        )  # fmt: skip


def test_one_baseline_run_per_destination_set_with_exactly_the_tables_sent_back() -> None:
    config = PipelineConfig.from_mapping(CONFIG)
    sent = [
        {"table": "public.notes", "destination": "lake", "reason": "r1"},
        {"table": "public.orders", "destination": "replica", "reason": "r2"},
        {"table": "public.orders", "destination": "lake", "reason": "r3"},
        {"table": "public.customers", "destination": "lake", "reason": "r4"},
        {"table": "public.gone", "destination": "lake", "reason": "r5"},  # no longer in the config
    ]
    assert rebaseline_confs(config, sent) == [
        {"tables": ["public.orders"], "destinations": ["lake", "replica"], "mode": "rebaseline"},
        {"tables": ["public.customers", "public.notes"], "destinations": ["lake"], "mode": "rebaseline"},
    ]
    assert rebaseline_confs(config, []) == []


def test_the_error_names_each_table_destination_change_and_run() -> None:
    config = PipelineConfig.from_mapping(CONFIG)
    sent = [
        {
            "table": "public.orders",
            "destination": "lake",
            "reason": "table public.orders changed its columns (x)",
        },
        {
            "table": "public.gone",
            "destination": "lake",
            "reason": "table public.gone changed its columns (y)",
        },
    ]
    confs = rebaseline_confs(config, sent)
    error = rebaseline_error(config, "pgsync_shop_baseline", sent, confs, ["manual__1"])
    assert isinstance(error, SchemaRebaselineError)
    text = str(error)
    assert "sent 2 table destination(s) back to baseline" in text
    assert (
        "  - table public.orders changed its columns (x); rebaseline triggered: "
        "pgsync_shop_baseline run manual__1" in text
    )
    assert "  - table public.gone changed its columns (y); no rebaseline was triggered" in text
    assert 'trigger pgsync_shop_baseline with tables=["public.gone"], destinations=["lake"]' in text
    failed = str(rebaseline_error(config, "pgsync_shop_baseline", sent[:1], confs, [None], applied=False))
    assert "could not be triggered (task trigger_rebaseline failed); trigger pgsync_shop_baseline" in failed
    assert "task apply failed too" in failed


def test_the_cdc_dag_triggers_after_any_apply_and_its_outcome_runs_after_anything() -> None:
    cdc = build_dags(CONFIG)["pgsync_shop_cdc"]
    rules = {t.task_id: t.trigger_rule.value for t in cdc.tasks}
    assert rules == {
        "capture": "all_success", "apply": "all_success", "rebaselines": "all_done",
        "trigger_rebaseline": "all_success", "outcome": "all_done",
    }  # fmt: skip
    trigger: Any = cdc.get_task("trigger_rebaseline")
    assert trigger.partial_kwargs.get("trigger_dag_id") == "pgsync_shop_baseline"
    assert "`on_schema_change: rebaseline`" in (cdc.doc_md or "")
    failing = build_dags({**CONFIG, "on_schema_change": "fail"})["pgsync_shop_cdc"]
    assert "nothing is triggered" in (failing.doc_md or "")
