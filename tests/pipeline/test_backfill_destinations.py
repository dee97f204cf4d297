"""Which destinations a pipeline's backfills write: a filter backfill the lakes, a key list all."""

from __future__ import annotations

from airflow_provider_pgsync.operators.backfill import PgBackfillOperator
from airflow_provider_pgsync.pipeline.config import (
    LakeDestinationConfig,
    PipelineConfig,
    PostgresDestinationConfig,
    TableConfig,
)


def test_a_key_backfill_writes_every_destination_a_filter_backfill_the_lakes() -> None:
    config = PipelineConfig(
        name="shop",
        source_conn_id="shop_db",
        tables=(TableConfig("orders"),),
        destinations=(
            LakeDestinationConfig(warehouse="/data/lake"),
            PostgresDestinationConfig(conn_id="replica_db", name="replica"),
        ),
    )
    assert [d["kind"] for d in config.backfill_destinations()] == ["lake"]
    every = config.backfill_destinations(keys=True)
    assert [d.get("name") for d in every if d["kind"] == "postgres"] == ["replica"] and len(every) == 2
    kwargs = {k: v for k, v in config.baseline_kwargs("orders").items() if k != "rebaseline"}
    operator = PgBackfillOperator(
        task_id="repair", **{**kwargs, "destinations": every}, backfill_keys=[{"id": "1"}]
    )
    assert operator.destinations == every
