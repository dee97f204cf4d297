"""The Spark session a job runs in: its own (started, and stopped at the end), or the caller's."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from pyspark.sql import SparkSession

from airflow_provider_pgsync.spark.progress import log_to_stderr


@contextmanager
def job_session(
    spark: SparkSession | None, log_prefix: str, conf: Mapping[str, str], app_name: str | None = None
) -> Iterator[SparkSession]:
    """``spark`` when given (a session of the caller's process, e.g. the tests' resident driver),
    left open; else the job's own session with ``conf``, named ``app_name`` (its log prefix by
    default), its log lines on stderr (where spark-submit's caller, the task log, reads them),
    stopped at the end."""
    if spark is not None:
        yield spark
        return
    log_to_stderr(log_prefix)
    builder = SparkSession.builder.appName(app_name or log_prefix)
    for key, value in conf.items():
        builder = builder.config(key, value)
    own = builder.getOrCreate()
    try:
        yield own
    finally:
        own.stop()
