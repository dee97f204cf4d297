"""The lake side of a reconciliation: each table's rows as of a watermark, as row digests.

Run by ``PgReconcileOperator`` through spark-submit::

    reconcile_job.py --spec spec.json --result result.json

For each table of the spec: the rows of its current generation as of watermark ``upto``
(the base plus its lake segments up to ``upto``, merged by the view's own SQL,
``lake_tables.merge_sql``: no later segment is read, so apply may go on meanwhile), turned
into row digests by ``reconcile.canonical`` (key text, MD5 of the key text, MD5 of the row
text), the keys of ``left_out`` left out, written as Parquet to the table's ``out`` folder.
A compaction that folded segments after ``upto`` into the base since the operator read the
watermark makes that table fail (reconcile again); the base's files are read by their
location, so a later compaction cannot change what this job reads.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.destinations.lake_tables import RECORD_FIELDS, merge_sql
from airflow_provider_pgsync.reconcile.canonical import arrow_texts, md5_hex, row_text
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.spark.convert import column_ref
from airflow_provider_pgsync.spark.job_session import job_session

log = logging.getLogger("pgsync.spark")
LOG_PREFIX = "pgsync reconciliation"
"""What the job's log lines start with (``log_to_stderr``)."""

DIGEST_SCHEMA = pa.schema([("k", pa.string()), ("kh", pa.string()), ("rh", pa.string())])


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    """Write the digests of the tables of ``--spec``, the results to ``--result``.

    In ``spark`` when given (a session of the caller's process: the tests' resident driver),
    which stays open; else in a session of its own, stopped at the end.
    """
    parser = argparse.ArgumentParser(description="pgsync reconciliation (lake side)")
    parser.add_argument("--spec", required=True, help='{"destination": {...}, "tables": [...]} (JSON)')
    parser.add_argument("--result", required=True, help="where to write the result (JSON)")
    args = parser.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text())
    lake = LakeDestination.from_config(spec["destination"])
    with job_session(spark, LOG_PREFIX, {}) as session:
        results = run(session, lake, spec["tables"])
    Path(args.result).write_text(json.dumps(results))
    return 0


def run(spark: SparkSession, lake: LakeDestination, tables: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The digests of each of ``tables`` (a failed one is reported, the others go on)."""
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    return [_one(spark, lake, table) for table in tables]


def _one(spark: SparkSession, lake: LakeDestination, spec: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    try:
        rows = digest_table(spark, lake, spec)
    except Exception as exc:
        log.error("%s: reading the lake failed: %s", spec["table"], exc)
        return {"table": spec["table"], "error": f"{type(exc).__name__}: {exc}"[:2000]}
    return {"table": spec["table"], "rows": rows, "seconds": round(time.monotonic() - started, 3)}


def digest_table(spark: SparkSession, lake: LakeDestination, spec: dict[str, Any]) -> int:
    """Write the digests of the table's rows as of ``spec["upto"]``; the number of rows."""
    table = TableRef.parse(spec["table"])
    upto = (int(spec["upto"][0]), int(spec["upto"][1])) if spec["upto"] is not None else None
    files = LakeFiles(lake)
    meta = files.current(table)
    if meta is None:
        raise ValueError(f"lake table {table} has no base: run its baseline")
    if meta.watermark is not None and (upto is None or meta.watermark > upto):
        raise ValueError(
            f"lake table {table} was compacted past watermark {upto} while reconciliation ran "
            f"(its base holds changes up to {meta.watermark}); reconcile again"
        )
    pending = [
        p
        for k, p in files.segments(table, meta)
        if (meta.watermark is None or k > meta.watermark) and upto is not None and k <= upto
    ]
    columns: list[str] = spec["columns"]
    keys: list[str] = spec["keys"]
    base: DataFrame = spark.read.schema(StructType.fromJson(meta.schema)).parquet(meta.base)
    record_fields = [StructField(n, _record_type(t)) for n, t in RECORD_FIELDS]
    if pending:
        changes = spark.read.option("mergeSchema", "true").parquet(*(files.location(p) for p in pending))
    else:
        changes = spark.createDataFrame([], StructType([*base.schema.fields, *record_fields]))
    types = {f.name: f.dataType for f in [*changes.schema.fields, *base.schema.fields]}
    base.select(
        *(column_ref(c) if c in meta.columns else F.lit(None).cast(types[c]).alias(c) for c in columns)
    ).createOrReplaceTempView("pgsync_base")
    changes.select(
        *(
            column_ref(c) if c in changes.columns else F.lit(None).cast(types[c]).alias(c)
            for c in columns
        ),
        *(F.col(n) for n, _ in RECORD_FIELDS),
    ).createOrReplaceTempView("pgsync_changes")
    current = spark.sql(
        merge_sql(
            base="pgsync_base",
            changes="pgsync_changes",
            columns=columns,
            keys=list(meta.keys),
            after=meta.watermark,
            upto=upto,
        )
    )
    log.info("%s: base %s and %d lake segment(s) up to %s", table, meta.base, len(pending), upto)
    left_out = frozenset(spec["left_out"])
    key_positions = [columns.index(k) for k in keys]

    def digests(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            texts = [arrow_texts(batch.column(i)) for i in range(batch.num_columns)]
            out_k, out_kh, out_rh = [], [], []
            for values in zip(*texts, strict=True):
                key = row_text([values[i] for i in key_positions])
                if key in left_out:
                    continue
                out_k.append(key)
                out_kh.append(md5_hex(key))
                out_rh.append(md5_hex(row_text(values)))
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(out_k, pa.string()),
                    pa.array(out_kh, pa.string()),
                    pa.array(out_rh, pa.string()),
                ],
                schema=DIGEST_SCHEMA,
            )

    digested = current.mapInArrow(digests, "k string, kh string, rh string")
    digested.write.mode("overwrite").parquet(spec["out"])
    written = spark.read.parquet(spec["out"]).count()
    log.info("%s: %s row digests as of %s", table, f"{written:,}", upto)
    return int(written)


def _record_type(name: str) -> Any:
    from pyspark.sql.types import LongType, StringType

    return StringType() if name == "string" else LongType()


if __name__ == "__main__":
    sys.exit(main())
