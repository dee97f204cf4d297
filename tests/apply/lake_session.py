"""Test helper, run as a process of its own: one Spark session on a lake warehouse that runs
steps in order (``{"sql": ...}`` queries, ``{"compact": [tables]}`` compactions, ``{"files":
true}`` the warehouse's table files) holding the
Derby metastore throughout, and prints their results as JSON on its last line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.spark.compact_job import compact
from airflow_provider_pgsync.spark.lake import LakeBaseWriter
from tests.spark.lake_spark import lake_test_session


def main(warehouse: str, steps_json: str) -> None:
    lake = LakeDestination.from_config({"warehouse": warehouse})
    spark = lake_test_session(lake, "pgsync test")
    results: list[object] = []
    with LakeBaseWriter(spark, lake, TableRef("public", "any")).catalog():
        for step in json.loads(steps_json):
            if "sql" in step:
                for table in spark.catalog.listTables(lake.database):  # files change between steps
                    if table.tableType != "VIEW" and not table.isTemporary:
                        spark.catalog.refreshTable(f"{lake.database}.{table.name}")
                results.append([list(row) for row in spark.sql(step["sql"]).collect()])
            elif "files" in step:
                root = Path(warehouse, lake.database)
                results.append(sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()))
            else:
                results.append(compact(spark, lake, [TableRef.parse(t) for t in step["compact"]]))
    spark.stop()
    print("RESULT " + json.dumps(results, default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
