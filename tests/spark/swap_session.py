"""Test helper, run as a process of its own (the embedded Derby metastore is one process's): the
lake's swap step by step, as the baseline job runs it (``warm_up`` while the base is written,
``ready``, ``publish``), reading the catalog between the steps; prints on its last line, as JSON,
what a reader saw at each step."""

from __future__ import annotations

import json
import sys
from typing import Any

from compact_session import Lake

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_tables import view_name
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.spark.compact_job import compact
from airflow_provider_pgsync.spark.lake import LakeBaseWriter
from tests.spark.lake_spark import lake_test_session

TABLE, FAILED = TableRef("public", "items"), TableRef("public", "never")
SCHEMA = "id long, v string"


def main(warehouse: str) -> None:
    lake = LakeDestination.from_config({"warehouse": warehouse})
    spark = lake_test_session(lake, "pgsync swap test")
    at = Lake(spark, lake)
    seen: dict[str, Any] = {}

    def tables() -> list[str]:
        if not spark.catalog.databaseExists(lake.database):
            return []
        return sorted(t.name for t in spark.catalog.listTables(lake.database))

    def base_location() -> str:
        rows = spark.sql(f"DESCRIBE TABLE EXTENDED {lake.base_table(TABLE)}").collect()
        return next(str(r[1]) for r in rows if r[0] == "Location")

    def baseline(name: str, rows: list[tuple[int, str]]) -> None:
        """A baseline as the job runs it, with the catalog read between its steps."""
        writer = LakeBaseWriter(spark, lake, TABLE, ("id",))
        location = writer.new_location()
        df = spark.createDataFrame(rows, SCHEMA)
        writer.warm_up(location, df.schema)
        # the catalog started and rehearsed the swap: readers still see the old state
        writer.ready(rehearsed=True)
        seen[f"{name}: before the swap"] = {
            "view": at.view(TABLE) if spark.catalog.tableExists(view_name(lake, TABLE)) else None,
            "base": base_location() if spark.catalog.tableExists(lake.base_table(TABLE)) else None,
            "tables": tables(),
        }
        staged = writer.stage(df, location)
        written = writer.publish(staged)
        writer.clean_up()
        seen[f"{name}: after the swap"] = {
            "view": at.view(TABLE),
            "base": base_location(),
            "location": written["location"],
            "tables": tables(),
        }

    def failed(name: str) -> None:
        """A first baseline of ``FAILED`` whose copy fails, with the catalog read between its steps."""
        writer = LakeBaseWriter(spark, lake, FAILED, ("id",))
        location = writer.new_location()
        writer.warm_up(location, spark.createDataFrame([], SCHEMA).schema)
        writer.ready()
        seen[f"{name}: during the copy"] = {"tables": tables(), "database": lake.database in databases()}
        writer.discard(location)
        seen[f"{name}: discarded"] = {"tables": tables(), "database": lake.database in databases()}

    def databases() -> list[str]:
        return [d.name for d in spark.catalog.listDatabases()]

    with LakeBaseWriter(spark, lake, TABLE).catalog():
        # a new lake's first baseline whose copy fails: its database goes again with it
        failed("a new lake")
        baseline("first", [(1, "a"), (2, "b")])
        at.segment(TABLE, [("P", 2, "b2"), ("P", 3, "c")], ["id", "v"])
        seen["first: a segment"] = {"view": at.view(TABLE)}
        baseline("rebaseline", [(1, "r1"), (5, "r5")])
        at.segment(TABLE, [("P", 6, "r6"), ("D", 1, None)], ["id", "v"])
        seen["rebaseline: a segment"] = {"view": at.view(TABLE)}
        (result,) = compact(spark, lake, [TABLE])
        seen["compacted"] = {"view": at.view(TABLE), "result": result}
        at.segment(TABLE, [("P", 7, "r7")], ["id", "v"])
        seen["compacted: a segment"] = {"view": at.view(TABLE)}
        # a first baseline whose copy fails: the catalog is left without its changes table
        failed("failed")
    spark.stop()
    print("RESULT " + json.dumps(seen, default=str))


if __name__ == "__main__":
    main(sys.argv[1])
