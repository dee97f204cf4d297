"""The baseline Spark job: one table read over JDBC by ctid ranges in one exported snapshot,
converted to the destination types and written through each destination's base writer.

Run by ``PgBaselineOperator`` through spark-submit::

    baseline_job.py --spec spec.json --result result.json

No password reaches the job by value: the spec names a password file (``spec.passfile``,
``baseline/passfile.py``) that libpq and the JDBC driver read where each connection is made;
the tasks (``spark/baseline_tasks.py``) carry its name, never a password. The result file
tells the operator, per destination, what was written or why it failed (each destination's
part succeeds or fails on its own), or why the job failed as a whole.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, StructType

from airflow_provider_pgsync.baseline.partitions import ctid_predicates, leaf_predicates, partition_count
from airflow_provider_pgsync.baseline.passfile import JDBC_PASSFILE_PROPERTY
from airflow_provider_pgsync.baseline.pg_copy import Sink, partition_sql, staged_rows
from airflow_provider_pgsync.baseline.spec import BaselineJobSpec, BaselineResult, summary
from airflow_provider_pgsync.destinations.lake import lake_name
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.spark.baseline_tasks import ArrowCopy, Passfile, PostgresCopy, with_passfile
from airflow_provider_pgsync.spark.convert import convert
from airflow_provider_pgsync.spark.job_session import job_session
from airflow_provider_pgsync.spark.lake import LakeBaseWriter, StagedBase
from airflow_provider_pgsync.spark.metastore_postgres import open_metastore
from airflow_provider_pgsync.spark.progress import Progress

log = logging.getLogger("pgsync.spark")
LOG_PREFIX = "pgsync baseline"
"""What the job's log lines start with (``log_to_stderr``)."""


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    """Run the job of ``--spec``, its result written to ``--result``; 0 when it succeeded.

    In ``spark`` when given (a session of the caller's process: the tests' resident driver),
    which stays open; else in a session of its own, stopped at the end.
    """
    parser = argparse.ArgumentParser(description="pgsync baseline of one table")
    parser.add_argument("--spec", required=True, help="the job spec (JSON) written by PgBaselineOperator")
    parser.add_argument("--result", required=True, help="where to write the result (JSON)")
    args = parser.parse_args(argv)
    spec = BaselineJobSpec.from_json(Path(args.spec).read_text())
    started = time.monotonic()
    conf = {k: v for lake in spec.lakes() for k, v in lake.spark_conf().items()}
    with job_session(spark, LOG_PREFIX, conf, f"pgsync baseline {spec.table}") as session:
        result = run(session, spec, started=started)
    Path(args.result).write_text(result.to_json())
    return 0 if result.ok else 1


