"""The DAG factory: the DAGs of each pipeline, built from its config.

Per pipeline ``<name>``:

- ``pgsync_<name>_setup`` (manual): preflight -> publication -> slot -> table states Init ->
  triggers the baseline DAG for the tables in Init when that DAG is unpaused (a run of a paused
  DAG would wait queued and start whenever someone unpauses it, long after it was asked for);
- ``pgsync_<name>_baseline`` (manual; Params ``tables`` and ``mode``, both required,
  ``destinations``, ``backfill_filter``): one
  mapped ``PgBaselineOperator`` (mode rebaseline) or ``PgBackfillOperator`` (mode backfill)
  task per chosen table;
- ``pgsync_<name>_cdc`` (the config's cdc schedule: cron, or event-driven on the Asset of the
  slot's pending changes): capture, then apply into every destination,
  emitting an asset event per destination table that changed; then, while a schema change's
  rebaseline of a table in a destination is pending (``on_schema_change: rebaseline``; kept in
  the state from the try that decided it until a baseline starts), triggers the baseline DAG for
  exactly those, once per request, and fails the run naming them (task ``outcome``); capture and
  apply are retried (``schedules.retries``) when they fail, e.g. when their process was killed;
- ``pgsync_<name>_compact`` (the config's compact schedule; only with a lake destination):
  ``PgCompactOperator`` per lake destination;
- ``pgsync_<name>_reconcile`` (the config's ``reconcile.schedule``, manual by default):
  ``PgReconcileOperator`` over every table and destination;
- ``pgsync_<name>_teardown`` (manual; Param ``confirm``): drops slot, publication and state; with
  Param ``tables`` (tables taken out of the config), only those tables' state, and with
  ``drop_tables`` their destination tables too.

Building a DAG touches no connection: the tasks connect when they run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, get_current_context, task
from airflow.sdk.exceptions import AirflowSkipException

from airflow_provider_pgsync.dags import params as dag_params
from airflow_provider_pgsync.dags import tasks
from airflow_provider_pgsync.dags.assets import (
    PgApplyAssetsOperator,
    destination_alias,
    pending_changes_asset,
    table_assets,
)
from airflow_provider_pgsync.dags.schema_changes import RebaselineRun, rebaseline_error, rebaseline_requests
from airflow_provider_pgsync.errors import ApplyFailedError
from airflow_provider_pgsync.operators.apply import REBASELINES_XCOM
from airflow_provider_pgsync.operators.backfill import PgBackfillOperator
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.operators.capture import PgCaptureOperator
from airflow_provider_pgsync.operators.compact import PgCompactOperator
from airflow_provider_pgsync.operators.reconcile import PgReconcileOperator
from airflow_provider_pgsync.operators.replication import (
    PgCreatePublicationOperator,
    PgCreateSlotOperator,
    PgDropSlotOperator,
    PgPreflightOperator,
)
from airflow_provider_pgsync.pipeline.config import PipelineConfig
from airflow_provider_pgsync.pipeline.problems import format_duration
from airflow_provider_pgsync.pipeline.reading import pipelines_from

START_DATE = datetime(2024, 1, 1, tzinfo=UTC)
"""Start date of every pipeline DAG (runs never catch up)."""

_TABLE_NAME = "{{ task.table if task.table is string else task.table['table'] }}"
"""The label of a mapped baseline task in the UI: its table's name."""

PipelineSource = str | os.PathLike[str] | PipelineConfig | Mapping[str, Any] | Iterable[PipelineConfig]


def dag_id(pipeline: str, kind: str) -> str:
    """The id of a pipeline's DAG of ``kind`` (setup, baseline, cdc, compact, teardown)."""
    return f"pgsync_{pipeline}_{kind}"


def build_dags(pipelines: PipelineSource) -> dict[str, DAG]:
    """Every DAG of every pipeline (a YAML path, a mapping, one PipelineConfig or a list), by DAG id.

    A drop-in DAG file puts the result into its globals: ``globals().update(build_dags(path))``.
    """
    dags: dict[str, DAG] = {}
    for config in pipelines_from(pipelines):
        for dag in pipeline_dags(config):
            dags[dag.dag_id] = dag
    return dags


