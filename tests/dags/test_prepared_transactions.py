"""Prepared transactions (two-phase commit) through the drop-in DAGs, on a source cluster of its
own with ``max_prepared_transactions = 10``, a writer committing meanwhile, and a lake, a
PostgreSQL replica and a custom destination checked row by row after each step (cdc drained).

pgsync decodes a prepared transaction when it is decided, as one transaction at its
``COMMIT PREPARED`` (pgoutput's ``two_phase`` is not used): until then it holds back nothing
but itself. Proved here on the real server:

- a baseline whose snapshot is taken while transactions are prepared has them in its xip: one
  committed before the hand-off is applied by it, and every destination reaches Ready without
  the other; the transactions committed after it are captured
  and applied, run after run, while each capture's idle advance moves the slot's confirmed
  position past its PREPARE (the slot's restart_lsn stays before its first change, so the
  server keeps its WAL);
- ``COMMIT PREPARED`` after several cdc runs and slot advances delivers it exactly once (its
  inserts would fail the replica's batch twice, its duplicate rows would be counted twice);
- ``ROLLBACK PREPARED`` delivers nothing.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from airflow_provider_pgsync.hooks.replication import PgReplicationHook, SlotCreation
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.state.phases import SyncDone
from pgcluster import Cluster, default_base_dir, free_port, server_user
from tests.conftest import Database
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, PipelineDags, task_states
from tests.dags.scenario import (  # noqa: F401 (multiset_sqlite: a fixture)
    KINDS,
    destinations,
    equal_everywhere,
    equal_without_spark,
    multiset_sqlite,
    phases,
)
from tests.support.writer import Writes, concurrent_writer

TABLES = ["public.orders", "public.events"]


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[Cluster]:
    """This module's source (and replica) cluster: the tests' one, with prepared transactions."""
    cluster = Cluster(
        root=default_base_dir(server_user()) / f"test-pg-2pc-{os.getpid()}",
        port=free_port(),
        settings={"max_prepared_transactions": "10"},
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture(autouse=True)
def _undecided_rolled_back(database: Database) -> Iterator[None]:
    """Roll back what a failed test left prepared: its database could not be dropped otherwise."""
    yield
    for (gid,) in database.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"):
        database.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)).as_string(None))


@dataclass(frozen=True)
class Prepared:
    gid: str
    xid: int
    """Its 64-bit xid (``txid_current()``)."""
    start: LSN
    """The WAL insert position before its first change."""
    prepared: LSN
    """The WAL insert position after its PREPARE TRANSACTION."""


def prepare(database: Database, gid: str, *statements: str | sql.Composable) -> Prepared:
    """Run ``statements`` in a transaction and PREPARE it as ``gid`` (left undecided)."""
    with database.connect() as conn:
        start = LSN.parse(str(conn.execute("SELECT pg_current_wal_insert_lsn()").fetchall()[0][0]))
        conn.execute("BEGIN")
        xid = int(str(conn.execute("SELECT txid_current()").fetchall()[0][0]))
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]
        conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
        prepared = LSN.parse(str(conn.execute("SELECT pg_current_wal_insert_lsn()").fetchall()[0][0]))
    return Prepared(gid, xid, start, prepared)


def decide(database: Database, how: str, transaction: Prepared) -> None:
    decision = sql.SQL("{} PREPARED {}").format(sql.SQL(how), sql.Literal(transaction.gid))
    database.execute(decision.as_string(None))


def _p(database: Database, gid: str, low: int) -> Prepared:
    """A prepared transaction over rows the writer never touches: updates, inserts and deletes of
    ``orders`` (ids ``low``..``low + 6``, two new ones), two equal rows added to ``events`` and
    one removed."""
    g, n = sql.Literal(gid), sql.Literal(low)
    return prepare(
        database,
        gid,
        sql.SQL("UPDATE orders SET v = {} WHERE id BETWEEN {} AND {} + 4").format(g, n, n),
        sql.SQL("DELETE FROM orders WHERE id BETWEEN {} + 5 AND {} + 6").format(n, n),
        sql.SQL("INSERT INTO orders VALUES (-{}, {}), (-{} - 1, {})").format(n, g, n, g),
        sql.SQL("INSERT INTO events VALUES ({}, {}), ({}, {})").format(g, n, g, n),
        sql.SQL(
            "DELETE FROM events WHERE ctid = (SELECT min(ctid) FROM events WHERE kind = 'r' AND n = {})"
        ).format(n),
    )


@contextmanager
def writer(database: Database, seed: int) -> Iterator[Writes]:
    """A thread committing inserts, updates and deletes of both tables (rows no prepared
    transaction holds: ``orders`` ids above 100 and ``events`` rows of kind ``w``) until the
    block ends."""
    rng = random.Random(seed)

    def transaction(conn: Any, new: int) -> None:
        conn.execute("INSERT INTO orders VALUES (%s, 'w')", (new,))
        conn.execute("UPDATE orders SET v = v || '+' WHERE id = %s", (rng.randint(101, 300),))
        conn.execute("DELETE FROM orders WHERE id = %s", (new - 2,))
        conn.execute("INSERT INTO events VALUES ('w', %s), ('w', %s)", (new % 7,) * 2)
        conn.execute(
            "UPDATE events SET n = n + 1 WHERE ctid = (SELECT max(ctid) FROM events"
            " WHERE kind = 'w' AND n = %s)",
            (rng.randint(0, 6),),
        )
        conn.execute("DELETE FROM events WHERE ctid = (SELECT min(ctid) FROM events WHERE kind = 'w')")

    with concurrent_writer(database, transaction, first=1_000_000 * seed, skip_deadlocks=False) as writes:
        yield writes


def _cdc(pipeline: PipelineDags) -> None:
    run = pipeline.run("cdc")
    assert task_states(run) == CDC_GREEN, task_states(run)


def _slot(database: Database, pipeline: PipelineDags) -> tuple[LSN, LSN]:
    """The slot's ``restart_lsn`` and ``confirmed_flush_lsn``."""
    row = database.execute(
        "SELECT restart_lsn::text, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (pipeline.config.slot_name,),
    )[0]
    return LSN.parse(str(row[0])), LSN.parse(str(row[1]))


