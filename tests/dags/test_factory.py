"""The DAG factory's DAGs as built (no database): ids, tasks, schedules, params, tags, docs,
assets, and the checks of the trigger-form values."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk import DAG, Asset
from airflow.sdk.exceptions import ParamValidationError

from airflow_provider_pgsync.dags import build_dags, destination_alias, table_asset
from airflow_provider_pgsync.dags.params import check_confirmation, chosen_tables
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.operators.backfill import PgBackfillOperator
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.pipeline import (
    PipelineConfig,
    PipelineConfigError,
    PostgresDestinationConfig,
    Schedules,
    TableConfig,
)

MINIMAL = {"name": "shop", "source_conn_id": "shop_db", "tables": ["orders", "public.customers"]}


def _tasks(dag: DAG) -> set[str]:
    return set(dag.task_dict)


def _upstream(dag: DAG, task_id: str) -> set[str]:
    return set(dag.get_task(task_id).upstream_task_ids)


def test_a_minimal_config_gives_five_dags_with_their_tasks() -> None:
    dags = build_dags(MINIMAL)
    kinds = ("setup", "baseline", "cdc", "compact", "reconcile", "teardown")
    assert set(dags) == {f"pgsync_shop_{k}" for k in kinds}
    assert all(dag.dag_id == key for key, dag in dags.items())
    setup, baseline, cdc = dags["pgsync_shop_setup"], dags["pgsync_shop_baseline"], dags["pgsync_shop_cdc"]
    compact, teardown = dags["pgsync_shop_compact"], dags["pgsync_shop_teardown"]

    assert _tasks(setup) == {
        "preflight", "create_publication", "create_slot", "init_table_states", "tables_to_baseline",
        "trigger_baseline",
    }  # fmt: skip
    chain = ["preflight", "create_publication", "create_slot", "init_table_states", "tables_to_baseline"]
    for before, after in zip(chain, [*chain[1:], "trigger_baseline"], strict=True):
        assert _upstream(setup, after) == {before}, after
    trigger: Any = setup.get_task("trigger_baseline")
    assert trigger.trigger_dag_id == "pgsync_shop_baseline"

    assert _tasks(baseline) == {"choose_tables", "baseline", "choose_backfills", "backfill"}
    mapped: Any = baseline.get_task("baseline")
    assert mapped.operator_class is PgBaselineOperator
    assert _upstream(baseline, "baseline") == {"choose_tables"}
    backfills: Any = baseline.get_task("backfill")
    assert backfills.operator_class is PgBackfillOperator
    assert _upstream(baseline, "backfill") == {"choose_backfills"}
    assert _upstream(baseline, "choose_backfills") == {"choose_tables"}  # the params are checked once

    assert _tasks(cdc) == {"capture", "apply", "rebaselines", "trigger_rebaseline", "outcome"}
    assert _upstream(cdc, "apply") == {"capture"}
    assert _upstream(cdc, "rebaselines") == {"apply"}
    assert _upstream(cdc, "trigger_rebaseline") == {"rebaselines"}
    assert _upstream(cdc, "outcome") == {"trigger_rebaseline"}
    assert _tasks(compact) == {"compact_lake"}
    assert _tasks(teardown) == {
        "check_confirmation", "drop_slot", "drop_publication", "delete_state", "teardown_tables",
    }  # fmt: skip
    assert _upstream(teardown, "drop_slot") == {"check_confirmation"}
    assert _upstream(teardown, "teardown_tables") == {"check_confirmation"}  # a branch: one or the other
    assert _upstream(teardown, "drop_publication") == {"drop_slot"}
    assert _upstream(teardown, "delete_state") == {"drop_publication"}

    for kind, dag in dags.items():
        assert sorted(dag.tags) == ["pgsync", "shop"], kind
        assert dag.doc_md and "`shop`" in dag.doc_md, kind
        assert dag.catchup is False, kind


def test_schedules_come_from_the_config_and_manual_dags_have_none() -> None:
    config = PipelineConfig.from_mapping(
        {**MINIMAL, "schedules": {"cdc": "*/2 * * * *", "compact": "@weekly"}}
    )
    dags = build_dags(config)
    cdc, compact = dags["pgsync_shop_cdc"], dags["pgsync_shop_compact"]
    assert getattr(cdc.timetable, "expression", None) == "*/2 * * * *", cdc.timetable
    assert cdc.max_active_runs == 1
    assert getattr(compact.timetable, "expression", None) == "0 0 * * 0", compact.timetable  # @weekly
    for kind in ("setup", "baseline", "teardown"):
        assert type(dags[f"pgsync_shop_{kind}"].timetable).__name__ == "NullTimetable", kind

    manual = build_dags(PipelineConfig.from_mapping({**MINIMAL, "schedules": {"cdc": None, "compact": None}}))
    assert type(manual["pgsync_shop_cdc"].timetable).__name__ == "NullTimetable"
    assert type(manual["pgsync_shop_compact"].timetable).__name__ == "NullTimetable"


def test_the_baseline_and_teardown_params() -> None:
    dags = build_dags(MINIMAL)
    params = dags["pgsync_shop_baseline"].params
    tables = params.get_param("tables")
    assert not tables.has_value, "no table is chosen by default"
    assert tables.schema["type"] == "array"
    assert tables.schema["items"]["enum"] == ["public.orders", "public.customers"]
    assert not params.get_param("mode").has_value, "no mode is chosen by default"
    assert params.get_param("mode").schema["enum"] == ["rebaseline", "backfill"]
    assert params.get_param("backfill_filter").value is None
    with pytest.raises(ParamValidationError, match="Invalid input for param tables"):
        params.validate()  # the form's defaults cannot start a run
    assert tables.resolve(["public.orders"]) == ["public.orders"]
    assert params.get_param("mode").resolve("rebaseline") == "rebaseline"
    params.validate()  # with a choice of each
    for wrong in (["public.nope"], []):
        with pytest.raises(ParamValidationError):
            tables.resolve(wrong)
    with pytest.raises(ParamValidationError):
        params.get_param("mode").resolve("merge")

    teardown = dags["pgsync_shop_teardown"].params
    confirm = teardown.get_param("confirm")
    assert confirm.value == "" and "shop" in (confirm.description or "")
    assert teardown.get_param("tables").value == [], "the whole pipeline by default"
    assert teardown.get_param("drop_tables").value is False
    assert teardown.get_param("tables").resolve(["public.gone"]) == ["public.gone"]


def test_the_mapped_baseline_gets_the_configs_baseline_arguments() -> None:
    config = PipelineConfig.from_mapping(
        {**MINIMAL, "baseline": {"target_partition_mb": 8, "copy_path": "off"}}
    )
    mapped: Any = build_dags(config)["pgsync_shop_baseline"].get_task("baseline")
    expected = config.baseline_kwargs("orders", rebaseline=True)
    del expected["table"], expected["destinations"]  # both mapped: the trigger form chooses them
    partial = mapped.partial_kwargs
    for key, value in expected.items():
        assert partial[key] == value, key
    assert partial["rebaseline"] is True and "destinations" not in partial


def test_no_compact_dag_without_a_lake_destination_and_assets_per_destination() -> None:
    config = PipelineConfig(
        name="crm",
        source_conn_id="crm_db",
        tables=(TableConfig("accounts"),),
        destinations=(PostgresDestinationConfig(conn_id="replica_db", name="replica"),),
        schedules=Schedules(cdc="@hourly"),
    )
    dags = build_dags(config)
    assert set(dags) == {
        "pgsync_crm_setup", "pgsync_crm_baseline", "pgsync_crm_cdc", "pgsync_crm_reconcile",
        "pgsync_crm_teardown",
    }  # fmt: skip
    assert "trigger_baseline" in _tasks(dags["pgsync_crm_setup"])
    [chosen] = chosen_tables(config, {"tables": ["accounts"], "mode": "rebaseline"})["rebaseline"]
    assert chosen["destinations"] == [d.to_mapping() for d in config.destinations]
    backfill: Any = dags["pgsync_crm_baseline"].get_task("backfill")
    assert backfill.partial_kwargs["destinations"] == [d.to_mapping() for d in config.destinations]
    [backfilled] = chosen_tables(config, {"tables": ["accounts"], "mode": "backfill"})["backfill"]
    assert backfilled["table"] == "public.accounts"
    apply = dags["pgsync_crm_cdc"].get_task("apply")
    assert apply.outlets == [destination_alias("crm", "replica")]
    assert apply.inlets == [table_asset("crm", "replica", "public.accounts")]  # registers it, emits nothing


def test_table_assets_have_valid_distinct_uris() -> None:
    asset = table_asset("shop", "lake", "public.orders")
    assert asset == Asset(uri="pgsync://shop/lake/public.orders")
    assert asset.name == asset.uri
    odd = table_asset("shop", "lake", '"My Schema"."Odd/Name"')
    assert odd.uri == "pgsync://shop/lake/My%20Schema.Odd%2FName"
    assert len({asset.uri, odd.uri, table_asset("shop", "replica", "orders").uri}) == 3


def test_pipelines_that_clash_are_refused() -> None:
    with pytest.raises(PipelineConfigError, match="shop"):
        build_dags({"pipelines": [MINIMAL, MINIMAL]})


# ---- the checks of the trigger-form values ----------------------------------------------------

CONFIG = PipelineConfig.from_mapping(
    {**MINIMAL, "tables": ["orders", {"table": "customers", "columns": ["id", "name"]}]}
)


def test_chosen_tables_keep_config_order_and_entries() -> None:
    entries = ["public.orders", {"table": "public.customers", "columns": ["id", "name"]}]
    every = [d.to_mapping() for d in CONFIG.destinations]
    chosen = chosen_tables(CONFIG, {"tables": ["public.customers", "orders"], "mode": "rebaseline"})
    expected = [{"table": e, "destinations": every} for e in entries]
    assert chosen == {"rebaseline": expected, "backfill": []}
    assert chosen_tables(CONFIG, {"tables": ["orders", "customers"], "mode": "rebaseline"}) == chosen
    with pytest.raises(ConfigError, match=r"param 'mode' is required"):
        chosen_tables(CONFIG, {})
    with pytest.raises(ConfigError, match=r"param 'tables' is required"):
        chosen_tables(CONFIG, {"mode": "rebaseline"})


def test_a_rebaseline_into_chosen_destinations_only() -> None:
    config = PipelineConfig.from_mapping(
        {
            **MINIMAL,
            "tables": ["orders"],
            "destinations": [
                {"kind": "lake"},
                {"kind": "postgres", "conn_id": "replica_db", "name": "replica"},
            ],
        }
    )
    orders = {"tables": ["orders"], "mode": "rebaseline"}
    [chosen] = chosen_tables(config, {**orders, "destinations": ["replica"]})["rebaseline"]
    assert chosen["destinations"] == [config.destinations[1].to_mapping()]
    with pytest.raises(ConfigError, match=r"param 'destinations': pipeline 'shop' has no destination 'lak'"):
        chosen_tables(config, {**orders, "destinations": ["lak"]})
    with pytest.raises(ConfigError, match=r"param 'destinations' must be a non-empty list.*lake, replica"):
        chosen_tables(config, {**orders, "destinations": []})


def test_a_backfill_gets_each_table_with_the_filter() -> None:
    chosen = chosen_tables(CONFIG, {"tables": ["orders"], "mode": "backfill", "backfill_filter": " id > 1 "})
    assert chosen == {"rebaseline": [], "backfill": [{"table": "public.orders", "backfill_filter": "id > 1"}]}
    every_row = chosen_tables(
        CONFIG, {"tables": CONFIG.table_keys, "mode": "backfill", "backfill_filter": None}
    )
    assert [b["backfill_filter"] for b in every_row["backfill"]] == ["", ""]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"mode": "backfill", "backfill_filter": 7}, r"param 'backfill_filter' must be SQL text, not 7"),
        ({"mode": "merge"}, r"param 'mode' must be one of rebaseline, backfill, not 'merge'"),
        (
            {"mode": "rebaseline", "backfill_filter": "id > 1"},
            r"'backfill_filter' is for mode 'backfill' only",
        ),
        ({"mode": "rebaseline", "tables": []}, r"param 'tables' must be a non-empty list.*public\.orders"),
        ({"mode": "rebaseline", "tables": "orders"}, r"param 'tables' must be a non-empty list"),
        (
            {"mode": "backfill", "tables": ["orders", "x.y"]},
            r"param 'tables': pipeline 'shop' has no table 'x\.y",
        ),
        ({"tables": ["orders"]}, r"param 'mode' is required: choose rebaseline .*; nothing was copied"),
        ({"mode": "backfill"}, r"param 'tables' is required: choose the tables to backfill"),
    ],
)
def test_bad_baseline_params_are_refused_naming_the_param(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        chosen_tables(CONFIG, params)


def test_the_teardown_confirmation_must_be_the_pipeline_name() -> None:
    check_confirmation(CONFIG, {"confirm": "shop"})
    for wrong in ("", "Shop", "crm", None):
        with pytest.raises(
            ConfigError, match=r"param 'confirm' must be the pipeline name 'shop'.*nothing was dropped"
        ):
            check_confirmation(CONFIG, {"confirm": wrong})


def test_the_reconcile_dag_follows_its_config_section() -> None:
    reconcile = build_dags(MINIMAL)["pgsync_shop_reconcile"]
    assert type(reconcile.timetable).__name__ == "NullTimetable"  # manual by default
    task: Any = reconcile.get_task("reconcile")
    assert type(task).__name__ == "PgReconcileOperator"
    assert (task.repair, task.tables) == ("none", ["public.orders", "public.customers"])
    assert [d["kind"] for d in task.destinations] == ["lake"]
    scheduled = build_dags({**MINIMAL, "reconcile": {"schedule": "@daily", "repair": "backfill"}})
    dag = scheduled["pgsync_shop_reconcile"]
    assert getattr(dag.timetable, "expression", None) == "0 0 * * *", dag.timetable  # @daily
    assert dag.get_task("reconcile").repair == "backfill"  # type: ignore[attr-defined]
    with pytest.raises(PipelineConfigError, match=r"reconcile\.repair"):
        build_dags({**MINIMAL, "reconcile": {"repair": "fix"}})
