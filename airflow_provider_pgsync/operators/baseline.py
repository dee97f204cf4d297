"""PgBaselineOperator: one table's baseline as a Spark job, handed off to the stream exactly.

The operator holds the exported snapshot open while the job runs (DESIGN §2 rule 5); the
Spark job (``spark/baseline_job.py``) is submitted with the Spark provider's SparkSubmitHook.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator, Context
from psycopg import sql

from airflow_provider_pgsync.baseline import moves
from airflow_provider_pgsync.baseline.passfile import PassEntry, pass_entry
from airflow_provider_pgsync.baseline.plan import base_query
from airflow_provider_pgsync.baseline.spec import BaselineJobSpec, BaselineResult
from airflow_provider_pgsync.capture.health import baseline_slot_problem, slot_creation_bound
from airflow_provider_pgsync.destinations.configs import destination_kind, destination_name
from airflow_provider_pgsync.destinations.lake import LakeDestination, new_version
from airflow_provider_pgsync.destinations.pg_typedefs import read_columns
from airflow_provider_pgsync.errors import (
    BaselineError,
    BaselinePartlyFailedError,
    ConfigError,
    PgSyncError,
    SlotError,
)
from airflow_provider_pgsync.hooks.catalog import (
    LeafPartition,
    column_infos,
    identity_columns,
    leaf_partitions,
    relation_size,
    table_columns,
)
from airflow_provider_pgsync.hooks.connections import (
    check_connections,
    destination_connections,
    source_and_state,
)
from airflow_provider_pgsync.hooks.lake_metastore import (
    JDBC_DRIVER_JAR,
    metastore_passwords,
    resolved,
    with_driver_class_path,
)
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.snapshot import BaselineSnapshot
from airflow_provider_pgsync.hooks.spark_submit import BaselineSubmitHook, driver_environment
from airflow_provider_pgsync.hooks.state_stores import open_state_store
from airflow_provider_pgsync.hooks.targets import tls_note
from airflow_provider_pgsync.operators.baseline_destinations import (
    ReplicaBaselines,
    check_custom,
    load_custom,
)
from airflow_provider_pgsync.operators.retry import with_retry_policy
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.publication import PublishedTable, published_table
from airflow_provider_pgsync.source.row_condition import Condition
from airflow_provider_pgsync.source.text_output import TEXT_OUTPUT
from airflow_provider_pgsync.state.model import (
    Errored,
    PipelineState,
    SyncDone,
)
from airflow_provider_pgsync.state.store import StateStore, check_state_backend, update_state
from airflow_provider_pgsync.typemap.spark import arrow_reads, spark_reads

_SPARK_DIR = Path(__file__).resolve().parent.parent / "spark"


class PgBaselineOperator(BaseOperator):
    """Copy one table into its destinations with a Spark job reading one exported snapshot.

    The table goes DataSync while the job runs, then SyncDone{snapshot, baseline_lsn} once the
    base is durable, or Errored with the cause. A table already past Init needs
    ``rebaseline=True`` (a retry of this task re-runs its own interrupted attempt).

    Each destination's part succeeds or fails on its own (a lake refusing a value, a replica
    refusing the rows, a custom destination's ``load_baseline`` raising): the ones that
    succeeded go SyncDone, each failed one Errored with its reason and the remedy (rebaseline
    the table in that destination alone), and the task fails with the non-retryable
    ``BaselinePartlyFailedError`` naming them. A failure of the source or of the job as a whole,
    or of every destination, fails them all as before.

    :param pipeline: the pipeline name (key of its state).
    :param table: ``"schema.table"`` or ``{"table": ..., "columns": [...], "row_filter": ...}``,
        as the publication has it.
    :param slot_name: the pipeline's replication slot (the one capture reads); default: the slot
        the pipeline's state records (the setup DAG and capture record it). The baseline refuses,
        before it writes anything, when the slot does not exist, is lost or replaced, or was
        created after the snapshot: the changes in between would be lost.
    :param destinations: destination configs; default one lake destination
        ``{"kind": "lake", "warehouse": ..., "database": "pgsync", "metastore": "derby"}``;
        PostgreSQL replicas as ``{"kind": "postgres", "conn_id": ..., "name": ...,
        "control_schema": ..., "fillfactor": ...}`` (``PostgresDestination.from_config``):
        the job fills a staging table in each, swapped in once the job has succeeded
        (``destinations/postgres_baseline.py``); your own destinations as ``{"kind": "custom",
        "class": "package.module.Class", "name": ..., **options}``: the operator reads the rows
        in the snapshot itself and hands them to the class's ``load_baseline`` (no Spark job
        when the run has only custom destinations). Every destination records this run's
        lineage id (the result's ``lineage``).
    :param target_partition_mb: about how much of the table each Spark partition reads.
    :param copy_path: ``auto`` (default) reads tables whose columns are all numbers, booleans,
        text, bytea, dates and timestamps with binary ``COPY`` into Arrow (ADBC) inside Spark
        tasks (executors need this package's Python environment); ``off`` always uses Spark's
        JDBC source.
    :param spark_conn_id: the Spark connection (master, deploy mode); ``local[*]`` when it
        does not exist. :param spark_conf: extra Spark configuration. :param spark_jars:
        jars for the driver and executors (the PostgreSQL JDBC driver by default).
    :param spark_submit_options: further SparkSubmitHook arguments (``driver_memory``, 2g by
        default, which on a local master holds the executors too; ``executor_memory``,
        ``total_executor_cores``, ...).
    :param spark_password_file: a libpq password file (``.pgpass`` format) that exists at this
        path for the job's driver and every executor, e.g. a Kubernetes secret the cluster
        manager mounts; it must hold the source's and the PostgreSQL destinations' passwords.
        By default the operator writes such a file (0600) and ships it with the job
        (``--files``); required on Kubernetes in cluster mode. Passwords never travel by value:
        not on the command line, in Spark's configuration nor in a task.
    """

    template_fields: Sequence[str] = ("pipeline", "table", "slot_name", "destinations", "spark_conf")

    def __init__(
        self,
        *,
        pipeline: str,
        table: str | Mapping[str, Any],
        slot_name: str | None = None,
        postgres_conn_id: str = "postgres_default",
        destinations: Sequence[Mapping[str, Any]] | None = None,
        state_backend: str = "variables",
        state_conn_id: str | None = None,
        state_schema: str = "pgsync",
        rebaseline: bool = False,
        target_partition_mb: float = 256,
        fetch_size: int = 10_000,
        progress_seconds: float = 10,
        copy_path: str = "auto",
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        spark_jars: str | None = None,
        spark_submit_options: Mapping[str, Any] | None = None,
        spark_password_file: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**with_retry_policy(kwargs))
        check_state_backend(state_backend)
        if target_partition_mb <= 0:
            raise ConfigError(f"target_partition_mb must be positive, not {target_partition_mb}")
        self.pipeline = pipeline
        self.table = table
        self.slot_name = slot_name
        self.postgres_conn_id = postgres_conn_id
        self.destinations = list(destinations) if destinations is not None else [{"kind": "lake"}]
        self.state_backend = state_backend
        self.state_conn_id = state_conn_id
        self.state_schema = state_schema
        self.rebaseline = rebaseline
        self.target_partition_mb = target_partition_mb
        self.fetch_size = fetch_size
        self.progress_seconds = progress_seconds
        if copy_path not in ("auto", "off"):
            raise ConfigError(f"copy_path {copy_path!r} is unknown; use 'auto' or 'off'")
        self.copy_path = copy_path
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.spark_jars = spark_jars
        self.spark_submit_options = dict(spark_submit_options or {})
        self.spark_password_file = spark_password_file
        self._submit: BaselineSubmitHook | None = None
        self._replicas = ReplicaBaselines([], self.log)  # this run's PostgreSQL destinations

    def execute(self, context: Context) -> dict[str, Any]:
        self.check_connections()
        lakes = [_lake(d) for d in self.destinations if destination_kind(d) not in ("postgres", "custom")]
        lineage = new_version()
        hook = PgReplicationHook(postgres_conn_id=self.postgres_conn_id)
        store = open_state_store(
            self.state_backend, hook, state_conn_id=self.state_conn_id, schema=self.state_schema
        )
        name, spec_table = self._follow(hook, store, published_table(self.table))
        key = str(name)
        slot, created = self._check_slot(hook, store, key)
        ti = context.get("ti")
        restart = self.rebaseline or getattr(ti, "try_number", 1) > 1
        names = [destination_name(d) for d in self.destinations]
        holder = f"pgsync baseline {self.pipeline} {key} {lineage}"
        # held from before DataSync until its outcome is recorded: apply tells a dead baseline by it
        with hook.baseline_lock(self.pipeline, key, lineage, holder):
            update_state(
                store,
                self.pipeline,
                lambda s: moves.started(
                    s if s.slot_name else s.with_slot(slot, created), key, names, lineage, restart=restart
                ),
            )
            self.log.info("baseline %s: %s in DataSync under lineage %s", key, ", ".join(names), lineage)
            raised: dict[str, BaseException] = {}  # per destination that failed here, why
            try:
                with hook.baseline_snapshot(spec_table.table) as (snapshot, conn):
                    self._check_slot(hook, store, key, baseline_lsn=snapshot.baseline_lsn)
                    self.log.info(
                        "baseline %s: snapshot %s (xmin %d, xmax %d, %d in progress) at %s",
                        key,
                        snapshot.snapshot,
                        snapshot.xmin,
                        snapshot.xmax,
                        len(snapshot.xip),
                        snapshot.baseline_lsn,
                    )
                    columns = column_infos(conn, spec_table.table, spec_table.columns)
                    self._note_generated(conn, spec_table)
                    check_custom(self.destinations)
                    spark = any(destination_kind(d) != "custom" for d in self.destinations)  # lakes, replicas
                    self._replicas = ReplicaBaselines(self.destinations, self.log)
                    result = BaselineResult(ok=True)
                    if spark:
                        spec = self._job_spec(
                            hook, conn, spec_table, snapshot, lakes, lineage=lineage, name=name
                        )
                        spec = self._replicas.prepare(conn, spec_table, columns, spec, name=name)
                        raised.update(self._replicas.refused)
                        if spec.destinations:
                            result = self._run_job(spec)
                    else:
                        self.log.info(
                            "baseline %s: no lake or PostgreSQL destination in this run, no Spark job", key
                        )
                    # in the snapshot still: the custom destinations read it here, unless the job
                    # failed as a whole (e.g. its session or the snapshot: they would fail alike)
                    if not result.failed_as_a_whole:
                        result, custom = load_custom(
                            self.destinations,
                            conn,
                            spec_table,
                            columns,
                            lineage,
                            result,
                            self.log,
                            spark_ran=spark,
                            name=name,
                        )
                        raised.update(custom)
                finishing = time.monotonic()
                raised.update(self._replicas.finish(name, result))
                finish_seconds = time.monotonic() - finishing
            except Exception as exc:
                self._replicas.discard()
                self._fail(store, key, names, lineage, exc)
                raise
            if result.failed_as_a_whole:
                failure = f"baseline of {key} failed in Spark: {result.error}"
                error = BaselineError(failure + tls_note(failure, self._conn_ids()))
                self._fail(store, key, names, lineage, error)
                raise error
            errors = self._errors(key, names, result, raised)
            succeeded = [n for n in names if n not in errors]
            if not succeeded:  # as when the job fails: every destination Errored, the task retryable
                self._log_outcomes(key, result, errors, snapshot.baseline_lsn)
                self._fail_each(store, key, lineage, errors)
                raise _every_one_failed(key, errors)
            done = SyncDone(
                snapshot.snapshot,
                snapshot.baseline_lsn,
                snapshot.xmin,
                snapshot.xmax,
                snapshot.xip,
                lineage=lineage,
            )
            errored = {
                n: Errored(reason=_reason(exc), solution=_rebaseline_alone(key, n), retry="manual")
                for n, exc in errors.items()
            }

            def finish(state: PipelineState) -> PipelineState:
                version = moves.copied_version(state.table(key), columns)
                # the columns copied become the table's first known ones if capture has seen none
                # yet: a change of them before capture first sees the table then starts a new
                # schema version, which apply checks against this copy
                state = state.with_first_columns(key, columns)
                copied = dataclasses.replace(done, schema_version=version)
                return moves.concluded(state, key, succeeded, copied, errored)

            update_state(store, self.pipeline, finish)
        self._log_outcomes(key, result, errors, snapshot.baseline_lsn)
        if errored:
            raise _partly_failed(key, succeeded, errored, snapshot.baseline_lsn)
        self.log.info(
            "baseline %s: %s rows written, SyncDone at %s in %s (Ready once apply passes it)",
            key,
            f"{result.rows:,}",
            snapshot.baseline_lsn,
            ", ".join(names),
        )
        return {
            "table": key,
            "rows": result.rows,
            "partitions": result.partitions,
            "baseline_lsn": str(snapshot.baseline_lsn),
            "snapshot": snapshot.snapshot,
            "session_seconds": round(result.session_seconds, 3),
            "copy_seconds": round(result.copy_seconds, 3),
            "catalog_seconds": round(result.catalog_seconds, 3),
            # the PostgreSQL destinations' finish after the job: key, analyze, swap
            "finish_seconds": round(finish_seconds, 3),
            "written": list(result.written),
            "lineage": lineage,
        }

    def _errors(
        self, key: str, names: list[str], result: BaselineResult, raised: Mapping[str, BaseException]
    ) -> dict[str, BaseException]:
        """Per destination of ``names`` whose part failed, its error: what was raised here (its
        staging table, its swap, a custom destination's load), or the job's report of it."""
        errors: dict[str, BaseException] = {}
        for name in names:
            reported = result.error_of(name)
            if name in raised:
                errors[name] = raised[name]
            elif reported is not None:
                failure = f"baseline of {key} failed in Spark: {reported}"
                errors[name] = BaselineError(failure + tls_note(failure, self._conn_ids()))
        return errors

    def _log_outcomes(
        self, key: str, result: BaselineResult, errors: Mapping[str, BaseException], lsn: LSN
    ) -> None:
        """One line per destination: what it holds now, or why it failed."""
        rows = {w.get("destination"): w.get("rows") for w in result.written}
        for config in self.destinations:
            name = destination_name(config)
            if name in errors:
                self.log.error("baseline %s: destination %s failed: %s", key, name, _reason(errors[name]))
            else:
                count = rows.get(name)
                self.log.info(
                    "baseline %s: destination %s baselined%s, SyncDone at %s",
                    key,
                    name,
                    f" ({count:,} rows)" if isinstance(count, int) else "",
                    lsn,
                )

    def _note_generated(self, conn: Any, table: PublishedTable) -> None:
        """Say which generated columns each kind of destination leaves out or computes."""
        generated = [name for name, g in read_columns(conn, table.table) if g is not None]
        if not generated:
            return
        lakes = [destination_name(d) for d in self.destinations if destination_kind(d) == "lake"]
        others = [destination_name(d) for d in self.destinations if destination_kind(d) == "custom"]
        replicas = [destination_name(d) for d in self.destinations if destination_kind(d) == "postgres"]
        self.log.info(
            "baseline %s: generated column(s) %s are not sent by logical replication:%s%s%s",
            table.table,
            ", ".join(generated),
            f" left out of {', '.join(lakes)} (compute them in queries);" if lakes else "",
            f" left out of {', '.join(others)};" if others else "",
            f" created as generated columns in {', '.join(replicas)}" if replicas else "",
        )

    def on_kill(self) -> None:
        if self._submit is not None:
            self._submit.on_kill()

    # ---- steps

    def _follow(
        self, hook: PgReplicationHook, store: StateStore, table: PublishedTable
    ) -> tuple[TableRef, PublishedTable]:
        """The pipeline's name of ``table`` (its state key and destination tables) and its entry
        under its name in the source now: a table renamed in the source is followed by the
        relation OID the state records (``state.followed``); StateError when the table it follows
        was dropped there (``FollowedTable.check_present``)."""
        followed = hook.follow_tables([table.table], store.load(self.pipeline))[0]
        followed.check_present(self.pipeline)
        if followed.renamed:
            self.log.info("table %s is named %s in the source (renamed there)", followed.key, followed.source)
        return followed.key, dataclasses.replace(table, table=followed.source)

    def check_connections(self) -> None:
        """ConfigError naming each connection (source, state store, destinations) Airflow does
        not know, before anything is written."""
        needed = source_and_state(self.postgres_conn_id, self.state_conn_id)
        needed += destination_connections(self.destinations)
        check_connections(type(self).__name__, self.task_id, needed)

    def _check_slot(
        self, hook: PgReplicationHook, store: StateStore, key: str, *, baseline_lsn: LSN | None = None
    ) -> tuple[str, LSN]:
        """The pipeline's slot and an LSN at or after its creation; SlotError naming the slot, the
        pipeline, the table and the remedy unless the slot may carry every change after the
        snapshot (``capture.health.baseline_slot_problem``)."""
        slot = self.slot_name or store.load(self.pipeline).slot_name
        where = f"baseline of table {key} in pipeline {self.pipeline!r} (task {self.task_id})"
        if not slot:
            raise SlotError(
                f"{where} refused: no replication slot to check (the task has no slot_name and the "
                f"pipeline's state records none); pass slot_name=<the slot capture reads>, created before "
                "the baseline (PgCreateSlotOperator), or run the pipeline's setup DAG first"
            )
        info = hook.slot_info(slot)
        state = store.load(self.pipeline)  # after the slot: a capture meanwhile is in the state
        problem = baseline_slot_problem(state, slot, info, baseline_lsn=baseline_lsn)
        if problem is not None:
            raise SlotError(f"{where} refused: {problem.reason}; remedy: {problem.solution}")
        assert info is not None
        created = slot_creation_bound(state, slot, info)
        assert created is not None
        return slot, created

    def _job_spec(
        self,
        hook: PgReplicationHook,
        conn: Any,
        table: PublishedTable,
        snapshot: BaselineSnapshot,
        lakes: list[LakeDestination],
        *,
        condition: Condition | None = None,
        stage_as: str = "",
        lineage: str = "",
        name: TableRef | None = None,
    ) -> BaselineJobSpec:
        """The Spark job's spec (for the lake destinations); for a backfill, the rows matching
        ``condition``, staged under ``stage_as``. ``table`` is read under its name in the source,
        the destinations' tables are named ``name`` (default: the same)."""
        columns = table_columns(conn, table.table, table.columns)
        reads = spark_reads(columns, str(table.table))
        size, block_size, rows = relation_size(conn, table.table)
        leaves = self._leaves(conn, table.table)
        if leaves:
            size, rows = sum(leaf.bytes for leaf in leaves), sum(leaf.rows for leaf in leaves)
        names = [leaf.table for leaf in leaves]
        query = base_query(table, reads, condition, names).as_string(conn)
        session = (
            "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",
            sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot.snapshot)).as_string(conn),
            # a task reads its range as long as it takes, idle in the transaction while Spark
            # writes what it read: never cut by a low database or role default
            "SET LOCAL statement_timeout = 0",
            "SET LOCAL idle_in_transaction_session_timeout = 0",
            # the text settings of capture's peek, so a value read as text is pgoutput's text
            *TEXT_OUTPUT,
        )
        fast = arrow_reads(reads) if self.copy_path == "auto" else None
        arrow_query = base_query(table, fast, condition, names).as_string(conn) if fast else ""
        url, user, _ = hook.jdbc_target()
        self.log.info(
            "%s %s: %d columns, %.1f MB, %s",
            "backfill" if stage_as else "baseline",
            table.table,
            len(reads),
            size / 1e6,
            f"about {int(rows):,} rows" if rows > 0 else "row count not estimated yet (never analyzed)",
        )
        return BaselineJobSpec(
            table=str(name or table.table),
            jdbc_url=url,
            conninfo=hook.libpq_target(),
            user=user,
            query=query,
            blocks=math.ceil(size / block_size),
            table_bytes=size,
            target_partition_bytes=int(self.target_partition_mb * 1024 * 1024),
            session=session,
            columns=tuple(reads),
            destinations=tuple(lake.to_config() for lake in lakes),
            fetch_size=self.fetch_size,
            rows_estimate=int(rows),
            progress_seconds=self.progress_seconds,
            arrow_query=arrow_query,
            keys=identity_columns(conn, table.table),
            stage_as=stage_as,
            lineage=lineage,
            leaves=tuple((str(p.table), math.ceil(p.bytes / block_size), p.bytes) for p in leaves),
        )

    def _leaves(self, conn: Any, table: TableRef) -> list[LeafPartition]:
        """The leaf partitions a partitioned ``table`` is read by, in the snapshot (``conn`` is in
        its transaction); none for another table, or (with a warning) when the role may not read
        each leaf alone: then the table is read through its root by one partition."""
        leaves = leaf_partitions(conn, table)
        if leaves is None:
            return []
        unreadable = [str(leaf.table) for leaf in leaves if not leaf.readable]
        if unreadable:
            self.log.warning(
                "baseline %s: partitioned table read through its root by one Spark partition: the role "
                "cannot read these leaf partitions alone (no SELECT on them, or not plain tables): %s; "
                "GRANT SELECT on them to read the leaves in parallel",
                table,
                ", ".join(unreadable),
            )
            return []
        self.log.info(
            "baseline %s: partitioned table, %d leaf partition(s) in the snapshot: %s",
            table,
            len(leaves),
            ", ".join(f"{leaf.table} ({leaf.bytes / 1e6:.1f} MB)" for leaf in leaves) or "none",
        )
        return leaves

    def _conn_ids(self) -> list[str]:
        """The Airflow connections a Spark job of this operator uses: the source's and its replicas'."""
        replicas = (str(d.get("conn_id")) for d in self.destinations if destination_kind(d) == "postgres")
        return [self.postgres_conn_id, *replicas]

    def _run_job(self, spec: BaselineJobSpec) -> BaselineResult:
        with tempfile.TemporaryDirectory(prefix="pgsync-baseline-") as work:
            self._submit = self._submit_hook(spec, Path(work))
            result_path = Path(work, "result.json")
            try:
                self._submit.submit(str(_SPARK_DIR / "baseline_job.py"))
            except Exception as exc:
                if result_path.exists():
                    return BaselineResult.from_json(result_path.read_text())
                raise BaselineError(f"the baseline job of {spec.table} did not run: {exc}") from exc
            if not result_path.exists():
                raise BaselineError(
                    f"the baseline job of {spec.table} ended without a result; see the log above"
                )
            return BaselineResult.from_json(result_path.read_text())

    def _submit_hook(self, spec: BaselineJobSpec, work: Path) -> BaselineSubmitHook:
        """The hook that submits the job of ``spec``, its spec, result and password file in the
        private folder ``work``. Passwords travel only in the password file (``_pass_by_file``)."""
        conf = {
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={_SPARK_DIR / 'log4j2.properties'}",
            **{k: str(v) for k, v in self.spark_conf.items()},
        }
        jars = (
            self.spark_jars
            if self.spark_jars is not None
            else (JDBC_DRIVER_JAR if Path(JDBC_DRIVER_JAR).exists() else None)
        )
        spec_path, result_path = work / "spec.json", work / "result.json"
        options = with_driver_class_path(spec.lakes(), {"driver_memory": "2g", **self.spark_submit_options})
        submit = BaselineSubmitHook(
            conn_id=self.spark_conn_id,
            conf=conf,
            jars=jars,
            name=f"pgsync-baseline-{self.pipeline}",
            application_args=["--spec", str(spec_path), "--result", str(result_path)],
            env_vars={"PYTHONWARNINGS": "ignore::FutureWarning", **driver_environment()},
            **options,
        )
        spec = self._pass_by_file(spec, submit, work)
        spec_path.write_text(spec.to_json())
        return submit

    def _pass_by_file(self, spec: BaselineJobSpec, submit: BaselineSubmitHook, work: Path) -> BaselineJobSpec:
        """``spec`` naming the password file of its connections, which ``submit`` gives the job:
        ``spark_password_file`` when set (the cluster manager provides it), else a file written
        in ``work`` and shipped with the job. The driver and the executors' JVMs find it through
        ``PGPASSFILE`` (a path, no secret), the job's Python tasks through the spec."""
        if self.spark_password_file:
            path = self.spark_password_file
        else:
            entries = self._pass_entries(spec)
            if not entries:
                return spec  # no connection has a password (e.g. trust or certificate auth)
            if submit.kubernetes and submit.cluster_mode:
                raise ConfigError(
                    f"baseline of {spec.table}: on Kubernetes in cluster mode the job cannot take a "
                    "password file from this worker; store a password file (.pgpass format, lines for "
                    f"connection {self.postgres_conn_id!r} and the PostgreSQL destinations) in a "
                    "Kubernetes secret, mount it with spark.kubernetes.driver.secrets.<secret> and "
                    "spark.kubernetes.executor.secrets.<secret>, and name the file with spark_password_file"
                )
            path = submit.ship_passwords(entries, work)
            return dataclasses.replace(spec, passfile=path, passfile_shipped=True)
        submit.set_env("PGPASSFILE", path)
        submit.set_conf("spark.executorEnv.PGPASSFILE", path)
        return dataclasses.replace(spec, passfile=path, passfile_shipped=False)

    def _pass_entries(self, spec: BaselineJobSpec) -> list[PassEntry]:
        """The passwords of the source, the PostgreSQL destinations and the lakes' PostgreSQL
        metastores, for their conninfos."""
        password = PgReplicationHook(postgres_conn_id=self.postgres_conn_id).connection.password
        entries = [pass_entry(spec.conninfo, password)] if password else []
        return entries + self._replicas.pass_entries() + metastore_passwords(spec.lakes())

    # ---- custom destinations (Destination.load_baseline)

    def _fail(self, store: StateStore, key: str, names: list[str], lineage: str, exc: BaseException) -> None:
        """Each destination of this baseline Errored with the cause (a destination moved on
        meanwhile keeps its phase); when the state store cannot be reached, apply records it
        later (the baseline's lock is gone then)."""
        self._fail_each(store, key, lineage, dict.fromkeys(names, exc))

    def _fail_each(
        self, store: StateStore, key: str, lineage: str, errors: Mapping[str, BaseException]
    ) -> None:
        """Each destination of ``errors`` Errored with its own cause, in one state update (as
        ``_fail``)."""
        solution = (
            "fix the cause named in the reason, then rebaseline the table "
            "(for a failure inside Spark the task log has Spark's output)"
        )

        def fail(state: PipelineState) -> PipelineState:
            for name, exc in errors.items():
                errored = Errored(reason=_reason(exc), solution=solution, retry="manual")
                state = moves.failed(state, key, [name], lineage, errored)
            return state

        try:
            update_state(store, self.pipeline, fail)
        except Exception as state_error:
            self.log.error("baseline %s: could not record Errored: %s", key, state_error)


def _reason(exc: BaseException) -> str:
    """An Errored destination's reason: the error's message (with its class when not ours)."""
    reason = str(exc) if isinstance(exc, PgSyncError) else f"{type(exc).__name__}: {exc}"
    return reason[:2000]


def _rebaseline_alone(key: str, name: str) -> str:
    """The remedy of a destination whose part of a baseline failed while others succeeded."""
    return (
        f"fix what the reason says, then rebaseline table {key} in destination {name} alone: trigger "
        f"the pipeline's baseline DAG with tables [{key}], destinations [{name}] and mode rebaseline "
        "(or run PgBaselineOperator with rebaseline=True and that destination only); the other "
        "destinations keep streaming"
    )


def _partly_failed(
    key: str, succeeded: Sequence[str], errored: Mapping[str, Errored], lsn: LSN
) -> BaselinePartlyFailedError:
    """The task's error when some destinations failed: each with its reason and remedy."""
    return BaselinePartlyFailedError(
        f"baseline of table {key} failed in {len(errored)} of {len(errored) + len(succeeded)} "
        f"destinations (now Errored); {', '.join(succeeded)} baselined (SyncDone at {lsn}, Ready "
        "once apply passes it): do not retry this task, which would baseline those again:\n"
        + "\n".join(
            f"  - destination {name}: {phase.reason}; remedy: {phase.solution}"
            for name, phase in errored.items()
        )
    )


def _every_one_failed(key: str, errors: Mapping[str, BaseException]) -> BaseException:
    """The task's error when every destination failed: the error itself for one (as when the
    job fails), else one naming each."""
    if len(errors) == 1:
        return next(iter(errors.values()))
    return BaselineError(
        f"baseline of table {key} failed in every destination:\n"
        + "\n".join(f"  - destination {name}: {_reason(exc)}" for name, exc in errors.items())
    )


def _lake(config: Mapping[str, Any]) -> LakeDestination:
    kind = config.get("kind", "lake")
    if kind != "lake":
        raise ConfigError(
            f"destination kind {kind!r} cannot take a baseline; "
            "the baseline writes to 'lake', 'postgres' and 'custom' destinations"
        )
    return resolved(LakeDestination.from_config(dict(config)))
