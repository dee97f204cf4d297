"""Backfills by key into a PostgreSQL replica: the table, a writer and the operator runs (test-only)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from airflow_provider_pgsync.operators.apply import PgApplyOperator
from airflow_provider_pgsync.operators.backfill import PgBackfillOperator
from airflow_provider_pgsync.state.model import Ready
from tests.capture.conftest import MakePipeline, Pipeline
from tests.conftest import Database, MakeReplica
from tests.support.replica import empty_capture_baseline, rows

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


class Writer:
    """A thread writing to the source until stopped: inserts, updates and deletes of other rows,
    and updates of row ``touched`` (one of the keys a backfill re-sends)."""

    def __init__(self, database: Database, touched: int) -> None:
        self.database = database
        self.touched = touched
        self.stop = threading.Event()
        self.writes = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rng = random.Random(20)
        next_id = 5000
        try:
            with psycopg.connect(self.database.conninfo, autocommit=True) as conn:
                while not self.stop.is_set():
                    step = self.writes % 4
                    if step == 0:
                        conn.execute("INSERT INTO items (id, name, n) VALUES (%s, 'new', 0)", (next_id,))
                        next_id += 1
                    elif step == 1:
                        conn.execute("UPDATE items SET n = n + 1 WHERE id = %s", (rng.randint(30, 100),))
                    elif step == 2:
                        conn.execute("DELETE FROM items WHERE id = %s", (rng.randint(60, 100),))
                    else:
                        conn.execute(
                            "UPDATE items SET n = n + 1, name = 'writer' WHERE id = %s", (self.touched,)
                        )
                    self.writes += 1
        except BaseException as exc:
            self.error = exc

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the writer did not stop"
        assert self.error is None, f"the writer failed: {self.error!r}"


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
