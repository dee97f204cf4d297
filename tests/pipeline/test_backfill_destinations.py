"""Which destinations a pipeline's backfills write: a filter backfill the lakes and replicas, a
key list every destination (custom ones too)."""

from __future__ import annotations

from airflow_provider_pgsync.operators.backfill import PgBackfillOperator
from airflow_provider_pgsync.pipeline.config import (
    CustomDestinationConfig,
    LakeDestinationConfig,
    PipelineConfig,
    PostgresDestinationConfig,
    TableConfig,
)


def test_a_key_backfill_writes_every_destination_a_filter_backfill_all_but_custom_ones() -> None:
    config = PipelineConfig(
        name="shop",
        source_conn_id="shop_db",
        tables=(TableConfig("orders"),),
        destinations=(
            LakeDestinationConfig(warehouse="/data/lake"),
            PostgresDestinationConfig(conn_id="replica_db", name="replica"),
            CustomDestinationConfig(class_path="my.pkg.Sqlite", name="sqlite"),
        ),
    )
    assert [d["kind"] for d in config.backfill_destinations()] == ["lake", "postgres"]
    every = config.backfill_destinations(keys=True)
    assert [d["kind"] for d in every] == ["lake", "postgres", "custom"]
    kwargs = {k: v for k, v in config.baseline_kwargs("orders").items() if k != "rebaseline"}
    operator = PgBackfillOperator(
        task_id="repair", **{**kwargs, "destinations": every}, backfill_keys=[{"id": "1"}]
    )
    assert operator.destinations == every
