"""Reconciliation tests: the capture fixtures, a writer thread and a cdc loop thread."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from psycopg import sql

from airflow_provider_pgsync.errors import StateConflictError
from airflow_provider_pgsync.operators.apply import PgApplyOperator
from tests.capture.conftest import (
    Pipeline,
    make_pipeline,  # noqa: F401 (the fixture, shared)
)
from tests.conftest import Database
from tests.support.writer import Writes, concurrent_writer


def apply_into(pipeline: Pipeline, replica: Database, conn_id: str = "pgsync_replica") -> None:
    """One run of ``PgApplyOperator`` into the replica (destination ``replica``, reached as
    Airflow connection ``conn_id``): phases, watermarks and backfills recorded as in the cdc DAG."""
    PgApplyOperator(
        task_id="apply",
        pipeline=pipeline.name,
        changelog_uri=pipeline.settings.changelog_uri,
        destinations=[{"kind": "postgres", "conn_id": conn_id, "name": "replica"}],
        postgres_conn_id=pipeline.hook.postgres_conn_id,
        state_backend="postgres",
    ).execute({})  # type: ignore[arg-type]


def wait_for_repair(pipeline: Pipeline, table: str, timeout: float = 180) -> None:
    """Poll until apply has written the staged backfill of ``table``; fail showing its state."""
    deadline = time.monotonic() + timeout
    while pipeline.state().table(table).backfill is not None:
        if time.monotonic() > deadline:
            state = pipeline.state()
            pytest.fail(
                f"the repair of {table} was not applied within {timeout:.0f} s: "
                f"{state.table(table)!r}; capture at {state.last_end_lsn}"
            )
        time.sleep(0.1)


@contextmanager
def writer(database: Database, table: str, *, first: int, last: int, new_from: int) -> Iterator[Writes]:
    """A thread committing inserts (keys from ``new_from``), updates and deletes of keys
    ``first..last`` of ``table`` (columns id, v) until the block ends, at about the pace of a
    busy application, not a flood."""
    rng = random.Random(11)
    ident = sql.Identifier(table)

    def transaction(conn: Any, new: int) -> None:
        conn.execute(sql.SQL("INSERT INTO {} (id, v) VALUES (%s, 'new')").format(ident), (new,))
        update = sql.SQL("UPDATE {} SET v = v || '+' WHERE id = %s").format(ident)
        conn.execute(update, (rng.randint(first, last),))
        if rng.random() < 0.3:
            delete = sql.SQL("DELETE FROM {} WHERE id = %s").format(ident)
            conn.execute(delete, (rng.randint(first, last),))

    with concurrent_writer(
        database, transaction, first=new_from, interval=0.02, skip_deadlocks=False
    ) as writes:
        yield writes


@dataclass
class Loop:
    """A thread calling ``step`` until stopped (capture and apply, as the cdc DAG would)."""

    step: Callable[[], Any]
    runs: int = 0
    retried: int = 0
    errors: list[BaseException] = field(default_factory=list)


@contextmanager
def looping(step: Callable[[], Any]) -> Iterator[Loop]:
    loop = Loop(step)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                step()
                loop.runs += 1
            except StateConflictError:  # another task (a repair's backfill) wrote the state: the
                loop.retried += 1  # cdc DAG retries the task, and so does this loop
            except BaseException as exc:
                loop.errors.append(exc)
                return
            stop.wait(0.2)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        stop.set()
        thread.join(timeout=120)
        for error in loop.errors:  # shown also when the block failed first (e.g. waiting for it)
            print(f"the loop stopped after {loop.runs} run(s): {type(error).__name__}: {error}")
    assert not loop.errors, loop.errors


class RecordingTI:
    """The part of a task instance the operator uses: ``xcom_push``."""

    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}
        self.dag_id, self.task_id = "test", "reconcile"

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value