@pytest.mark.slow
def test_a_prepared_transaction_holds_back_only_itself_and_arrives_once_when_committed(
    database: Database,
    replica: Database,
    make_pipeline_dags: MakePipelineDags,
    lake: Path,
    multiset_sqlite: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_REPLICA", replica.cluster.url(replica.name, with_password=True))
    database.execute("CREATE TABLE orders (id int PRIMARY KEY, v text)")
    database.execute("CREATE TABLE events (kind text, n int)")
    database.execute("ALTER TABLE events REPLICA IDENTITY FULL")
    database.execute("INSERT INTO orders SELECT g, 'r' FROM generate_series(1, 300) g")
    database.execute("INSERT INTO events SELECT 'r', g / 2 FROM generate_series(1, 200) g")  # pairs
    path = tmp_path / "dest.sqlite"
    pipeline = make_pipeline_dags(["orders", "events"], destinations=destinations(multiset_sqlite, path))
    assert str(pipeline.run("setup").state) == "success"  # (creating a slot waits for prepared ones)

    # p0 and p1 are prepared before the baseline: its snapshot has both in xip. p0 commits
    # before the first cdc run, so the hand-off applies it (rule 5: not visible in the
    # snapshot); every destination reaches Ready without p1
    with writer(database, 1):
        p0 = _p(database, "p0", 31)
        p1 = _p(database, "p1", 1)
        baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
        assert str(baseline.state) == "success", task_states(baseline)
        state = pipeline.state()
        for table in TABLES:
            for destination in KINDS:
                done = state.table(table).destination(destination).phase
                assert isinstance(done, SyncDone), (table, destination, done)
                assert {p0.xid, p1.xid} <= set(done.xip), (table, destination, done)
        decide(database, "COMMIT", p0)
        _cdc(pipeline)
    _cdc(pipeline)
    assert set(phases(pipeline, TABLES).values()) == {"Ready"}
    equal_without_spark(database, replica, path, TABLES)
    restart, confirmed = _slot(database, pipeline)
    assert confirmed > p1.prepared, "the idle advance went past the PREPARE"
    assert restart <= p1.start, "the server keeps the WAL of the undecided transaction"

    # p2 prepared after the baseline and p3 rolled back, across several cdc runs (slot advances)
    with writer(database, 2):
        p2 = _p(database, "p2", 11)
        _cdc(pipeline)
        p3 = _p(database, "p3", 21)
        _cdc(pipeline)
        decide(database, "ROLLBACK", p3)
        _cdc(pipeline)
    _cdc(pipeline)
    assert set(phases(pipeline, TABLES).values()) == {"Ready"}
    restart, confirmed = _slot(database, pipeline)
    assert confirmed > p3.prepared and restart <= p1.start
    equal_everywhere(database, replica, path, lake, TABLES, spark=False)  # without p1, p2 (nor p3)

    # both committed, each in its own cdc run: delivered once, at their COMMIT PREPARED
    with writer(database, 3):
        decide(database, "COMMIT", p2)
        _cdc(pipeline)
        decide(database, "COMMIT", p1)
    _cdc(pipeline)
    assert database.execute("SELECT count(*) FROM pg_prepared_xacts") == [(0,)]
    assert database.execute("SELECT count(*) FROM orders WHERE v IN ('p0', 'p1', 'p2')") == [(21,)]
    assert set(phases(pipeline, TABLES).values()) == {"Ready"}
    equal_everywhere(database, replica, path, lake, TABLES)
    # decided: the slot no longer keeps the WAL from before p1 (once a checkpoint logged the
    # running transactions and a capture advanced past it)
    database.execute("CHECKPOINT")
    _cdc(pipeline)
    restart, _ = _slot(database, pipeline)
    assert restart > p1.prepared, restart


def test_creating_a_slot_waits_for_prepared_transactions_and_names_them(
    database: Database, source_conn_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """PostgreSQL creates a logical slot once every transaction running when it began has ended,
    prepared ones included: setup says which it waits for (a forgotten one waits forever)."""
    database.execute("CREATE TABLE t (id int PRIMARY KEY)")
    forgotten = prepare(database, "forgotten by someone", "INSERT INTO t VALUES (1)")
    hook = PgReplicationHook(postgres_conn_id=source_conn_id)
    slot = f"s_{database.name}"
    created: list[object] = []
    thread = threading.Thread(target=lambda: created.append(hook.ensure_slot(slot)), daemon=True)
    thread.start()
    thread.join(timeout=3)
    assert thread.is_alive() and not created, "the slot was created with a transaction prepared"
    assert (
        f"creating replication slot {slot} waits until these prepared transactions are committed or "
        f"rolled back (COMMIT PREPARED or ROLLBACK PREPARED '<gid>', in their database): "
        f"'forgotten by someone' in database {database.name} since "
    ) in capsys.readouterr().out
    decide(database, "ROLLBACK", forgotten)
    thread.join(timeout=60)
    assert len(created) == 1 and isinstance(created[0], SlotCreation), created
    assert (created[0].name, created[0].created) == (slot, True)
    hook.drop_slot(slot)