def run(spark: SparkSession, spec: BaselineJobSpec, *, started: float) -> BaselineResult:
    """The baseline of ``spec`` in ``spark`` (``started``: when the job began, for the session's
    time in the result)."""
    lakes = spec.lakes()
    use_passfile(spark, passfile(spec))
    for lake in lakes:
        open_metastore(spark, lake)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    # standard Parquet timestamps (INT96 is legacy and readers take it as nanoseconds)
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    slots = spark.sparkContext.defaultParallelism
    # the catalog (Spark's Hive client: seconds of JVM work) starts now, while the executors'
    # Python workers start and the partitions are copied; the swap finds it ready
    table = TableRef.parse(spec.table)
    writers = [LakeBaseWriter(spark, lake, table, spec.keys) for lake in lakes]
    try:
        locations = _locations(spec, writers)
    except Exception as exc:  # e.g. a warehouse it cannot write: reported like a failed copy
        log.error("%s: baseline failed: %s", spec.table, summarise(exc))
        return BaselineResult(ok=False, session_seconds=time.monotonic() - started, error=summarise(exc))
    fast = bool(spec.arrow_query) and bool(lakes)  # the Arrow path writes lakes only
    if fast:
        problem = _start_python_workers(spark, slots)
        if problem:
            log.warning(
                "%s: the executors cannot load the Arrow path (%s); install this package with "
                "adbc-driver-postgresql and pyarrow in their Python. Reading with Spark's JDBC "
                "source instead",
                spec.table,
                problem,
            )
            fast = False
    session_seconds = time.monotonic() - started
    predicates = plan_partitions(spec, slots)
    log.info(
        "%s: Spark session ready in %.1f s (master %s, %d task slots), reading %d partition(s)%s",
        spec.table,
        session_seconds,
        spark.sparkContext.master,
        slots,
        len(predicates),
        f" of about {spec.rows_estimate:,} rows" if spec.rows_estimate > 0 else "",
    )
    copy_started = time.monotonic()
    try:
        copied = _copy(spark, spec, predicates, writers, locations, fast)
    except Exception as exc:  # not one destination's: the job as a whole failed
        error = summarise(exc)
        log.error("%s: baseline failed: %s", spec.table, error)
        return BaselineResult(
            ok=False, partitions=len(predicates), session_seconds=session_seconds, error=error
        )
    written, catalog_seconds = copied.written, copied.catalog_seconds
    copy_seconds = time.monotonic() - copy_started - copied.cleanup_seconds  # to the base swapped in
    rows = written[0]["rows"] if written else 0
    write_seconds = copy_seconds - catalog_seconds
    lake_written = [w for w in written if w["kind"] == "lake"]
    pg_written = [w for w in written if w["kind"] == "postgres"]
    if written:
        log.info(
            "%s: %s rows read and written in %.1f s (%s rows/s), %s",
            spec.table,
            f"{rows:,}",
            write_seconds,
            f"{rows / max(write_seconds, 1e-9):,.0f}",
            "; ".join(
                (
                    [f"staged for apply in {', '.join(w['location'] for w in lake_written)}"]
                    if spec.stage_as and lake_written
                    else []
                )
                + (
                    [
                        f"swapped into {', '.join(w['table'] for w in lake_written)} in "
                        f"{catalog_seconds:.1f} s (older versions removed in "
                        f"{copied.cleanup_seconds:.1f} s more)"
                    ]
                    if lake_written and not spec.stage_as
                    else []
                )
                + [f"copied into {w['staging']} of {w['destination']}" for w in pg_written]
            ),
        )
    return BaselineResult(
        ok=not copied.failed,
        rows=rows,
        partitions=len(predicates),
        session_seconds=session_seconds,
        copy_seconds=copy_seconds,
        catalog_seconds=catalog_seconds,
        written=tuple(written),
        error=summary(copied.failed) if copied.failed else "",
        failed=copied.failed,
    )


def plan_partitions(spec: BaselineJobSpec, slots: int) -> list[str]:
    """The predicate of each partition: ctid ranges of the table, or for a partitioned table its
    leaf partitions (``spec.leaves``: each whole, packed with other small ones, or in ctid ranges
    of its own), which are logged with what each partition reads."""
    if not spec.leaves:
        count = partition_count(spec.table_bytes, spec.target_partition_bytes, slots=slots)
        return ctid_predicates(spec.blocks, count)
    planned = leaf_predicates(spec.leaves, spec.target_partition_bytes, slots=slots)
    log.info(
        "%s: partitioned table, %d leaf partition(s) read in %d partition(s): %s",
        spec.table,
        len(spec.leaves),
        len(planned),
        "; ".join(f"[{i}] {what}" for i, (_, what) in enumerate(planned)),
    )
    return [predicate for predicate, _ in planned]


def _start_python_workers(spark: SparkSession, slots: int) -> str | None:
    """Start a Python worker in every task slot with the Arrow path's modules loaded (part of
    bringing the session up, like the JVM); why the executors cannot, or None."""

    def load(_: int) -> int:
        import airflow_provider_pgsync.baseline.arrow_copy  # noqa: F401

        return 0

    try:
        spark.sparkContext.parallelize(range(slots), slots).map(load).collect()
    except Exception as exc:
        return summarise(exc)
    return None


def _locations(spec: BaselineJobSpec, writers: list[LakeBaseWriter]) -> list[str]:
    """Where each lake's rows go; for a new base, its catalog is started (``warm_up``) too."""
    if spec.stage_as:
        return [writer.backfill_location(spec.stage_as) for writer in writers]
    locations = [writer.new_location(spec.lineage or None) for writer in writers]
    schema = base_schema(spec)
    for writer, location in zip(writers, locations, strict=True):
        writer.warm_up(location, schema)
    return locations


