"""The tests' concurrent writer (test-only): a thread that commits a workload's transactions
into the source until its block ends.

A workload is a function ``transaction(conn, n)`` that runs the statements of one transaction
on ``conn`` (``n``: the transaction's own number, counting up from ``first``, for new ids); it
returns False when it wrote nothing (not counted), and may raise ``psycopg.Rollback`` to roll its
transaction back. The writer counts what it committed, skips a transaction that a DDL of the test
deadlocks (``skip_deadlocks``), and stops at any other error. Its block fails on an error, or
when it committed fewer than ``at_least`` transactions: a test whose writer wrote nothing proves
nothing.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.conftest import Database

Workload = Callable[[Any, int], "bool | None"]


@dataclass
class Writes:
    """What the writer did so far: transactions committed (their numbers) and the error that
    stopped it, if any."""

    numbers: list[int] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    @property
    def done(self) -> int:
        return len(self.numbers)

    def wait_for(self, count: int, what: str = "", *, timeout: float = 60.0) -> None:
        """Wait until ``count`` transactions are committed in all (failing when the writer stops
        or stalls)."""
        deadline = time.monotonic() + timeout
        while self.done < count:
            assert not self.errors, self.errors
            if time.monotonic() > deadline:
                raise AssertionError(f"the writer stalled at {self.done} of {count} transactions {what}")
            time.sleep(0.01)  # polling the writer's progress, with a deadline


@contextmanager
def concurrent_writer(
    database: Database,
    transaction: Workload,
    *,
    first: int = 0,
    interval: float = 0.005,
    skip_deadlocks: bool = True,
    at_least: int = 1,
    guard: threading.Lock | None = None,
) -> Iterator[Writes]:
    """Commit ``transaction`` every ``interval`` seconds (pacing, so the machine's cores stay the
    pipeline's too) in a thread of its own until the block ends; each transaction, its commit
    included, holding ``guard`` when given (so that the test knows none is open meanwhile)."""
    stop, writes = threading.Event(), Writes()

    def run() -> None:
        n = first
        try:
            conn = database.connect()
        except Exception as exc:
            writes.errors.append(exc)
            return
        with conn:
            while not stop.wait(interval):
                n += 1
                wrote: bool | None = False  # stays so when the workload rolls back
                try:
                    with guard or contextlib.nullcontext(), conn.transaction():
                        wrote = transaction(conn, n)
                    if wrote is not False:
                        writes.numbers.append(n)
                except Exception as exc:
                    if not (skip_deadlocks and "deadlock" in str(exc)):
                        writes.errors.append(exc)
                        return

    thread = threading.Thread(target=run, name="writer", daemon=True)
    thread.start()
    try:
        yield writes
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive(), "the writer did not stop"
    assert not writes.errors, writes.errors
    assert writes.done >= at_least, (
        f"the writer committed {writes.done} transaction(s): the test proves nothing"
    )
