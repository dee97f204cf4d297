"""The cdc DAG's rebaseline requests (no database): one baseline run per request and set of
destinations, under a run id made from the request alone, so a request sent again (a retried
apply, a later run, part of it rebaselined by hand) names the same run; the error's words for a
run this cdc run triggered, one an earlier run triggered, and one that ended leaving the table."""

from __future__ import annotations

from typing import Any

from airflow_provider_pgsync.dags import build_dags
from airflow_provider_pgsync.dags.schema_changes import (
    RUN_ID_PREFIX,
    RebaselineRun,
    rebaseline_error,
    rebaseline_requests,
)
from airflow_provider_pgsync.pipeline import PipelineConfig

CONFIG = {
    "name": "shop",
    "source_conn_id": "shop_db",
    "tables": ["orders", "customers", "notes"],
    "destinations": [{"kind": "lake"}, {"kind": "postgres", "conn_id": "replica_db", "name": "replica"}],
}


def _item(table: str, destination: str, request: str) -> dict[str, str]:
    return {"table": table, "destination": destination, "reason": f"{table} changed", "request": request}


def test_one_run_per_request_and_destination_set_its_id_made_from_the_request() -> None:
    config = PipelineConfig.from_mapping(CONFIG)
    sent = [
        _item("public.orders", "lake", "a-1"),
        _item("public.orders", "replica", "a-1"),
        _item("public.notes", "lake", "a-2"),
        _item("public.customers", "lake", "a-2"),
        _item("public.customers", "replica", "b-1"),  # a later try's request
    ]
    assert rebaseline_requests(config, sent) == [
        {
            "conf": {"tables": ["public.orders"], "destinations": ["lake", "replica"], "mode": "rebaseline"},
            "trigger_run_id": f"{RUN_ID_PREFIX}a-1",
        },
        {
            "conf": {
                "tables": ["public.customers", "public.notes"],
                "destinations": ["lake"],
                "mode": "rebaseline",
            },
            "trigger_run_id": f"{RUN_ID_PREFIX}a-2",
        },
        {
            "conf": {"tables": ["public.customers"], "destinations": ["replica"], "mode": "rebaseline"},
            "trigger_run_id": f"{RUN_ID_PREFIX}b-1",
        },
    ]  # fmt: skip


def test_a_request_sent_again_or_in_part_names_the_same_run() -> None:
    config = PipelineConfig.from_mapping(CONFIG)
    sent = [_item("public.orders", "lake", "a-1"), _item("public.orders", "replica", "a-1")]
    [first] = rebaseline_requests(config, sent)
    assert rebaseline_requests(config, list(reversed(sent))) == [first]  # sent again, any order
    [part] = rebaseline_requests(config, sent[1:])  # the lake part rebaselined by hand since
    assert part["trigger_run_id"] == first["trigger_run_id"]
    assert part["conf"]["destinations"] == ["replica"]
    # its tables diverged (one part rebaselined): each rest has a run id of its own
    diverged = [*sent[1:], _item("public.notes", "lake", "a-1"), _item("public.notes", "replica", "a-1")]
    ids = [r["trigger_run_id"] for r in rebaseline_requests(config, diverged)]
    assert len(set(ids)) == 2 and ids[0] == first["trigger_run_id"]


def test_items_without_a_request_get_one_made_from_them() -> None:
    config = PipelineConfig.from_mapping(CONFIG)
    sent = [{"table": "public.orders", "destination": "lake", "reason": "r"}]
    [request] = rebaseline_requests(config, sent)
    assert request["trigger_run_id"].startswith(RUN_ID_PREFIX)
    assert rebaseline_requests(config, sent) == [request]
    assert rebaseline_requests(config, []) == []


def test_the_error_says_which_run_triggered_and_what_to_do_when_it_ended() -> None:
    config = PipelineConfig.from_mapping(CONFIG)
    tables = ["public.orders", "public.notes", "public.customers"]
    sent = [_item(t, "lake", f"r{i}") for i, t in enumerate(tables)]
    requests = rebaseline_requests(config, sent)
    confs = [r["conf"] for r in requests]
    runs: list[Any] = [
        RebaselineRun("run-a"),
        RebaselineRun("run-b", triggered=False, state="queued"),
        RebaselineRun("run-c", triggered=False, state="failed"),
    ]
    text = str(rebaseline_error(config, "pgsync_shop_baseline", sent, confs, runs))
    assert "public.orders changed; rebaseline triggered: pgsync_shop_baseline run run-a" in text
    earlier = "rebaseline triggered earlier: pgsync_shop_baseline run run-b (queued)"
    assert f"public.notes changed; {earlier}" in text
    assert (
        "public.customers changed; its rebaseline, pgsync_shop_baseline run run-c (triggered earlier), "
        "ended failed without taking it out of Init; trigger pgsync_shop_baseline with "
        'tables=["public.customers"], destinations=["lake"], mode=rebaseline'
    ) in text


def test_the_trigger_skips_a_run_that_exists() -> None:
    trigger: Any = build_dags(CONFIG)["pgsync_shop_cdc"].get_task("trigger_rebaseline")
    assert trigger.partial_kwargs.get("skip_when_already_exists") is True
