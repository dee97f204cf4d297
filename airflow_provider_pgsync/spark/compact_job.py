"""The lake's compaction Spark job: each table's lake segments folded into its next base.

Run by ``PgCompactOperator`` through spark-submit::

    compact_job.py --spec spec.json --result result.json

For each table: the base plus the segments after its watermark are merged into a new base
version, which is swapped in with its watermark in one view replacement (``spark/lake.py``).
A keyed table's base is laid out by key hash and only the buckets with changes are rewritten
(``spark/lake_buckets.py``); a table without a key is merged by the view's own SQL. A table
with no new segment is left as it is, so a second run in a row changes nothing. Segments
folded into the previous base are removed once no view reads them. A table rebaselined (or
compacted by another job) while it was merged is left to that writer: the publish refuses a
merge of a generation that is no longer current, and the merge is discarded (it "yields").
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_bucketing import buckets_of
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.destinations.lake_tables import (
    BUCKET,
    KIND,
    LSN_COL,
    RECORD_FIELDS,
    SEQ_COL,
    LakeTableMeta,
    merge_sql,
)
from airflow_provider_pgsync.errors import PublishConflictError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.spark.bucket_versions import BucketedBase
from airflow_provider_pgsync.spark.bucketed_segments import merge_bucketed_segments, plan
from airflow_provider_pgsync.spark.convert import column_ref
from airflow_provider_pgsync.spark.job_session import job_session
from airflow_provider_pgsync.spark.lake import LakeBaseWriter
from airflow_provider_pgsync.spark.lake_buckets import merge_buckets
from airflow_provider_pgsync.spark.metastore_postgres import open_metastore

log = logging.getLogger("pgsync.spark")
LOG_PREFIX = "pgsync compaction"
"""What the job's log lines start with (``log_to_stderr``)."""
# columns of a segment that are not the table's: the record's own, and its bucket
RESERVED = frozenset([*(name for name, _ in RECORD_FIELDS), BUCKET])


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    """Compact the tables of ``--spec``, the results written to ``--result``; 0 when all succeeded.

    In ``spark`` when given (a session of the caller's process: the tests' resident driver),
    which stays open; else in a session of its own, stopped at the end.
    """
    parser = argparse.ArgumentParser(description="pgsync lake compaction")
    parser.add_argument("--spec", required=True, help='{"destination": {...}, "tables": [...]} (JSON)')
    parser.add_argument("--result", required=True, help="where to write the result (JSON)")
    args = parser.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text())
    lake = LakeDestination.from_config(spec["destination"])
    tables = [TableRef.parse(t) for t in spec["tables"]]
    with job_session(spark, LOG_PREFIX, lake.spark_conf()) as session:
        results = run(session, lake, tables)
    Path(args.result).write_text(json.dumps(results))
    return 0 if all("error" not in r for r in results) else 1


def run(spark: SparkSession, lake: LakeDestination, tables: Sequence[TableRef]) -> list[dict[str, Any]]:
    """The compaction job in ``spark``: the metastore opened, then ``compact``."""
    open_metastore(spark, lake)
    return compact(spark, lake, tables)


def compact(spark: SparkSession, lake: LakeDestination, tables: Sequence[TableRef]) -> list[dict[str, Any]]:
    """Compact each of ``tables``; a table that fails is reported and the others go on.

    An embedded Derby metastore is held from the first table to the last (its engine cannot
    restart inside one process); a shared metastore is used table by table.
    """
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    if not tables:
        return []
    with LakeBaseWriter(spark, lake, tables[0]).catalog():
        return [_compact_one(spark, lake, table) for table in tables]


def _compact_one(spark: SparkSession, lake: LakeDestination, table: TableRef) -> dict[str, Any]:
    started = time.monotonic()
    try:
        result = compact_table(spark, lake, table)
    except Exception as exc:
        log.error("%s: compaction failed: %s", table, exc)
        return {"table": str(table), "error": f"{type(exc).__name__}: {exc}"[:2000]}
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