@dataclass
class Copied:
    """What ``_copy`` did: an entry per destination written (with its ``destination`` name),
    the error of each destination that failed, the lakes' swap seconds and their clean-up's."""

    written: list[dict[str, Any]] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    catalog_seconds: float = 0.0
    cleanup_seconds: float = 0.0


def _copy(
    spark: SparkSession,
    spec: BaselineJobSpec,
    predicates: list[str],
    writers: list[LakeBaseWriter],
    locations: list[str],
    fast: bool,
) -> Copied:
    """Write the base into every destination (at ``locations``), then swap each lake's in (a
    backfill: only stage its rows). Each destination succeeds or fails on its own: a lake whose
    write or swap fails, a replica that refuses rows, is recorded in ``failed`` (a lake's version
    folder removed, a replica's partitions rolled back) while the others go on; an error that is
    no destination's own raises."""
    replicas = [(i, d) for i, d in enumerate(spec.destinations) if d.get("kind") == "postgres"]
    if writers:
        log.info(
            "%s: reading with %s", spec.table, "binary COPY into Arrow" if fast else "Spark's JDBC source"
        )
    if replicas:
        log.info("%s: copying with text COPY into %d PostgreSQL destination(s)", spec.table, len(replicas))
    rows = spark.sparkContext.accumulator(0)
    counter = (lambda: int(rows.value)) if fast or (replicas and not writers) else None
    copied = Copied()
    try:
        with Progress(spark.sparkContext, "pgsync-baseline", spec.table, spec.progress_seconds, rows=counter):
            staged = _stage_lakes(spark, spec, predicates, writers, locations, fast, rows, copied.failed)
            if replicas:
                copied.written += _copy_postgres(spark, spec, predicates, replicas, rows, copied.failed)
    except Exception:
        # before the lakes' swap: no half written base stays, nor what the catalog's early start
        # made for a first baseline
        for writer, location in zip(writers, locations, strict=True):
            _discard(spec, writer, location)
        raise
    if spec.stage_as:
        copied.written[:0] = [_staged_for_apply(writer, base) for writer, base in staged]
        return copied
    lakes: list[dict[str, Any]] = []
    published = time.monotonic()
    for writer, base in staged:
        name = lake_name(writer.destination)
        publishing = False
        try:
            with writer.catalog():
                publishing = True
                entry = writer.publish(base)
                swapped_at = time.monotonic()  # the base is durable and visible: what follows is clean-up
                copied.catalog_seconds += swapped_at - published
                _clean_up(spec, writer)
        except Exception as exc:  # this lake's swap: the others go on
            _failed(spec, copied.failed, name, exc)
            if not publishing:  # nothing of it published (a swap part way may point at it: kept)
                _discard(spec, writer, base.location)
            published = time.monotonic()
            continue
        lakes.append({**entry, "destination": name})
        published = time.monotonic()
        copied.cleanup_seconds += published - swapped_at
    copied.written[:0] = lakes
    return copied


def _stage_lakes(
    spark: SparkSession,
    spec: BaselineJobSpec,
    predicates: list[str],
    writers: list[LakeBaseWriter],
    locations: list[str],
    fast: bool,
    rows: Any,
    failed: dict[str, str],
) -> list[tuple[LakeBaseWriter, StagedBase]]:
    """Each lake's base written at its location, not yet visible; a lake whose write fails is
    recorded in ``failed`` and its location removed."""
    if not writers:
        return []
    schema = base_schema(spec)
    if not fast:
        try:
            df = read_source(spark, spec, predicates)
        except Exception as exc:  # the lakes' read of the source (Spark resolves its columns)
            for writer, location in zip(writers, locations, strict=True):
                _failed(spec, failed, lake_name(writer.destination), exc)
                _discard(spec, writer, location)
            return []
    staged = []
    for writer, location in zip(writers, locations, strict=True):
        try:
            if fast:
                base = _copy_files(spark, spec, predicates, writer, location, schema, rows)
            else:
                base = writer.stage(df, location)
        except Exception as exc:  # e.g. a value the lake cannot hold: this lake only
            _failed(spec, failed, lake_name(writer.destination), exc)
            _discard(spec, writer, location)
            continue
        staged.append((writer, base))
    return staged


