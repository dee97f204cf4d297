"""A short Spark driver that loads the classes pgsync's jobs load, so that the JVM can archive
them when it exits (``hooks/spark_class_archive.py`` runs it once, with
``-XX:ArchiveClassesAtExit``, after the first job on a machine has succeeded).

It touches what the jobs touch: the Hive catalog on an embedded Derby metastore, Parquet
written and read, a view over a table, Arrow batches to and from Python. Everything it makes
lives in a scratch folder that is removed at the end::

    class_archive_job.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import SparkSession

from airflow_provider_pgsync.destinations.lake import LakeDestination


def main() -> int:
    warehouse = tempfile.mkdtemp(prefix="pgsync-class-archive-")
    try:
        builder = SparkSession.builder.appName("pgsync class archive")
        for key, value in LakeDestination.from_config({"warehouse": warehouse}).spark_conf().items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        try:
            spark.sql("CREATE DATABASE IF NOT EXISTS archive")
            df = spark.range(100).selectExpr("id", "cast(id AS string) AS s", "current_timestamp() AS at")
            df.write.mode("overwrite").saveAsTable("archive.t")
            spark.sql("CREATE VIEW archive.v AS SELECT id, s FROM archive.t")  # as a swap makes it,
            spark.sql(
                "ALTER VIEW archive.v AS SELECT id, max(s) AS s FROM archive.t GROUP BY id"
            )  # and changes it
            spark.table("archive.v").mapInArrow(_same, "id long, s string").collect()
        finally:
            spark.stop()
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)
    return 0


def _same(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


if __name__ == "__main__":
    sys.exit(main())