def pipeline_dags(config: PipelineConfig) -> list[DAG]:
    """The DAGs of one pipeline: setup, baseline, cdc, compact, reconcile, teardown; without a lake
    destination no compact DAG (compaction folds lake segments)."""
    if not config.lake_destinations:
        return [
            setup_dag(config),
            baseline_dag(config),
            cdc_dag(config),
            reconcile_dag(config),
            teardown_dag(config),
        ]
    return [
        setup_dag(config),
        baseline_dag(config),
        cdc_dag(config),
        compact_dag(config),
        reconcile_dag(config),
        teardown_dag(config),
    ]


def _dag(config: PipelineConfig, kind: str, doc: str, **kwargs: Any) -> DAG:
    kwargs.setdefault("schedule", None)
    return DAG(
        dag_id(config.name, kind),
        start_date=START_DATE,
        catchup=False,
        tags=["pgsync", config.name],
        doc_md=doc,
        **kwargs,
    )


def _tables_md(config: PipelineConfig) -> str:
    return ", ".join(f"`{key}`" for key in config.table_keys)


def _destinations_md(config: PipelineConfig) -> str:
    return ", ".join(f"`{d.name}` ({d.kind})" for d in config.destinations)


def setup_dag(config: PipelineConfig) -> DAG:
    """Preflight, publication, slot, table states Init, then the baseline of the tables in Init."""
    baseline_id = dag_id(config.name, "baseline")
    then = (
        f"then triggers `{baseline_id}` for the tables in Init. It triggers nothing while "
        f"`{baseline_id}` is paused (the run would wait queued and start whenever the DAG is "
        "unpaused): unpause it and run setup again, or trigger it with those tables and mode "
        "`rebaseline`"
    )
    doc = (
        f"### pgsync pipeline `{config.name}`: setup\n\n"
        f"Checks that source `{config.source_conn_id}` can replicate {_tables_md(config)} (preflight), "
        f"creates or updates publication `{config.publication_name}`, creates slot "
        f"`{config.slot_name}`, records the slot and puts new tables in phase Init in the pipeline "
        f"state, {then}. Every step is idempotent: run it again after adding tables to the config."
    )
    with _dag(config, "setup", doc, max_active_runs=1) as dag:
        preflight = PgPreflightOperator(task_id="preflight", **config.preflight_kwargs())
        publication = PgCreatePublicationOperator(task_id="create_publication", **config.publication_kwargs())
        slot = PgCreateSlotOperator(task_id="create_slot", **config.slot_kwargs())

        # one XCom, not one per table: a dict return would push each table name as an XCom key
        # (a URL path part of the task API, where '/' or non-Latin-1 characters break it)
        @task(task_id="init_table_states", multiple_outputs=False)
        def init_table_states() -> dict[str, str]:
            """Record the slot and put the config's new tables in phase Init."""
            return tasks.init_tables(config)

        @task(task_id="tables_to_baseline")
        def tables_to_baseline(phases: dict[str, str]) -> list[str]:
            """The tables in phase Init; skips the trigger when there is none, or when the baseline
            DAG is paused (its run would start whenever someone unpauses it, unasked by then)."""
            waiting = [key for key, phase in phases.items() if phase == "Init"]
            if not waiting:
                raise AirflowSkipException(
                    f"every table of pipeline {config.name!r} is past Init: nothing to baseline "
                    f"(trigger {baseline_id} to rebaseline a table)"
                )
            if get_current_context()["ti"].get_dag(baseline_id).is_paused:
                raise AirflowSkipException(
                    f"DAG {baseline_id} is paused, so no baseline was triggered (its run would wait "
                    "queued and start whenever the DAG is unpaused); to baseline "
                    f"{', '.join(waiting)}: unpause {baseline_id} and run this setup DAG again, or "
                    f"trigger {baseline_id} with param tables {waiting} and mode rebaseline"
                )
            return waiting

        phases: Any = init_table_states()  # an XComArg: the dict at run time
        preflight >> publication >> slot >> phases
        waiting = tables_to_baseline(phases)
        waiting >> TriggerDagRunOperator(
            task_id="trigger_baseline",
            trigger_dag_id=baseline_id,
            conf={"tables": waiting, "mode": "rebaseline"},
        )
    return dag


