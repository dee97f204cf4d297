"""Workloads of the baseline tests' items and events tables, for the concurrent writer (test-only)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.conftest import Database
from tests.support.writer import Writes, concurrent_writer


@contextmanager
def writer(database: Database, table: str) -> Iterator[Writes]:
    """The concurrent writer of inserts, updates and deletes to ``table`` (``items``: keyed, new
    ids from 100,001; ``events``: keyless, duplicate rows)."""
    rng = random.Random(7)

    def items(conn: Any, new: int) -> None:
        conn.execute(
            "INSERT INTO items (id, m, n, doc, a) VALUES (%s, 'ok', 1.5, %s, '{1}')",
            (new, "new " * rng.randint(1, 3000)),
        )
        conn.execute(
            "UPDATE items SET n = n + 1, j = j || '{\"w\": 1}' WHERE id = %s", (rng.randint(1, 3000),)
        )
        conn.execute("DELETE FROM items WHERE id = %s", (rng.randint(1, 3000),))

    def events(conn: Any, _: int) -> None:
        conn.execute("INSERT INTO events VALUES ('a', 1, '{\"v\": 1}'), ('a', 1, '{\"v\": 1}')")
        conn.execute(
            "UPDATE events SET n = n + 1 WHERE ctid = (SELECT min(ctid) FROM events WHERE kind = %s)",
            (rng.choice("abc"),),
        )
        conn.execute(
            "DELETE FROM events WHERE ctid = (SELECT max(ctid) FROM events WHERE kind = %s)",
            (rng.choice("abc"),),
        )

    workload = items if table == "items" else events
    with concurrent_writer(database, workload, first=100_000, interval=0.05, skip_deadlocks=False) as writes:
        yield writes
