"""The steps of a test's look at a lake in one Spark session (``{"sql": ...}`` queries,
``{"compact": [tables]}`` compactions, ``{"files": true}`` the warehouse's table files), run by
``tests/apply/lake_session.py`` in a process of its own or by the worker's resident driver
(``tests/support/resident_driver.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.spark.compact_job import compact
from airflow_provider_pgsync.spark.lake import LakeBaseWriter


def run_steps(spark: SparkSession, lake: LakeDestination, steps: list[dict[str, Any]]) -> list[Any]:
    """The results of ``steps``, in order, holding the lake's metastore throughout."""
    results: list[Any] = []
    with LakeBaseWriter(spark, lake, TableRef("public", "any")).catalog():
        for step in steps:
            if "sql" in step:
                for table in spark.catalog.listTables(lake.database):  # files change between steps
                    if table.tableType != "VIEW" and not table.isTemporary:
                        spark.catalog.refreshTable(f"{lake.database}.{table.name}")
                results.append([list(row) for row in spark.sql(step["sql"]).collect()])
            elif "files" in step:
                root = Path(lake.warehouse, lake.database)
                results.append(sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()))
            else:
                results.append(compact(spark, lake, [TableRef.parse(t) for t in step["compact"]]))
    return results
