"""PgBackfillOperator's refusals made before anything is read (no Spark)."""

from __future__ import annotations

import pytest

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.operators.backfill import PgBackfillOperator


def test_a_postgres_destination_is_refused_naming_it() -> None:
    op = PgBackfillOperator(
        task_id="backfill",
        pipeline="p",
        table="public.items",
        postgres_conn_id="no_such_connection",  # never reached
        destinations=[{"kind": "lake"}, {"kind": "postgres", "conn_id": "replica_db", "name": "replica"}],
    )
    with pytest.raises(ConfigError, match=r"'replica' \(postgres\) cannot take a backfill.*rebaseline"):
        op.execute({"ti": None})  # type: ignore[typeddict-item]