def _failed(spec: BaselineJobSpec, failed: dict[str, str], destination: str, exc: BaseException) -> None:
    failed[destination] = summarise(exc)
    log.error("%s: destination %s failed: %s", spec.table, destination, failed[destination])


def _discard(spec: BaselineJobSpec, writer: LakeBaseWriter, location: str) -> None:
    """Remove a lake's version folder that will not become its base (never raises)."""
    try:
        writer.discard(location)
    except Exception as exc:  # the copy's own error is the one to report
        log.warning("%s: could not remove %s after the failed copy: %s", spec.table, location, exc)


def _clean_up(spec: BaselineJobSpec, writer: LakeBaseWriter) -> None:
    """After a lake's swap: remove what no view reads any more (a failure leaves it for the next)."""
    try:
        writer.clean_up()
    except Exception as exc:  # the new base is in: the next swap removes what is left
        log.warning("%s: older versions of %s not removed: %s", spec.table, writer.name, summarise(exc))


def _copy_postgres(
    spark: SparkSession,
    spec: BaselineJobSpec,
    predicates: list[str],
    replicas: list[tuple[int, dict[str, Any]]],
    rows: Any,
    failed: dict[str, str],
) -> list[dict[str, Any]]:
    """The PostgreSQL destinations: one Spark task per partition streams its ctid range from the
    source's text ``COPY`` into every destination's staging table (``baseline/pg_copy.py``;
    exactly once even when Spark retries a task); what each holds. A destination that failed
    in some partition is recorded in ``failed`` (the others took every row); a partition that
    could not be read fails them all. Their finish is the operator's."""
    task = postgres_task(spec, replicas, rows)
    names = [r.name for r in spec.columns]
    work = [(i, partition_sql(spec.pg_query, names, p)) for i, p in enumerate(predicates)]
    try:
        copies = spark.sparkContext.parallelize(work, len(work)).map(task).collect()
    except Exception as exc:  # the source's side of a partition: no destination has it
        for sink in task.sinks:
            _failed(spec, failed, sink.name, exc)
        return []
    for copy in copies:
        for name, error in copy.failed.items():
            if name not in failed:
                failed[name] = error
                log.error("%s: destination %s failed: %s", spec.table, name, error)
    written = []
    for sink in with_passfile(task.sinks, task.passfile):
        if sink.name in failed:
            continue
        try:
            count = staged_rows(sink, len(work))
        except Exception as exc:
            _failed(spec, failed, sink.name, exc)
            continue
        written.append({"kind": "postgres", "destination": sink.name, "staging": sink.staging, "rows": count})
    return written


def passfile(spec: BaselineJobSpec) -> Passfile:
    """The password file the spec names (empty: none)."""
    return Passfile(spec.passfile, spec.passfile_shipped)


def use_passfile(spark: SparkSession, passfile: Passfile) -> None:
    """Point the driver JVM's JDBC driver at the password file (on a ``local`` master the tasks
    run in that JVM too; executors elsewhere find it through ``PGPASSFILE``, which the operator
    sets in ``spark.executorEnv``)."""
    path = passfile.path()
    if path:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        jvm.java.lang.System.setProperty(JDBC_PASSFILE_PROPERTY, path)


def postgres_task(
    spec: BaselineJobSpec, replicas: list[tuple[int, dict[str, Any]]], rows: Any
) -> PostgresCopy:
    """The function the PostgreSQL destinations' tasks run (``rows``: an accumulator)."""
    sinks = tuple(
        Sink(
            name=str(d["name"]),
            conninfo=str(d["conninfo"]),
            staging=str(d["staging"]),
            parts=str(d["parts"]),
            columns=tuple(d["columns"]),
        )
        for _, d in replicas
    )
    return PostgresCopy(spec.conninfo, passfile(spec), tuple(spec.session), sinks, rows)


def arrow_task(spec: BaselineJobSpec, rows: Any) -> ArrowCopy:
    """The function the Arrow path's tasks run (``rows``: an accumulator)."""
    return ArrowCopy(spec.conninfo, passfile(spec), tuple(spec.session), tuple(spec.columns), rows)


