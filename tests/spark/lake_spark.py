"""The Spark session of the tests' session scripts (``lake_session.py``, ``compact_session.py``,
``swap_session.py``): a small local one on a lake warehouse, quiet, in UTC."""

from __future__ import annotations

from pyspark.sql import SparkSession

from airflow_provider_pgsync.destinations.lake import LakeDestination


def lake_test_session(lake: LakeDestination, app_name: str) -> SparkSession:
    """A ``local[2]`` session with ``lake``'s Spark configuration, no UI, errors only, UTC."""
    builder = SparkSession.builder.master("local[2]").appName(app_name)
    for key, value in lake.spark_conf().items():
        builder = builder.config(key, value)
    builder = builder.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    return spark
