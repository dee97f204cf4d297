"""The load of ``dev/bench freshness``: writer threads committing a paced stream of small
transactions (inserts, updates, key changes, deletes) on the demo's three tables.

Each thread owns a disjoint set of order ids (the initial ids ``≡ k`` modulo the threads, and
the ids it inserts), so every update and delete hits a row and the threads never wait on each
other's row locks. One transaction in ``sample_every`` is a sample for the probe: it reads
``pg_current_wal_insert_lsn()`` just before COMMIT while holding the ``CommitGate``
exclusively, so no other writer transaction commits between that read and its commit
(``freshness_probe`` explains why that makes the probe exact).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from freshness_probe import Sample

ORDERS, CUSTOMERS, EVENTS = "public.orders", "public.customers", "public.events"
INITIAL_ORDERS = 20_000
CUSTOMER_COUNT = 5_000
ID_SPAN = 10**9


class CommitGate:
    """A readers-writer lock over COMMIT: ordinary commits share it, a sample holds it alone."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive)
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive)
            self._exclusive = True  # no new shared holder from here on
            self._cond.wait_for(lambda: self._shared == 0)
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class LoadWriter:
    """``threads`` writer threads committing ``rate`` transactions per second in all.

    ``on_sample`` receives each sampled commit (from the writer threads).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        rate: float,
        threads: int,
        sample_every: int,
        on_sample: Callable[[Sample], None],
        seed: int = 2026,
    ) -> None:
        self.conninfo = conninfo
        self.rate = rate
        self.sample_every = sample_every
        self.on_sample = on_sample
        self.gate = CommitGate()
        self.stopping = threading.Event()
        self.transactions = [0] * threads
        self.changes = [0] * threads
        self.errors: list[BaseException] = []
        self.started = self.stopped = 0.0
        self._threads = [
            threading.Thread(target=self._run, args=(k, threads, seed + k), name=f"writer {k}", daemon=True)
            for k in range(threads)
        ]

    def start(self) -> None:
        self.started = time.monotonic()
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(timeout=60)
        self.stopped = time.monotonic()
        if self.errors:
            raise RuntimeError(f"a writer thread failed: {self.errors[0]}") from self.errors[0]

    @property
    def seconds(self) -> float:
        return (self.stopped or time.monotonic()) - self.started

    def marker(self) -> Sample:
        """Commit one transaction changing all three tables, as a sample (the drain marker)."""
        with psycopg.connect(self.conninfo) as conn:
            conn.execute("UPDATE customers SET country = 'NL' WHERE id = 1")
            conn.execute("INSERT INTO events VALUES (1, 'marker', %s)", (f"drain marker {time.time_ns()}",))
            conn.execute("UPDATE orders SET status = 'marker' WHERE id = (SELECT max(id) FROM orders)")
            with self.gate.exclusive():
                lsn = _insert_lsn(conn)
                conn.commit()
            return Sample(lsn, frozenset((ORDERS, CUSTOMERS, EVENTS)), time.monotonic())

    def _run(self, k: int, threads: int, seed: int) -> None:
        rng = random.Random(seed)
        interval = threads / self.rate
        try:
            with psycopg.connect(self.conninfo) as conn:  # a transaction from the first statement
                ops = _Ops(conn, rng, k, threads)
                due = time.monotonic()
                while not self.stopping.is_set():
                    sample = (self.transactions[k] + 1) % self.sample_every == 0
                    touched = {ops.one(conn) for _ in range(rng.randint(1, 5))}
                    with self.gate.exclusive() if sample else self.gate.shared():
                        lsn = _insert_lsn(conn) if sample else 0
                        conn.commit()
                    if sample:
                        self.on_sample(Sample(lsn, frozenset(touched), time.monotonic()))
                    self.transactions[k] += 1
                    self.changes[k] += ops.pop_count()
                    due += interval
                    delay = due - time.monotonic()
                    if delay > 0:
                        self.stopping.wait(delay)  # pacing to the target rate
                    elif delay < -1:
                        due = time.monotonic()  # behind by more than a second: do not burst
        except BaseException as exc:  # reported by stop()
            self.errors.append(exc)
            self.stopping.set()


def _insert_lsn(conn: psycopg.Connection[Any]) -> int:
    from airflow_provider_pgsync.pgoutput.lsn import LSN

    row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return LSN.parse(str(row[0])).value


class _Ops:
    """The mix of one statement: 30 % order inserts (1 in 50 with a TOASTed note), 30 % order
    updates leaving the note unchanged (unchanged TOAST in the stream), 5 % key changes, 10 %
    order deletes, 10 % customer updates, 10 % event inserts, 5 % event deletes (keyless)."""

    def __init__(self, conn: psycopg.Connection[Any], rng: random.Random, k: int, threads: int) -> None:
        self.rng = rng
        # thread k owns the initial ids = k (mod threads) and the ids from (k + 1) * ID_SPAN on
        # (inserts and new keys of key changes), also those of an earlier phase of the bench
        rows = conn.execute(
            "SELECT id FROM orders"
            " WHERE CASE WHEN id < %(span)s THEN id %% %(n)s ELSE id / %(span)s - 1 END = %(k)s",
            {"span": ID_SPAN, "n": threads, "k": k},
        ).fetchall()
        conn.rollback()
        self.live = [int(r[0]) for r in rows]
        self.next_id = max([(k + 1) * ID_SPAN, *self.live])
        self.customers = range(k + 1, CUSTOMER_COUNT + 1, threads)  # thread k's: no lock waits
        self.count = 0

    def pop_count(self) -> int:
        count, self.count = self.count, 0
        return count

    def _customer(self) -> int:
        return self.rng.choice(self.customers)

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _pick(self) -> tuple[int, int]:
        index = self.rng.randrange(len(self.live))
        return index, self.live[index]

    def _forget(self, index: int) -> None:
        self.live[index] = self.live[-1]
        self.live.pop()

    def _exec(self, conn: psycopg.Connection[Any], statement: Any, params: tuple[Any, ...]) -> None:
        self.count += max(conn.execute(statement, params).rowcount, 0)

    def one(self, conn: psycopg.Connection[Any]) -> str:
        """Run one statement; the table it changed."""
        rng, choice = self.rng, self.rng.random()
        if choice < 0.3 or len(self.live) < 100:
            new = self._new_id()
            self._exec(
                conn,
                "INSERT INTO orders VALUES (%s, %s, %s, 'new', repeat('fresh note ', %s))",
                (new, self._customer(), rng.randint(1, 9999) / 4, 1000 if rng.random() < 0.02 else 1),
            )
            self.live.append(new)
            return ORDERS
        if choice < 0.6:
            _, order = self._pick()
            self._exec(
                conn,
                "UPDATE orders SET status = %s, amount = amount + 1 WHERE id = %s",
                (rng.choice(["paid", "sent", "returned"]), order),
            )
            return ORDERS
        if choice < 0.65:
            index, order = self._pick()
            new = self._new_id()
            self._exec(conn, "UPDATE orders SET id = %s WHERE id = %s", (new, order))
            self.live[index] = new
            return ORDERS
        if choice < 0.75:
            index, order = self._pick()
            self._exec(conn, "DELETE FROM orders WHERE id = %s", (order,))
            self._forget(index)
            return ORDERS
        if choice < 0.85:
            self._exec(
                conn,
                "UPDATE customers SET name = %s WHERE id = %s",
                (f"customer {rng.randint(1, 10**6)}", self._customer()),
            )
            return CUSTOMERS
        if choice < 0.95:
            self._exec(
                conn,
                "INSERT INTO events VALUES (%s, 'click', %s)",
                (self._customer(), f"payload {self._new_id()}"),
            )
            return EVENTS
        self._exec(
            conn,  # keyless: one of the customer's events, by its ctid
            "DELETE FROM events WHERE ctid = (SELECT ctid FROM events WHERE customer_id = %s LIMIT 1)",
            (self._customer(),),
        )
        return EVENTS