def _staged_for_apply(writer: LakeBaseWriter, staged: StagedBase) -> dict[str, Any]:
    return {
        "kind": "lake",
        "destination": lake_name(writer.destination),
        "location": staged.location,
        "rows": staged.rows,
    }


def base_schema(spec: BaselineJobSpec) -> StructType:
    """The Spark schema of the table's base (what the column reads produce)."""
    ddl = ", ".join(f"`{r.name.replace('`', '``')}` {r.spark_type}" for r in spec.columns)
    return cast(StructType, DataType.fromDDL(ddl))


def _copy_files(
    spark: SparkSession,
    spec: BaselineJobSpec,
    predicates: list[str],
    writer: LakeBaseWriter,
    location: str,
    schema: StructType,
    rows: Any,
) -> StagedBase:
    """The Arrow path: one Spark task per partition streams its ctid range into a Parquet file."""
    # imported here: only this path needs ADBC
    from airflow_provider_pgsync.baseline.arrow_copy import copy_sql

    writer.make_location(location)
    task = arrow_task(spec, rows)
    work = [
        (f"{location}/part-{i:05d}.parquet", copy_sql(spec.arrow_query, task.reads, p))
        for i, p in enumerate(predicates)
    ]

    # should a task fail, ``_stage_lakes`` discards the location: nothing half-written stays behind
    total = sum(spark.sparkContext.parallelize(work, len(work)).map(task).collect())
    return writer.stage_files(location, total, schema)


def read_source(spark: SparkSession, spec: BaselineJobSpec, predicates: list[str]) -> DataFrame:
    """The table, one Spark partition per predicate, every partition in the exported snapshot."""
    properties = {
        "user": spec.user,
        "driver": "org.postgresql.Driver",
        "fetchsize": str(spec.fetch_size),
        "sessionInitStatement": spec.session_init,
        # every connection read-only, also the one Spark resolves the query's schema on (it runs
        # the query there once, without sessionInitStatement): a filter cannot write through it
        "options": "-c default_transaction_read_only=on",
    }
    # no password property: the driver reads the password file (``use_passfile``, PGPASSFILE)
    raw = spark.read.jdbc(spec.jdbc_url, spec.query, predicates=predicates, properties=properties)
    return raw.select([convert(read, spec.table) for read in spec.columns])


def summarise(exc: BaseException) -> str:
    """One readable line for the task log and the table's Errored reason.

    A Java failure is shown by its innermost cause and its top-level message (Spark wraps
    a JDBC or conversion error in several task and job failures).
    """
    java = getattr(exc, "java_exception", None)
    origin = getattr(exc, "_origin", None)  # the Java error PySpark converted (e.g. AnalysisException)
    if java is None and origin is not None and origin.getCause() is not None:
        java = origin  # its message is Spark's summary; the reason (e.g. pgjdbc's) is in its causes
    if java is None:
        return f"{type(exc).__name__}: {_first_line(str(exc))}"[:2000]
    messages: list[str] = []
    cause = java
    while cause is not None and len(messages) < 20:
        message = cause.getMessage()
        if message:
            messages.append(f"{cause.getClass().getSimpleName()}: {_first_line(str(message))}")
        cause = cause.getCause()
    if not messages:
        return str(java.toString())[:2000]
    root, top = messages[-1], messages[0]
    if root == top:
        return root[:2000]
    # the top message often repeats the root and the whole generated query: name its class only
    error_class = re.search(r"\[([A-Z_.]+)\]", top)
    return f"{root} (Spark: {error_class.group(1) if error_class else top[:300]})"[:2000]


_RAISED = re.compile(r"[A-Za-z_]\w*(\.\w+)*: ")  # "psycopg.errors.UndefinedColumn: ..."


def _first_line(message: str) -> str:
    """A message's first line; for a Python traceback (a failed task), the line of the error
    it ends with (what follows it, e.g. PostgreSQL's ``LINE 1: ...`` context, is left out)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if any(line.startswith("Traceback (most recent call last)") for line in lines):
        raised = [line for line in lines if _RAISED.match(line)]
        return raised[-1] if raised else lines[-1]
    return lines[0] if lines else message


if __name__ == "__main__":
    sys.exit(main())
