"""Backfills by key into a PostgreSQL replica: the table, a writer and the operator runs (test-only)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from airflow_provider_pgsync.operators.apply import PgApplyOperator
from airflow_provider_pgsync.operators.backfill import PgBackfillOperator
from airflow_provider_pgsync.state.model import Ready
from tests.capture.conftest import MakePipeline, Pipeline
from tests.conftest import Database, MakeReplica
from tests.support.replica import empty_capture_baseline, rows
from tests.support.writer import Writes, concurrent_writer

TABLE = "public.items"

DDL = [
    "CREATE TABLE items (id int PRIMARY KEY, name text, n int, at timestamptz DEFAULT now())",
    "CREATE TABLE events (kind text, at int)",
    "ALTER TABLE events REPLICA IDENTITY FULL",
]

EVENTS = "public.events"

REPLICA = {"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}


def empty_baseline(pipeline: Pipeline, database: Database) -> None:
    """The baseline of the still empty tables: every later transaction is applied."""
    for table in (TABLE, EVENTS):
        empty_capture_baseline(pipeline, database, table)


def cdc(pipeline: Pipeline, source_conn_id: str, destinations: list[dict[str, Any]]) -> dict[str, Any]:
    pipeline.capture_until_idle()
    return PgApplyOperator(  # type: ignore[no-any-return]
        task_id="apply",
        pipeline=pipeline.name,
        changelog_uri=pipeline.settings.changelog_uri,
        destinations=destinations,
        postgres_conn_id=source_conn_id,
        state_backend="postgres",
    ).execute({})  # type: ignore[arg-type]


def backfill_keys(
    pipeline: Pipeline, source_conn_id: str, keys: Any, destinations: list[dict[str, Any]], **kwargs: Any
) -> dict[str, Any]:
    return PgBackfillOperator(  # type: ignore[no-any-return]
        task_id="backfill",
        pipeline=pipeline.name,
        table=kwargs.pop("table", TABLE),
        backfill_keys=keys,
        destinations=destinations,
        postgres_conn_id=source_conn_id,
        state_backend="postgres",
        **kwargs,
    ).execute({"ti": None})  # type: ignore[typeddict-item]


@contextmanager
def writer(database: Database, touched: int) -> Iterator[Writes]:
    """The concurrent writer of ``items``, one statement per transaction in turn: an insert, an
    update and a delete of other rows, and an update of row ``touched`` (one of the keys a
    backfill re-sends)."""
    rng = random.Random(20)

    def transaction(conn: Any, n: int) -> None:
        step = n % 4
        if step == 0:
            conn.execute("INSERT INTO items (id, name, n) VALUES (%s, 'new', 0)", (5000 + n,))
        elif step == 1:
            conn.execute("UPDATE items SET n = n + 1 WHERE id = %s", (rng.randint(30, 100),))
        elif step == 2:
            conn.execute("DELETE FROM items WHERE id = %s", (rng.randint(60, 100),))
        else:
            conn.execute("UPDATE items SET n = n + 1, name = 'writer' WHERE id = %s", (touched,))

    with concurrent_writer(database, transaction, first=-1, interval=0, skip_deadlocks=False) as writes:
        yield writes


@pytest.fixture
def ready_replica(
    make_pipeline: MakePipeline, make_replica: MakeReplica, database: Database, source_conn_id: str
) -> Iterator[tuple[Pipeline, Database]]:
    """The table streaming into a replica (Ready), 100 rows, equal to the source."""
    pipeline = make_pipeline(DDL, [TABLE, EVENTS])
    replica = make_replica("replica")
    empty_baseline(pipeline, database)
    database.execute(
        "INSERT INTO items (id, name, n) SELECT g, 'item ' || g, g FROM generate_series(1, 100) g"
    )
    cdc(pipeline, source_conn_id, [REPLICA])
    assert pipeline.state().table(TABLE).phase == Ready() and pipeline.state().table(EVENTS).phase == Ready()
    assert rows(replica, TABLE) == rows(database, TABLE)
    yield pipeline, replica
