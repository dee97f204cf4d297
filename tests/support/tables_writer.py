"""A writer of several tables that come and go (test-only)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from airflow_provider_pgsync.source.names import TableRef
from tests.conftest import Database


@dataclass
class Writer:
    """A thread committing an insert, an update and a delete per transaction on one of ``tables``
    (chosen at random under ``lock``, so a table taken out is never written again)."""

    tables: list[str]
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: int = 0
    errors: list[Exception] = field(default_factory=list)

    def stop_writing(self, table: str) -> None:
        with self.lock:  # no transaction of the writer is open on it after this
            self.tables.remove(table)

    def write_to(self, table: str) -> None:
        with self.lock:
            self.tables.append(table)


@contextmanager
def writer(database: Database, tables: list[str], seed: int) -> Iterator[Writer]:
    state, stop, rng = Writer(list(tables)), threading.Event(), random.Random(seed)

    def run() -> None:
        next_id = 10_000_000 * seed  # ids of its own
        with database.connect() as conn:
            while not stop.wait(0.005):
                with state.lock:
                    if not state.tables:
                        continue
                    next_id += 1
                    try:
                        _transaction(conn, TableRef.parse(rng.choice(state.tables)), next_id, rng)
                        state.done += 1
                    except Exception as exc:
                        state.errors.append(exc)
                        return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not state.errors, state.errors
    assert state.done > 0, "the writer committed nothing: the test proves nothing"


def _transaction(conn: Any, table: TableRef, new_id: int, rng: random.Random) -> None:
    with conn.transaction():
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, 'w')").format(table.identifier), (new_id,))
        update = sql.SQL("UPDATE {} SET v = v || '+' WHERE id = %s").format(table.identifier)
        conn.execute(update, (rng.randint(1, 100),))
        conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(table.identifier), (new_id - 3,))