def compact_table(spark: SparkSession, lake: LakeDestination, table: TableRef) -> dict[str, Any]:
    """Fold the table's segments after its watermark into a new base version."""
    files = LakeFiles(lake)
    meta = files.current(table)
    if meta is None:
        raise ValueError(f"lake table {table} has no base yet: run its baseline first")
    pending = [(k, p) for k, p in files.segments(table, meta) if meta.watermark is None or k > meta.watermark]
    if not pending:
        log.info("%s: no segment after the base's watermark, nothing to compact", table)
        return {"table": str(table), "segments": 0, "location": meta.base}
    upto = pending[-1][0]
    writer = LakeBaseWriter(spark, lake, table, meta.keys)
    writer.warm_up()  # the catalog's client starts while the rows are merged and written
    started = time.monotonic()
    footers = _segment_footers(files, [p for _, p in pending])
    log.info("%s: folding %d segment(s) into a new base", table, len(pending))
    report: dict[str, Any] = {}
    buckets = 0
    paths = [p for _, p in pending]
    if meta.keys:  # laid out by key hash: only the buckets with changes are rewritten
        bucketed = _merge_keyed(spark, writer, files, meta, paths, footers, upto)
        staged, buckets = bucketed.staged, bucketed.buckets
        report = {
            "buckets": buckets,
            "buckets_rewritten": bucketed.buckets_rewritten,
            "files_rewritten": bucketed.rewritten,
            "files_kept": bucketed.kept,
            "rows_rewritten": bucketed.rewritten_rows,
            "merged_by": bucketed.merged_by,
        }
    else:  # rows counted by identity (no key): the view's own merge, the whole base rewritten
        changes, added = _read_changes(spark, files, meta, paths, footers.same_columns)
        staged = writer.stage(_merged_keyless(spark, meta, changes, added, upto))
    merged_at = time.monotonic()
    try:
        with writer.catalog():
            written = writer.publish(staged, compacted=meta, watermark=upto, buckets=buckets)
    except PublishConflictError as exc:  # rebaselined (or compacted) while it merged: it yields
        writer.discard(staged.location)
        log.warning("%s: compaction yields, its merge is discarded: %s", table, exc)
        return {"table": str(table), "segments": 0, "location": meta.base, "yielded": str(exc)}
    swapped_at = time.monotonic()
    writer.clean_up()
    if meta.watermark is not None:  # the previous view read the segments after it, no view reads these
        for key, path in files.segments(table, meta):
            if key <= meta.watermark:
                files.remove(path)
    log.info(
        "%s: %s rows in the new base %s: merged and written in %.1f s, swapped in in %.1f s",
        table,
        f"{staged.rows:,}",
        staged.location,
        merged_at - started,
        swapped_at - merged_at,
    )
    report["write_seconds"] = round(merged_at - started, 3)
    report["swap_seconds"] = round(swapped_at - merged_at, 3)
    return {**written, **report, "table": str(table), "segments": len(pending), "watermark": list(upto)}


def _merge_keyed(
    spark: SparkSession,
    writer: LakeBaseWriter,
    files: LakeFiles,
    meta: LakeTableMeta,
    paths: list[str],
    footers: _Footers,
    upto: Key,
) -> BucketedBase:
    """A keyed table's new base: from bucketed segments by tasks over runs of buckets when every
    segment has the base's buckets, no TRUNCATE and no column the base lacks, and the segments
    are not too many (``bucketed_segments.plan``); else grouped by Spark."""
    schema = StructType.fromJson(meta.schema)
    if (
        meta.buckets
        and footers.buckets == {meta.buckets}
        and not footers.truncates
        and footers.columns <= {*meta.columns, *RESERVED}
    ):  # Spark reads and moves no change, unless the segments are too many for it
        work = plan(files, paths, spark.sparkContext.defaultParallelism)
        if work is not None:
            return merge_bucketed_segments(spark, writer, files, meta, paths, schema, work)
        log.info("%s: %d segments: Spark groups their records by bucket", writer.table, len(paths))
    changes, added = _read_changes(spark, files, meta, paths, footers.same_columns)
    return merge_buckets(
        spark,
        writer,
        files,
        meta,
        changes.where(_after(meta.watermark) & _upto(upto)),
        StructType([*schema.fields, *added]),
        rewrite_all=bool(added),
        truncates=footers.truncates,
    )


