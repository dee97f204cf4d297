"""Test helper, run as a process of its own: one Spark session on a lake warehouse that runs
steps in order (``tests/support/lake_steps.py``) holding the Derby metastore throughout, and
prints their results as JSON on its last line."""

from __future__ import annotations

import json
import sys

from airflow_provider_pgsync.destinations.lake import LakeDestination
from tests.spark.lake_spark import lake_test_session
from tests.support.lake_steps import run_steps


def main(warehouse: str, steps_json: str) -> None:
    lake = LakeDestination.from_config({"warehouse": warehouse})
    spark = lake_test_session(lake, "pgsync test")
    results = run_steps(spark, lake, json.loads(steps_json))
    spark.stop()
    print("RESULT " + json.dumps(results, default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