def baseline_dag(config: PipelineConfig) -> DAG:
    """One mapped baseline (or backfill) task per table chosen in the trigger form."""
    doc = (
        f"### pgsync pipeline `{config.name}`: baseline\n\n"
        f"Copies the chosen tables (param `tables`, required: any of {_tables_md(config)}) into the "
        f"chosen destinations (param `destinations`; default all: {_destinations_md(config)}), one Spark job "
        "and one mapped task per table, each from one "
        "exported snapshot, and hands each table off to the stream exactly (SyncDone, then Ready at "
        "the next cdc run). The other tables keep their phase and keep streaming.\n\n"
        "Param `mode` (required: nothing is chosen by default): `rebaseline` (also the first "
        "baseline after setup) copies whole tables again; "
        "`backfill` re-reads only the rows matching `backfill_filter` (one condition; empty: every "
        "row) of tables that are Ready and stages them: the next cdc run writes them over the destinations' "
        "rows (keys changed since keep their newer rows; nothing is deleted) while the tables keep "
        f"streaming. {dag_params.filter_help(config.baseline.backfill_filters)}"
    )
    with _dag(config, "baseline", doc, max_active_runs=1, params=dag_params.baseline_params(config)) as dag:

        @task(task_id="choose_tables")
        def choose_tables() -> list[Any]:
            """The tables to rebaseline, after checking every param (ConfigError naming a bad one)."""
            return dag_params.chosen_tables(config, get_current_context()["params"])["rebaseline"]

        @task(task_id="choose_backfills")
        def choose_backfills() -> list[Any]:
            """The backfill task's arguments per table (mode backfill), the params checked already."""
            return dag_params.chosen_tables(config, get_current_context()["params"])["backfill"]

        kwargs = config.baseline_kwargs(config.tables[0], rebaseline=True)
        del kwargs["table"], kwargs["destinations"]  # per mapped task: the trigger form's choice
        rebaselines = choose_tables()
        baseline = PgBaselineOperator.partial(task_id="baseline", map_index_template=_TABLE_NAME, **kwargs)
        baseline.expand_kwargs(rebaselines)
        del kwargs["rebaseline"]
        kwargs["destinations"] = config.backfill_destinations()
        kwargs["filter_grammar"] = config.baseline.backfill_filters
        backfills = choose_backfills()
        rebaselines >> backfills
        backfill = PgBackfillOperator.partial(task_id="backfill", map_index_template=_TABLE_NAME, **kwargs)
        backfill.expand_kwargs(backfills)
    return dag