def _merged_keyless(
    spark: SparkSession, meta: LakeTableMeta, changes: DataFrame, added: list[StructField], upto: Key
) -> DataFrame:
    base: DataFrame = spark.read.schema(StructType.fromJson(meta.schema)).parquet(meta.base)
    base = base.select(
        *(column_ref(c) for c in meta.columns), *(F.lit(None).cast(f.dataType).alias(f.name) for f in added)
    )
    base.createOrReplaceTempView("pgsync_base")
    changes.createOrReplaceTempView("pgsync_changes")
    columns = [*meta.columns, *(f.name for f in added)]
    return spark.sql(
        merge_sql(
            base="pgsync_base",
            changes="pgsync_changes",
            columns=columns,
            keys=meta.keys,
            after=meta.watermark,
            upto=upto,
        )
    )


@dataclass(frozen=True)
class _Footers:
    """What the Parquet footers of the segments to fold tell."""

    same_columns: bool
    """Every segment has the same columns (one footer gives them: no job to merge them)."""
    truncates: bool
    """A segment may hold a TRUNCATE (its kind ``T`` sorts after every other kind, so a row
    group's maximum shows it; a row group without statistics may hold one)."""
    columns: set[str]
    """Every column name of every segment."""
    buckets: set[int]
    """The numbers of buckets the segments' records were given (0: none)."""


def _segment_footers(files: LakeFiles, paths: list[str]) -> _Footers:
    schemas, truncates, columns, buckets = set(), False, set(), set()
    for path in paths:
        with files.fs.open_input_file(path) as handle:
            meta = pq.ParquetFile(handle).metadata
        arrow = meta.schema.to_arrow_schema()
        schemas.add(arrow.remove_metadata().to_string(show_schema_metadata=False))
        columns.update(arrow.names)
        buckets.add(buckets_of(meta))
        column = meta.schema.names.index(KIND)
        for group in range(meta.num_row_groups):
            stats = meta.row_group(group).column(column).statistics
            truncates = truncates or stats is None or not stats.has_min_max or stats.max >= "T"
    return _Footers(len(schemas) <= 1, truncates, columns, buckets)


def _read_changes(
    spark: SparkSession, files: LakeFiles, meta: LakeTableMeta, paths: list[str], same_columns: bool
) -> tuple[DataFrame, list[StructField]]:
    """The segments ``paths`` read by Spark, and the columns they have that the base lacks."""
    reader = spark.read if same_columns else spark.read.option("mergeSchema", "true")
    changes = reader.parquet(*(files.location(p) for p in paths))
    added = [f for f in changes.schema.fields if f.name not in meta.columns and f.name not in RESERVED]
    return changes, added


def _after(mark: Key | None) -> Column:
    """Records after the watermark ``mark`` (all of them when None)."""
    if mark is None:
        return F.lit(True)
    lsn, seq = F.col(LSN_COL), F.col(SEQ_COL)
    return (lsn > mark[0]) | ((lsn == mark[0]) & (seq > mark[1]))


def _upto(mark: Key) -> Column:
    lsn, seq = F.col(LSN_COL), F.col(SEQ_COL)
    return (lsn < mark[0]) | ((lsn == mark[0]) & (seq <= mark[1]))


if __name__ == "__main__":
    sys.exit(main())
