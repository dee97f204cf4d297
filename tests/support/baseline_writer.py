"""A writer of the baseline tests' items and events tables (test-only)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tests.conftest import Database


@contextmanager
def writer(database: Database, table: str) -> Iterator[list[int]]:
    """A thread committing inserts, updates and deletes to ``table`` until the block ends;
    yields the list of transactions it committed (one number each)."""
    stop, done, errors = threading.Event(), [], []
    rng = random.Random(7)

    def run() -> None:
        with database.connect() as conn:
            next_id = 100_000
            while not stop.is_set():
                try:
                    with conn.transaction():
                        if table == "items":
                            next_id += 1
                            conn.execute(
                                "INSERT INTO items (id, m, n, doc, a) VALUES (%s, 'ok', 1.5, %s, '{1}')",
                                (next_id, "new " * rng.randint(1, 3000)),
                            )
                            conn.execute(
                                "UPDATE items SET n = n + 1, j = j || '{\"w\": 1}' WHERE id = %s",
                                (rng.randint(1, 3000),),
                            )
                            conn.execute("DELETE FROM items WHERE id = %s", (rng.randint(1, 3000),))
                        else:
                            conn.execute(
                                "INSERT INTO events VALUES ('a', 1, '{\"v\": 1}'), ('a', 1, '{\"v\": 1}')"
                            )
                            conn.execute(
                                "UPDATE events SET n = n + 1 WHERE ctid = (SELECT min(ctid) FROM events"
                                " WHERE kind = %s)",
                                (rng.choice("abc"),),
                            )
                            conn.execute(
                                "DELETE FROM events WHERE ctid ="
                                " (SELECT max(ctid) FROM events WHERE kind = %s)",
                                (rng.choice("abc"),),
                            )
                    done.append(len(done))
                except Exception as exc:  # reported by the test
                    errors.append(exc)
                    return
                stop.wait(0.05)

    thread = threading.Thread(target=run, name=f"writer-{table}", daemon=True)
    thread.start()
    try:
        yield done
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors
