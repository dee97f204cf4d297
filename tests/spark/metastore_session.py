"""Test helper, run as a process of its own: a job's start on a lake with a PostgreSQL metastore
(``open_metastore``, as the baseline and compaction jobs do), then one catalog write and read;
prints whether this process created the metastore's schema, and the databases it sees, as JSON
on its last line. The password comes from the password file ``PGPASSFILE`` names."""

from __future__ import annotations

import json
import logging
import sys

from pyspark.sql import SparkSession

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.hooks.lake_metastore import JDBC_DRIVER_JAR
from airflow_provider_pgsync.spark.metastore_postgres import open_metastore


class _Created(logging.Handler):
    """Sees the log line of a schema's creation."""

    def __init__(self) -> None:
        super().__init__()
        self.created = False

    def emit(self, record: logging.LogRecord) -> None:
        self.created = self.created or "has no schema: creating" in record.getMessage()


def main(config: str, database: str) -> None:
    lake = LakeDestination.from_config(json.loads(config))
    builder = SparkSession.builder.master("local[1]").appName("pgsync metastore test")
    for key, value in {**lake.spark_conf(), "spark.driver.extraClassPath": JDBC_DRIVER_JAR}.items():
        builder = builder.config(key, value)
    spark = builder.config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    seen = _Created()
    logging.getLogger("pgsync.spark").addHandler(seen)
    logging.getLogger("pgsync.spark").setLevel(logging.INFO)
    open_metastore(spark, lake)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
    databases = sorted(row[0] for row in spark.sql("SHOW DATABASES").collect())
    spark.stop()
    print("RESULT " + json.dumps({"created": seen.created, "databases": databases}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
