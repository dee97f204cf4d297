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
    *,
    applied: bool = True,
) -> SchemaRebaselineError:
    """The error that fails the cdc run after a schema change sent ``sent`` back to baseline and
    the baseline DAG was triggered with ``confs`` (runs ``run_ids``; None: that trigger failed);
    ``applied``: whether the apply task itself succeeded."""
    run_of: dict[tuple[str, str], str | None] = {}
    for i, conf in enumerate(confs):
        for table in conf["tables"]:
            for destination in conf["destinations"]:
                run_of[(table, destination)] = run_ids[i] if i < len(run_ids) else None
    lines = []
    for item in sent:
        table, destination = item["table"], item["destination"]
        remedy = (
            f'trigger {baseline_dag_id} with tables=["{table}"], destinations=["{destination}"], '
            "mode=rebaseline"
        )
        if (table, destination) not in run_of:
            then = f"no rebaseline was triggered ({table} or {destination} is not in the config); {remedy}"
        elif run_of[(table, destination)] is None:
            then = f"its rebaseline could not be triggered (task trigger_rebaseline failed); {remedy}"
        else:
            then = f"rebaseline triggered: {baseline_dag_id} run {run_of[(table, destination)]}"
        lines.append(f"{item['reason']}; {then}")  # the reason names the table and the destination
    failed = "" if applied else "; task apply failed too (its error names what else it could not apply)"
    return SchemaRebaselineError(
        f"pipeline {config.name!r}: a schema change sent {len(sent)} table destination(s) back to baseline "
        f"(the others keep streaming; each comes back to Ready at the first cdc run after its "
        f"rebaseline){failed}:\n" + "\n".join(f"  - {line}" for line in lines)
    )