def cdc_dag(config: PipelineConfig) -> DAG:
    """Capture one bounded batch, then apply it into every destination; trigger the rebaselines
    a schema change needs (``on_schema_change: rebaseline``) and fail the run naming them."""
    baseline_id = dag_id(config.name, "baseline")
    schedule, schedule_md = _cdc_schedule(config)
    when = config.schedules
    retries: dict[str, Any] = {"retries": when.retries, "retry_delay": when.retry_delay}
    doc = (
        f"### pgsync pipeline `{config.name}`: change data capture\n\n"
        f"{schedule_md} `capture` peeks a bounded batch from slot "
        f"`{config.slot_name}` into the changelog and advances the slot; `apply` applies the "
        f"changelog into {_destinations_md(config)} and emits an asset event for each destination "
        f"table with applied changes (`pgsync://{config.name}/<destination>/<schema>.<table>`, "
        "through the asset alias `pgsync_<pipeline>_<destination>`).\n\n"
        "Each destination has its own phase per table: one that fails stops alone, and `apply` "
        "fails at its end naming every table Errored in a destination (so alerting fires).\n\n"
        f"`on_schema_change: {config.on_schema_change}`: a destination that can follow a change of a "
        "table's columns only by a rebaseline "
        + (
            f"goes back to Init for that table alone; `trigger_rebaseline` triggers `{baseline_id}` "
            "for exactly those tables and destinations, and `outcome` fails the run naming each "
            "table, destination, what changed and the run triggered. The request is kept in the "
            "pipeline state until a baseline starts: a retried `apply`, or the next run, triggers "
            "it again under the same run id (so no second baseline starts) and fails again."
            if config.on_schema_change == "rebaseline"
            else "goes Errored for that table alone and `apply` fails naming it and the rebaseline to "
            f"trigger (`{baseline_id}`); nothing is triggered."
        )
        + f"\n\n{_retries_md(when.retries, when.retry_delay)}"
    )
    with _dag(config, "cdc", doc, schedule=schedule, max_active_runs=1) as dag:
        capture = PgCaptureOperator(task_id="capture", **retries, **config.capture_kwargs())
        apply = PgApplyAssetsOperator(
            task_id="apply",
            **retries,
            outlets=[destination_alias(config.name, d.name) for d in config.destinations],
            # registers (activates) every destination table's asset without an event per run
            inlets=table_assets(config.name, [d.name for d in config.destinations], config.table_keys),
            baseline_dag_id=baseline_id,
            fail_on_rebaseline=False,  # `outcome` fails the run, after the rebaseline is triggered
            **config.apply_kwargs(),
        )

        @task(task_id="rebaselines", trigger_rule="all_done")  # also after a failed apply
        def rebaselines() -> list[dict[str, Any]]:
            """The baseline DAG runs to trigger for the rebaselines pending (apply lists each until
            a baseline starts, whichever try or run decided it); skips if none."""
            sent = get_current_context()["ti"].xcom_pull(task_ids="apply", key=REBASELINES_XCOM) or []
            requests = rebaseline_requests(config, sent)
            if not requests:
                raise AirflowSkipException("no table waits for a rebaseline anywhere: nothing to trigger")
            return requests

        @task(task_id="outcome", trigger_rule="all_done")
        def outcome() -> None:
            """Fail the run while a table waits for the rebaseline a schema change requested in a
            destination (naming each with what changed and the baseline run) or when apply did
            not succeed."""
            ti = get_current_context()["ti"]
            sent = ti.xcom_pull(task_ids="apply", key=REBASELINES_XCOM) or []
            applied = ti.xcom_pull(task_ids="apply") is not None  # its result: pushed on success only
            if sent:
                triggers = ti.xcom_pull(task_ids="rebaselines") or []
                triggered = ti.xcom_pull(
                    task_ids="trigger_rebaseline", key="trigger_run_id", map_indexes=range(len(triggers))
                )
                if not isinstance(triggered, list):  # one map index gives the value itself
                    triggered = [triggered]
                runs = [_baseline_run(ti, baseline_id, t["trigger_run_id"], triggered) for t in triggers]
                confs = [t["conf"] for t in triggers]
                raise rebaseline_error(config, baseline_id, sent, confs, runs, applied=applied)
            if not applied:
                raise ApplyFailedError(
                    f"pipeline {config.name!r}: task apply of this run did not succeed (its error, or the "
                    "error of capture before it, says why)"
                )

        requests = rebaselines()
        # a request already triggered (by an earlier try or run) skips: its run exists
        trigger = TriggerDagRunOperator.partial(
            task_id="trigger_rebaseline", trigger_dag_id=baseline_id, skip_when_already_exists=True
        ).expand_kwargs(requests)
        capture >> apply >> requests >> trigger >> outcome()
    return dag


def _baseline_run(ti: Any, baseline_id: str, run_id: str, triggered: list[Any]) -> RebaselineRun:
    """The baseline DAG run ``run_id``: triggered by this run (its id among ``triggered``), by an
    earlier one (it exists: its state), or not at all (the trigger failed)."""
    if run_id in triggered:
        return RebaselineRun(run_id)
    if ti.get_dr_count(dag_id=baseline_id, run_ids=[run_id]) == 0:
        return RebaselineRun(None)
    state = ti.get_dagrun_state(baseline_id, run_id)  # a DagRunState (a str enum)
    return RebaselineRun(run_id, triggered=False, state=str(getattr(state, "value", state)))


def _retries_md(retries: int, delay: timedelta) -> str:
    if retries == 0:
        return "`capture` and `apply` are not retried (`schedules.retries: 0`)."
    return (
        f"`capture` and `apply` are retried up to {retries} time(s), {format_duration(delay)} apart "
        "(`schedules.retries`, `schedules.retry_delay`): both are safe to run again, so a task whose "
        "process died (a killed worker, a lost connection) completes in the same run."
    )


def _cdc_schedule(config: PipelineConfig) -> tuple[Any, str]:
    """The cdc DAG's schedule (a cron text, None, or the pending-changes Asset) and its doc."""
    event_driven = config.schedules.event_driven
    if event_driven is None:
        return config.schedules.cdc, f"Schedule `{config.schedules.cdc}`."
    asset = pending_changes_asset(
        config.name,
        slot_name=config.slot_name,
        publication_name=config.publication_name,
        source_conn_id=config.source_conn_id,
        schedule=event_driven,
    )
    every = format_duration(event_driven.poll_interval)
    doc = (
        f"Event-driven: scheduled on asset `{asset.name}`, whose watcher (run by the triggerer) counts "
        f"the changes pending in slot `{config.slot_name}` every {every} "
        f"and requests a run as soon as {event_driven.on_changes} are pending, or "
        f"{format_duration(event_driven.max_wait)} after its last request when fewer are. One run at a "
        "time: requests made while a run is active start one run after it."
    )
    return asset, doc


