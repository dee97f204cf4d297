"""PgReconcileOperator: whether each destination still equals the source, while writes go on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.destinations.configs import destination_kind, destination_name
from airflow_provider_pgsync.errors import ConfigError, ReconcileError
from airflow_provider_pgsync.hooks.connections import (
    check_connections,
    destination_connections,
    source_and_state,
)
from airflow_provider_pgsync.hooks.reconcile_pg import open_source_snapshot
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.state_stores import open_state_store
from airflow_provider_pgsync.operators.reconcile_sides import Run, error_result, reconcile_postgres
from airflow_provider_pgsync.operators.retry import with_retry_policy
from airflow_provider_pgsync.reconcile.result import ReconcileResult, TableResult
from airflow_provider_pgsync.state.model import table_key
from airflow_provider_pgsync.state.store import check_state_backend

REPAIRS = ("none", "backfill")
RESULT_XCOM = "result"


class PgReconcileOperator(BaseOperator):
    """Compare each table of the source with each destination without stopping writes, and
    report missing, extra and different rows (task log, XCom ``result``); fail when anything
    differs or could not be compared, naming the tables, destinations and the remedy.

    The source is read in one REPEATABLE READ snapshot S; each destination once it has applied
    everything S saw (waiting up to ``wait_timeout`` seconds), keys changed by transactions S
    did not see being left out on both sides. Rows are hashed in buckets of their key's hash;
    the buckets that differ are split finer down to rows (``reconcile/compare.py``).

    :param pipeline, changelog_uri, destinations, postgres_conn_id, state_backend, state_conn_id,
        state_schema: as ``PgApplyOperator``'s (the same values as the pipeline's apply).
    :param tables: ``"schema.table"`` names (default: every table of the pipeline's state).
    :param repair: ``none`` (default: report only) or ``backfill``: stage a backfill of exactly
        the differing keys (``PgBackfillOperator(backfill_keys=...)``), which the next apply
        writes; the task still fails, saying the repair is staged.
    :param sample_size: differing keys shown per kind and table.
    :param wait_timeout: seconds to wait for a destination to pass the source snapshot.
    :param spark_conn_id, spark_conf, spark_submit_options: the Spark job that reads lake tables.
    """

    template_fields: Sequence[str] = ("pipeline", "changelog_uri", "destinations", "tables", "repair")

    def __init__(
        self,
        *,
        pipeline: str,
        changelog_uri: str,
        destinations: Sequence[Mapping[str, Any]],
        tables: Sequence[str] | None = None,
        postgres_conn_id: str = "postgres_default",
        state_backend: str = "variables",
        state_conn_id: str | None = None,
        state_schema: str = "pgsync",
        repair: str = "none",
        sample_size: int = 10,
        wait_timeout: float = 600,
        poll_seconds: float = 2.0,
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        spark_submit_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**with_retry_policy(kwargs))
        check_state_backend(state_backend)
        if not destinations:
            raise ConfigError("PgReconcileOperator needs at least one destination")
        if repair not in REPAIRS and "{{" not in str(repair):
            raise ConfigError(f"PgReconcileOperator repair {repair!r} is unknown; use one of {REPAIRS}")
        if isinstance(sample_size, bool) or not isinstance(sample_size, int) or sample_size < 0:
            raise ConfigError(f"PgReconcileOperator sample_size {sample_size!r} must be an integer >= 0")
        self.pipeline = pipeline
        self.changelog_uri = changelog_uri
        self.destinations = [dict(d) for d in destinations]
        self.tables = list(tables) if tables is not None else None
        self.postgres_conn_id = postgres_conn_id
        self.state_backend = state_backend
        self.state_conn_id = state_conn_id
        self.state_schema = state_schema
        self.repair = repair
        self.sample_size = sample_size
        self.wait_timeout = float(wait_timeout)
        self.poll_seconds = float(poll_seconds)
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.spark_submit_options = dict(spark_submit_options or {})

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context.get("ti")
        snapshot_lsn = ""
        results: list[TableResult] = []
        try:
            snapshot_lsn, results = self._compare()
            if self.repair == "backfill":
                results = self._stage_repairs(context, results)
        finally:
            result = ReconcileResult(
                snapshot_lsn=snapshot_lsn,
                finished_at=datetime.now(UTC).isoformat(),
                tables=tuple(results),
            )
            if ti is not None:  # pushed whatever happens after: the status page shows it
                ti.xcom_push(key=RESULT_XCOM, value=result.to_json())
        for table in result.tables:
            if table.status == "equal":
                self.log.info("reconcile %s", table.summary())
            else:
                self.log.error("reconcile %s", table.summary())
        failed = result.failed
        if failed:
            raise ReconcileError(_failure(self.pipeline, failed, self.repair))
        return result.to_json()

    def _compare(self) -> tuple[str, list[TableResult]]:
        if self.repair not in REPAIRS:
            raise ConfigError(
                f"PgReconcileOperator repair {self.repair!r} is unknown; use one of {REPAIRS}"
            )
        needed = source_and_state(self.postgres_conn_id, self.state_conn_id)
        needed += destination_connections(self.destinations)
        check_connections("PgReconcileOperator", self.task_id, needed)
        hook = PgReplicationHook(postgres_conn_id=self.postgres_conn_id)
        store = open_state_store(
            self.state_backend, hook, state_conn_id=self.state_conn_id, schema=self.state_schema
        )
        state = store.load(self.pipeline)
        tables = [table_key(t) for t in self.tables] if self.tables is not None else sorted(state.tables)
        unknown = [t for t in tables if t not in state.tables]
        if unknown:
            raise ConfigError(
                f"table(s) {', '.join(unknown)} are not part of pipeline {self.pipeline!r}; its tables: "
                f"{', '.join(sorted(state.tables)) or 'none'}"
            )
        drops = {t: drop for t in tables if (drop := state.tables[t].dropped) is not None}
        for key, drop in drops.items():  # nothing to compare with: a table of that name now is another
            self.log.warning(
                "reconcile %s: table %s is not compared: it was %s (its destinations keep its rows as of "
                "the drop)",
                self.pipeline,
                key,
                drop.describe(),
            )
        tables = [t for t in tables if t not in drops]
        conn = hook.connect()
        try:
            snapshot = open_source_snapshot(conn, [state.tables[t].source_table for t in tables])
            self.log.info(
                "reconcile %s: source snapshot %s at %s (xmin %s, xmax %s)",
                self.pipeline,
                snapshot.snapshot,
                snapshot.lsn,
                snapshot.xmin,
                snapshot.xmax,
            )
            run = Run(
                pipeline=self.pipeline,
                store=store,
                source=conn,
                snapshot=snapshot,
                changelog=Changelog(self.changelog_uri),
                sample_size=self.sample_size,
                wait_timeout=self.wait_timeout,
                poll_seconds=self.poll_seconds,
            )
            results: list[TableResult] = []
            for config in self.destinations:
                results.extend(self._destination(run, config, tables))
            return str(snapshot.lsn), results
        finally:
            conn.rollback()
            conn.close()

    def _destination(self, run: Run, config: dict[str, Any], tables: list[str]) -> list[TableResult]:
        kind = destination_kind(config)
        name = destination_name(config)
        if kind == "postgres":
            return reconcile_postgres(run, config, name, tables)
        if kind == "lake":
            from airflow_provider_pgsync.operators.reconcile_lake import reconcile_lake

            return reconcile_lake(run, config, name, tables, self)
        reason = ConfigError(
            f"destination {name} is a custom destination: reconciliation compares lake and postgres "
            "destinations only; leave it out of the reconcile task's destinations"
        )
        return [error_result(t, name, reason) for t in tables]

    def _stage_repairs(self, context: Context, results: list[TableResult]) -> list[TableResult]:
        """Stage a backfill of every differing key of each table (one per table, for the
        destinations where it differs); the result says ``repair: staged``."""
        from airflow_provider_pgsync.operators.backfill import PgBackfillOperator

        repaired: list[TableResult] = []
        by_table: dict[str, list[TableResult]] = {}
        for r in results:
            by_table.setdefault(r.table, []).append(r)
        for table, found in by_table.items():
            differing = [r for r in found if r.status == "different"]
            if not differing:
                repaired.extend(found)
                continue
            names = {r.destination for r in differing}
            configs = [c for c in self.destinations if destination_name(c) in names]
            keys = list({_frozen(k): k for r in differing for k in r.keys}.values())
            try:
                backfill = PgBackfillOperator(
                    task_id=f"{self.task_id}__repair",
                    pipeline=self.pipeline,
                    table=table,
                    destinations=configs,
                    postgres_conn_id=self.postgres_conn_id,
                    state_backend=self.state_backend,
                    state_conn_id=self.state_conn_id,
                    state_schema=self.state_schema,
                    spark_conn_id=self.spark_conn_id,
                    spark_conf=self.spark_conf,
                    spark_submit_options=self.spark_submit_options,
                    backfill_keys=keys,  # the repair branch's contract
                )
                backfill.execute(context)
            except Exception as exc:  # the comparison stands; the repair's failure is reported
                self.log.error("reconcile %s: staging the repair failed: %s", table, exc)
                repaired.extend(
                    _with(r, reason=f"repair failed: {exc}") if r in differing else r for r in found
                )
                continue
            self.log.info("reconcile %s: a backfill of %d differing key(s) is staged", table, len(keys))
            repaired.extend(_with(r, repair="staged") if r in differing else r for r in found)
        return repaired


def _frozen(key: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(key.items()))


def _with(result: TableResult, **changes: Any) -> TableResult:
    from dataclasses import replace

    return replace(result, **changes)


def _failure(pipeline: str, failed: Sequence[TableResult], repair: str) -> str:
    lines = []
    for r in failed:
        if r.status == "error":
            lines.append(f"  - {r.table} in {r.destination}: not compared: {r.reason}")
            continue
        what = f"{r.missing} missing, {r.extra} extra, {r.different} different row(s)"
        if r.repair == "staged":
            remedy = (
                "a backfill of these keys is staged: the next cdc run (apply) writes it; "
                "reconcile again after"
            )
        else:
            remedy = (
                "run reconciliation with repair: backfill to re-send exactly these keys, or rebaseline the "
                f"table in {r.destination}"
            )
        lines.append(f"  - {r.table} in {r.destination}: {what}; {remedy}")
    return (
        f"reconciliation of pipeline {pipeline!r}: {len(failed)} (table, destination) not equal to the "
        f"source (repair: {repair}):\n" + "\n".join(lines)
    )
