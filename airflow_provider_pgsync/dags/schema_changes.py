"""The cdc DAG's answer to a schema change that sent destinations back to baseline
(``on_schema_change: rebaseline``): the baseline DAG runs to trigger, and the error that fails
the cdc run naming each table, destination, what changed and the run triggered.

Apply lists every rebaseline still pending in the state (``Init`` with a reason and a request
id) in XCom ``schema_rebaselines`` (``REBASELINES_XCOM``), including those decided by an earlier
try or run; these functions turn that list into the baseline DAG's trigger confs, each under a
run id made from its request (so re-sending a request triggers nothing new), and the message.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_pgsync.errors import SchemaRebaselineError
from airflow_provider_pgsync.pipeline.config import PipelineConfig

RUN_ID_PREFIX = "pgsync_rebaseline__"
"""The baseline DAG run id of a rebaseline request is this prefix and the request id."""


@dataclass(frozen=True)
class RebaselineRun:
    """The baseline DAG run of one trigger conf: ``run_id`` (None: none exists), whether this cdc
    run triggered it (False: an earlier run or try did) and its state when known."""

    run_id: str | None
    triggered: bool = True
    state: str | None = None


def rebaseline_confs(config: PipelineConfig, sent: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    """The confs of the baseline DAG runs that rebaseline exactly what ``sent`` lists: one run
    per request and distinct set of destinations, with the tables sent back in exactly those
    destinations (config order). Tables or destinations the config no longer lists are left
    out (``rebaseline_error`` names them with the remedy)."""
    return [request["conf"] for request in rebaseline_requests(config, sent)]


def rebaseline_requests(config: PipelineConfig, sent: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    """The ``TriggerDagRunOperator`` arguments (``conf``, ``trigger_run_id``) of the baseline DAG
    runs that ``sent`` asks for (see ``rebaseline_confs``). The run id is made from the request
    id alone, so sending the same request again (a retried apply, the next cdc run while the
    baseline waits, or after part of it was rebaselined by hand) names the run triggered the
    first time. Items without a request id (a state edited by hand) share one made from them."""
    names = [d.name for d in config.destinations]
    wanted: dict[tuple[str, str], set[str]] = {}
    for item in sent:
        if item["table"] in config.table_keys and item["destination"] in names:
            wanted.setdefault((item.get("request") or "", item["table"]), set()).add(item["destination"])
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for request in dict.fromkeys(r for r, _ in wanted):
        for table in config.table_keys:
            if (request, table) in wanted:
                chosen = tuple(n for n in names if n in wanted[(request, table)])
                grouped.setdefault((request, chosen), []).append(table)
    found = []
    used: set[str] = set()
    for (request, destinations), tables in grouped.items():
        conf = {"tables": tables, "destinations": list(destinations), "mode": "rebaseline"}
        run_id = f"{RUN_ID_PREFIX}{request or _digest(repr(sorted(conf.items())), 16)}"
        if run_id in used:  # the request's tables part rebaselined since: each rest its own run
            run_id += "_" + _digest("\0".join(destinations), 8)
        used.add(run_id)
        found.append({"conf": conf, "trigger_run_id": run_id})
    return found


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def rebaseline_error(
    config: PipelineConfig,
    baseline_dag_id: str,
    sent: Sequence[Mapping[str, str]],
    confs: Sequence[Mapping[str, Any]],
    runs: Sequence[RebaselineRun | str | None],
    *,
    applied: bool = True,
) -> SchemaRebaselineError:
    """The error that fails the cdc run while ``sent`` waits for its rebaseline, asked of the
    baseline DAG with ``confs`` (runs ``runs``: a run id is one this run triggered; None: that
    trigger failed); ``applied``: whether the apply task itself succeeded."""
    run_of: dict[tuple[str, str], RebaselineRun] = {}
    for i, conf in enumerate(confs):
        given = runs[i] if i < len(runs) else None
        made = given if isinstance(given, RebaselineRun) else RebaselineRun(given)
        for table in conf["tables"]:
            for destination in conf["destinations"]:
                run_of[(table, destination)] = made
    lines = []
    for item in sent:
        table, destination = item["table"], item["destination"]
        remedy = (
            f'trigger {baseline_dag_id} with tables=["{table}"], destinations=["{destination}"], '
            "mode=rebaseline"
        )
        run = run_of.get((table, destination))
        if run is None:
            then = f"no rebaseline was triggered ({table} or {destination} is not in the config); {remedy}"
        elif run.run_id is None:
            then = f"its rebaseline could not be triggered (task trigger_rebaseline failed); {remedy}"
        elif run.triggered:
            then = f"rebaseline triggered: {baseline_dag_id} run {run.run_id}"
        elif run.state in ("success", "failed"):
            then = (
                f"its rebaseline, {baseline_dag_id} run {run.run_id} (triggered earlier), ended {run.state} "
                f"without taking it out of Init; {remedy}"
            )
        else:
            state = f" ({run.state})" if run.state else ""
            then = f"rebaseline triggered earlier: {baseline_dag_id} run {run.run_id}{state}"
        lines.append(f"{item['reason']}; {then}")  # the reason names the table and the destination
    failed = "" if applied else "; task apply failed too (its error names what else it could not apply)"
    return SchemaRebaselineError(
        f"pipeline {config.name!r}: a schema change sent {len(sent)} table destination(s) back to baseline "
        f"(the others keep streaming; each comes back to Ready at the first cdc run after its "
        f"rebaseline){failed}:\n" + "\n".join(f"  - {line}" for line in lines)
    )
