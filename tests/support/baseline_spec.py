"""A baseline job's spec for tests (test-only)."""

from __future__ import annotations

from airflow_provider_pgsync.baseline.spec import BaselineJobSpec
from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.typemap.pgtypes import PgType
from airflow_provider_pgsync.typemap.spark import spark_read


def make_spec(**overrides: object) -> BaselineJobSpec:
    values: dict[str, object] = {
        "table": 'public."Orders"',
        "jdbc_url": "jdbc:postgresql://db.example:5432/shop?sslmode=require",
        "conninfo": "host=db.example port=5432 dbname=shop user=replicator sslmode=require",
        "user": "replicator",
        "query": '(SELECT ctid AS "__pgsync_ctid", "id" AS "id" FROM "public"."Orders") AS pgsync_base',
        "blocks": 100,
        "table_bytes": 819_200,
        "target_partition_bytes": 268_435_456,
        "session": ("BEGIN", "SET TRANSACTION SNAPSHOT '00000003-0000001B-1'"),
        "columns": (
            spark_read("id", PgType("integer", "int4")),
            spark_read("Größe", PgType("numeric(10,2)", "numeric", precision=10, scale=2)),
            spark_read("at", PgType("timestamptz", "timestamptz")),
        ),
        "destinations": (LakeDestination("/tmp/lake").to_config(), {"kind": "lake", "nested": {"a": [1, 2]}}),
    }
    values.update(overrides)
    return BaselineJobSpec(**values)  # type: ignore[arg-type]
