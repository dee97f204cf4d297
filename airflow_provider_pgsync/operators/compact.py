"""PgCompactOperator: fold the lake's segments into new base versions with a Spark job."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.errors import ConfigError, DestinationError
from airflow_provider_pgsync.hooks.connections import (
    check_connections,
    destination_connections,
    source_and_state,
)
from airflow_provider_pgsync.hooks.lake_metastore import metastore_passwords, resolved, with_driver_class_path
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.spark_submit import BaselineSubmitHook, driver_environment
from airflow_provider_pgsync.hooks.state_stores import open_state_store
from airflow_provider_pgsync.operators.retry import with_retry_policy
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.followed import pipeline_name

_SPARK_DIR = Path(__file__).resolve().parent.parent / "spark"


class PgCompactOperator(BaseOperator):
    """Compact the lake tables ``tables`` of the lake destination ``destination``: each table's
    base and the segments apply wrote after it become the next base version, swapped in
    atomically (``spark/compact_job.py``). Running it again without new segments changes nothing.

    :param tables: ``"schema.table"`` names. :param destination: the lake destination config
        (``{"kind": "lake", ...}``, the default lake when omitted).
    :param spark_conn_id, spark_conf, spark_submit_options: as for ``PgBaselineOperator``.
    :param pipeline: the pipeline whose state maps a table's name in the source to the pipeline's
        name of it (a config may name a table renamed in the source by its new name); with
        ``postgres_conn_id``, ``state_backend``, ``state_conn_id``, ``state_schema`` as
        ``PgCaptureOperator``'s. Without it, ``tables`` are the lake's table names.
    """

    template_fields: Sequence[str] = ("tables", "destination")

    def __init__(
        self,
        *,
        tables: Sequence[str],
        destination: Mapping[str, Any] | None = None,
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        spark_submit_options: Mapping[str, Any] | None = None,
        pipeline: str | None = None,
        postgres_conn_id: str = "postgres_default",
        state_backend: str = "variables",
        state_conn_id: str | None = None,
        state_schema: str = "pgsync",
        **kwargs: Any,
    ) -> None:
        super().__init__(**with_retry_policy(kwargs))
        self.pipeline = pipeline
        self.postgres_conn_id = postgres_conn_id
        self.state_backend = state_backend
        self.state_conn_id = state_conn_id
        self.state_schema = state_schema
        if not tables:
            raise ConfigError("PgCompactOperator needs at least one table")
        self.tables = list(tables)
        self.destination = dict(destination or {"kind": "lake"})
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.spark_submit_options = dict(spark_submit_options or {})
        self._submit: BaselineSubmitHook | None = None

    def execute(self, context: Context) -> list[dict[str, Any]]:
        if self.destination.get("kind", "lake") != "lake":
            raise ConfigError(f"PgCompactOperator compacts lake destinations, not {self.destination!r}")
        needed = destination_connections([self.destination])  # a PostgreSQL metastore's
        if self.pipeline is not None:
            needed = source_and_state(self.postgres_conn_id, self.state_conn_id) + needed
        check_connections("PgCompactOperator", self.task_id, needed)
        lake = resolved(LakeDestination.from_config(self.destination))
        tables = self._lake_tables()
        conf = {
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={_SPARK_DIR / 'log4j2.properties'}",
            **{k: str(v) for k, v in self.spark_conf.items()},
        }
        with tempfile.TemporaryDirectory(prefix="pgsync-compact-") as work:
            spec_path, result_path = Path(work, "spec.json"), Path(work, "result.json")
            spec_path.write_text(json.dumps({"destination": lake.to_config(), "tables": tables}))
            self._submit = BaselineSubmitHook(
                conn_id=self.spark_conn_id,
                conf=conf,
                name="pgsync-compaction",
                application_args=["--spec", str(spec_path), "--result", str(result_path)],
                env_vars={"PYTHONWARNINGS": "ignore::FutureWarning", **driver_environment()},
                **with_driver_class_path([lake], {"driver_memory": "2g", **self.spark_submit_options}),
            )
            passwords = metastore_passwords([lake])
            if passwords:
                self._submit.ship_passwords(passwords, Path(work))
            try:
                self._submit.submit(str(_SPARK_DIR / "compact_job.py"))
            finally:
                results = json.loads(result_path.read_text()) if result_path.exists() else None
        if results is None:
            raise DestinationError("the compaction job ended without a result; see the log above")
        for result in results:
            if "error" in result:
                self.log.error("compaction of %s failed: %s", result["table"], result["error"])
            else:
                self.log.info("compaction of %s: %s", result["table"], _summary(result))
        failed = [r["table"] for r in results if "error" in r]
        if failed:
            raise DestinationError(f"compaction failed for {', '.join(failed)}; see the log above")
        return list(results)

    def _lake_tables(self) -> list[str]:
        """``tables`` as the lake names them: the pipeline's names (a table renamed in the source
        keeps the name it was set up with)."""
        tables = [str(TableRef.parse(t)) for t in self.tables]
        if self.pipeline is None:
            return tables
        hook = PgReplicationHook(postgres_conn_id=self.postgres_conn_id)
        store = open_state_store(
            self.state_backend, hook, state_conn_id=self.state_conn_id, schema=self.state_schema
        )
        state = store.load(self.pipeline)
        return list(dict.fromkeys(pipeline_name(state, t) for t in tables))

    def on_kill(self) -> None:
        if self._submit is not None:
            self._submit.on_kill()


def _summary(result: Mapping[str, Any]) -> str:
    """What a table's compaction did, for the task's log."""
    if "yielded" in result:
        return f"yielded to another writer of the table, nothing published ({result['yielded']})"
    if not result["segments"]:
        return "no new segment, nothing to fold"
    text = f"{result['segments']} segment(s) folded, {result['rows']:,} rows in {result['location']}"
    if "buckets" in result:
        text += (
            f"; {result['buckets_rewritten']} of {result['buckets']} key-hash buckets rewritten"
            f" ({result['rows_rewritten']:,} rows in {result['files_rewritten']} file(s)),"
            f" {result['files_kept']} file(s) kept"
        )
    return f"{text}; {result['seconds']:.1f} s"