def compact_dag(config: PipelineConfig) -> DAG:
    """Fold the lake's segments into new base versions, one Spark job per lake destination."""
    doc = (
        f"### pgsync pipeline `{config.name}`: lake compaction\n\n"
        f"Schedule `{config.schedules.compact}`. For each lake destination, a Spark job folds the "
        f"segments apply wrote into the next base version of {_tables_md(config)}, swapped in "
        "atomically. Running it again without new segments changes nothing."
    )
    with _dag(config, "compact", doc, schedule=config.schedules.compact, max_active_runs=1) as dag:
        for name, kwargs in config.compact_kwargs().items():
            PgCompactOperator(task_id=f"compact_{name}", **kwargs)
    return dag


def reconcile_dag(config: PipelineConfig) -> DAG:
    """Compare every table with every destination (``PgReconcileOperator``), on the config's
    ``reconcile.schedule`` (None: triggered by hand)."""
    when = config.reconcile
    doc = (
        f"### pgsync pipeline `{config.name}`: reconciliation\n\n"
        f"{f'Schedule `{when.schedule}`.' if when.schedule else 'Triggered by hand.'} Compares "
        f"{_tables_md(config)} in the source with {_destinations_md(config)} while writes go on, and "
        "fails naming the tables and destinations that differ (XCom `result`: counts and sample keys). "
        + (
            "`repair: backfill`: stages a backfill of exactly the differing keys, which the next cdc "
            "run writes."
            if when.repair == "backfill"
            else "`repair: none`: reports only."
        )
    )
    with _dag(config, "reconcile", doc, schedule=when.schedule, max_active_runs=1) as dag:
        PgReconcileOperator(task_id="reconcile", **config.reconcile_kwargs())
    return dag


def teardown_dag(config: PipelineConfig) -> DAG:
    """Drop slot, publication and state, once param ``confirm`` names the pipeline; or, with param
    ``tables``, only those tables' state (and their destination tables with ``drop_tables``)."""
    doc = (
        f"### pgsync pipeline `{config.name}`: teardown\n\n"
        f"Set param `confirm` to `{config.name}`; otherwise the run fails before touching anything. "
        f"Then drops slot `{config.slot_name}` (the source stops keeping WAL for it), publication "
        f"`{config.publication_name}` and the pipeline state. The changelog and the destinations' "
        "tables are kept; run setup again to start over (every table is baselined again).\n\n"
        "With param `tables` (tables already taken out of the config, setup run since): only those "
        "tables are removed from the pipeline state (task `teardown_tables`); slot, publication and "
        "the other tables stay and stream on. With `drop_tables` their destination tables are "
        "dropped too, where the destination can (PostgreSQL; a custom destination with `drop_table`)."
    )
    with _dag(config, "teardown", doc, max_active_runs=1, params=dag_params.teardown_params(config)) as dag:

        @task.branch(task_id="check_confirmation")
        def check_confirmation() -> str:
            """Fail unless param ``confirm`` is the pipeline's name and the other params can be run;
            then go on with the whole pipeline's teardown, or that of the tables param ``tables`` names."""
            params = get_current_context()["params"]
            dag_params.check_confirmation(config, params)
            tables, _ = dag_params.teardown_tables(config, params)
            return "teardown_tables" if tables else "drop_slot"

        @task(task_id="teardown_tables")
        def teardown_tables() -> dict[str, Any]:
            """Remove the tables of param ``tables`` from the pipeline (and, with ``drop_tables``,
            drop their destination tables)."""
            tables, drop = dag_params.teardown_tables(config, get_current_context()["params"])
            return tasks.teardown_tables(config, tables, drop_tables=drop)

        @task(task_id="drop_publication")
        def drop_publication() -> bool:
            """Drop the pipeline's publication if it exists."""
            return tasks.drop_publication(config)

        @task(task_id="delete_state")
        def delete_state() -> bool:
            """Delete the pipeline's state."""
            return tasks.delete_state(config)

        drop_slot = PgDropSlotOperator(task_id="drop_slot", **config.slot_kwargs())
        checked = check_confirmation()
        checked >> drop_slot >> drop_publication() >> delete_state()
        checked >> teardown_tables()
    return dag
