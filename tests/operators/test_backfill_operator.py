"""PgBackfillOperator's refusals made before anything is read (no Spark)."""

from __future__ import annotations

import pytest

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.operators.backfill import PgBackfillOperator


def test_a_custom_destination_is_refused_a_filter_backfill_naming_it() -> None:
    op = PgBackfillOperator(
        task_id="backfill",
        pipeline="p",
        table="public.items",
        postgres_conn_id="no_such_connection",  # never reached
        destinations=[{"kind": "lake"}, {"kind": "custom", "class": "a.B", "name": "mine"}],
    )
    with pytest.raises(ConfigError, match=r"'mine' \(custom\) cannot take a filter backfill.*backfill_keys"):
        op.execute({"ti": None})  # type: ignore[typeddict-item]
