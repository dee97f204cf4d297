"""A filter backfill into a PostgreSQL destination (real PostgreSQL, a real Spark job, real
apply): the rows matching the filter are re-sent and merged at the watermark; a row changed
since the snapshot keeps its newer value; rows outside the filter stay as they were."""

from __future__ import annotations

import psycopg
import pytest

from airflow_provider_pgsync.operators.backfill import PgBackfillOperator
from airflow_provider_pgsync.state.model import Ready
from tests.capture.conftest import Pipeline
from tests.conftest import Database
from tests.support.backfill import REPLICA, TABLE, cdc
from tests.support.replica import rows


@pytest.mark.slow
@pytest.mark.usefixtures("spark_drivers")  # its baselines are Spark jobs (tests/tiers.py)
def test_a_filter_backfill_repairs_the_matching_rows_of_a_replica(
    ready_replica: tuple[Pipeline, Database],
    database: Database,
    source_conn_id: str,
) -> None:
    pipeline, replica = ready_replica
    replica.execute("DELETE FROM items WHERE id = 7")
    replica.execute("UPDATE items SET name = 'damaged' WHERE id IN (5, 6, 50)")

    with psycopg.connect(database.conninfo) as open_tx:  # in the snapshot's xip, committed after it
        open_tx.execute("UPDATE items SET name = 'open tx' WHERE id = 5")
        result = PgBackfillOperator(
            task_id="backfill",
            pipeline=pipeline.name,
            table=TABLE,
            backfill_filter="id <= 10",
            destinations=[REPLICA],
            postgres_conn_id=source_conn_id,
            state_backend="postgres",
            progress_seconds=2,
        ).execute({"ti": None})  # type: ignore[typeddict-item]
        open_tx.commit()
    assert result["rows"] == 10 and set(result["staged"]) == {"replica"}
    database.execute("UPDATE items SET n = -6 WHERE id = 6")  # after the snapshot: newer than staged
    cdc(pipeline, source_conn_id, [REPLICA])
    assert pipeline.state().table(TABLE).backfill is None, "the backfill was not applied"
    assert pipeline.state().table(TABLE).phase == Ready()

    source, found = rows(database, TABLE), rows(replica, TABLE)
    assert [r for r in found if r not in source] == [r for r in found if r[0] == "50"]  # outside the filter
    assert [r for r in source if r not in found] == [r for r in source if r[0] == "50"]
    assert replica.execute("SELECT count(*) FROM pgsync.baseline_parts") == [(0,)], "parts rows were left"
