"""A workload of several tables that come and go, for the concurrent writer (test-only)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from psycopg import sql

from airflow_provider_pgsync.source.names import TableRef
from tests.conftest import Database
from tests.support.writer import Writes, concurrent_writer


class Tables:
    """An insert, an update and a delete per transaction on one of ``tables``, chosen at random
    under ``lock`` (which the writer holds until the commit), so that a table taken out is never
    written again."""

    def __init__(self, tables: list[str], seed: int) -> None:
        self.tables, self.lock, self._rng = list(tables), threading.Lock(), random.Random(seed)
        self.writes = Writes()

    def stop_writing(self, table: str) -> None:
        with self.lock:  # no transaction of the writer is open on it after this
            self.tables.remove(table)

    def write_to(self, table: str) -> None:
        with self.lock:
            self.tables.append(table)

    def __call__(self, conn: Any, new: int) -> bool:
        if not self.tables:
            return False
        table = TableRef.parse(self._rng.choice(self.tables)).identifier
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, 'w')").format(table), (new,))
        update = sql.SQL("UPDATE {} SET v = v || '+' WHERE id = %s").format(table)
        conn.execute(update, (self._rng.randint(1, 100),))
        conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(table), (new - 3,))
        return True


@contextmanager
def writer(database: Database, tables: list[str], seed: int) -> Iterator[Tables]:
    """The concurrent writer of ``tables`` (``Tables``: take a table out or add one meanwhile)."""
    workload = Tables(tables, seed)
    with concurrent_writer(
        database, workload, first=10_000_000 * seed, skip_deadlocks=False, guard=workload.lock
    ) as writes:
        workload.writes = writes
        yield workload
