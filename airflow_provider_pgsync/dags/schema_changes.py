"""The cdc DAG's answer to a schema change that sent destinations back to baseline
(``on_schema_change: rebaseline``): the baseline DAG runs to trigger, and the error that fails
the cdc run naming each table, destination, what changed and the run triggered.

Apply lists what it sent back in XCom ``schema_rebaselines`` (``REBASELINES_XCOM``); these
functions turn that list into the baseline DAG's trigger confs and the final message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_pgsync.errors import SchemaRebaselineError
from airflow_provider_pgsync.pipeline.config import PipelineConfig


def rebaseline_confs(config: PipelineConfig, sent: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    """The confs of the baseline DAG runs that rebaseline exactly what ``sent`` lists: one run
    per distinct set of destinations, with the tables sent back in exactly those destinations
    (config order). Tables or destinations the config no longer lists are left out
    (``rebaseline_error`` names them with the remedy)."""
    names = [d.name for d in config.destinations]
    wanted: dict[str, set[str]] = {}
    for item in sent:
        if item["table"] in config.table_keys and item["destination"] in names:
            wanted.setdefault(item["table"], set()).add(item["destination"])
    by_destinations: dict[tuple[str, ...], list[str]] = {}
    for table in config.table_keys:
        if table in wanted:
            chosen = tuple(n for n in names if n in wanted[table])
            by_destinations.setdefault(chosen, []).append(table)
    return [
        {"tables": tables, "destinations": list(destinations), "mode": "rebaseline"}
        for destinations, tables in by_destinations.items()
    ]


def rebaseline_error(
    config: PipelineConfig,
    baseline_dag_id: str,
    sent: Sequence[Mapping[str, str]],
    confs: Sequence[Mapping[str, Any]],
    run_ids: Sequence[str | None],
) -> SchemaRebaselineError:
    """The error that fails the cdc run after a schema change sent ``sent`` back to baseline and
    the baseline DAG was triggered with ``confs`` (runs ``run_ids``, None where unknown)."""
    run_of: dict[tuple[str, str], str] = {}
    for conf, run_id in zip(confs, run_ids, strict=False):
        for table in conf["tables"]:
            for destination in conf["destinations"]:
                run_of[(table, destination)] = f"run {run_id}" if run_id else "a run"
    lines = []
    for item in sent:
        table, destination = item["table"], item["destination"]
        run = run_of.get((table, destination))
        if run is not None:
            then = f"rebaseline triggered: {baseline_dag_id} {run}"
        else:
            then = (
                f"no rebaseline was triggered ({table} or {destination} is not in pipeline "
                f"{config.name!r}'s config); trigger {baseline_dag_id} with tables=[\"{table}\"], "
                f"destinations=[\"{destination}\"]"
            )
        lines.append(f"{item['reason']}; {then}")  # the reason names the table and the destination
    return SchemaRebaselineError(
        f"pipeline {config.name!r}: a schema change sent {len(sent)} table destination(s) back to baseline "
        "(the others keep streaming; each comes back to Ready at the first cdc run after its "
        "rebaseline):\n" + "\n".join(f"  - {line}" for line in lines)
    )
