"""The hook's long-lived sessions outlive low server timeouts; its short ones need no more than
the defaults give; keepalives are on unless the connection's extras say otherwise; a lost
lock is noticed. Against a real server whose database and role defaults are 1 s timeouts."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack

import psycopg
import pytest

from airflow_provider_pgsync.errors import LockLostError
from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.sessions import KEEPALIVES
from airflow_provider_pgsync.state.model import PipelineState
from tests.capture.conftest import wait_for
from tests.conftest import Database
from tests.hooks.low_timeouts import LowTimeouts, low_timeouts_fixture, session_of, unlimited  # noqa: F401

OUTLIVE = 2.5  # seconds a session must stay idle: well past the 1 s the server allows


def _stays_idle(database: Database, where: str, state: str, *params: object) -> Callable[[], bool]:
    """A check for ``wait_for``: the session is in ``state`` for ``OUTLIVE`` s; fails at once when
    the session is gone (the server ended it)."""

    def check() -> bool:
        found = session_of(database, where, *params)
        assert found, f"the session ({where} {params}) was ended by the server"
        assert len(found) == 1, found
        _, now, seconds = found[0]
        return now == state and float(seconds) > OUTLIVE  # type: ignore[arg-type]

    return check


def test_the_run_locks_outlive_idle_timeouts(database: Database, low_timeouts: LowTimeouts) -> None:
    hook = PgReplicationHook(postgres_conn_id=low_timeouts.conn_id(database, "low_source"))
    with ExitStack() as stack:
        locks = [
            stack.enter_context(hook.capture_lock("slot_a", "t capture")),
            stack.enter_context(hook.apply_lock("shop", "t apply")),
            stack.enter_context(hook.baseline_lock("shop", "public.t", "v1", "t baseline")),
        ]
        for name in ("t capture", "t apply", "t baseline"):
            idle = _stays_idle(database, "application_name = %s", "idle", name)
            wait_for(f"{name} idle > {OUTLIVE} s", idle)
        for lock in locks:
            lock.ensure_held()
        assert hook.baseline_running("shop", "public.t", "v1")


def test_the_snapshot_session_outlives_idle_in_transaction_and_statement_timeouts(
    database: Database, low_timeouts: LowTimeouts
) -> None:
    with unlimited(database) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("INSERT INTO t SELECT generate_series(1, 10)")
    hook = PgReplicationHook(postgres_conn_id=low_timeouts.conn_id(database, "low_source"))
    with hook.baseline_snapshot(TableRef("public", "t")) as (snapshot, conn):
        with unlimited(database) as other:
            other.execute("INSERT INTO t VALUES (11)")  # after the snapshot: not in it
        pid = conn.info.backend_pid
        wait_for(
            f"the snapshot session idle in transaction > {OUTLIVE} s",
            _stays_idle(database, "pid = %s", "idle in transaction", pid),
        )
        conn.execute("SELECT pg_sleep(1.2)")  # longer than the role's statement_timeout
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (10,)
        with unlimited(database) as other:  # the exported snapshot is still importable
            other.autocommit = False
            other.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            other.execute(psycopg.sql.SQL("SET TRANSACTION SNAPSHOT {}").format(snapshot.snapshot))
            assert other.execute("SELECT count(*) FROM t").fetchone() == (10,)
            other.rollback()


def test_a_terminated_lock_session_is_a_lost_lock(database: Database, source_conn_id: str) -> None:
    hook = PgReplicationHook(postgres_conn_id=source_conn_id)
    with hook.capture_lock("slot_a", "t capture") as lock:
        lock.ensure_held()
        (pid,) = [row[0] for row in session_of(database, "application_name = 't capture'")]
        database.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_for("the lock session to end", lambda: not session_of(database, "pid = %s", pid))
        with pytest.raises(LockLostError) as lost:
            lock.ensure_held()
    assert lost.value.retryable
    message = str(lost.value)
    assert message.startswith("capture of slot slot_a lost its lock (its session ended: ")
    assert "it stopped before its next state write or slot advance" in message
    assert "run capture again" in message and "pg_terminate_backend" in message
    with hook.capture_lock("slot_a", "t capture again") as lock:  # a new run takes it
        lock.ensure_held()


def test_keepalives_are_on_unless_the_extras_set_them(
    database: Database, source_conn_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with PgReplicationHook(postgres_conn_id=source_conn_id).connect() as conn:
        parameters = conn.info.get_parameters()
    assert {k: parameters.get(k) for k in KEEPALIVES} == {k: str(v) for k, v in KEEPALIVES.items()}

    url = database.cluster.url(database.name, with_password=True)
    monkeypatch.setenv("AIRFLOW_CONN_TUNED", f"{url}?keepalives_idle=7&keepalives_count=2")
    with PgReplicationHook(postgres_conn_id="tuned").connect() as conn:
        parameters = conn.info.get_parameters()
    assert {k: parameters.get(k) for k in KEEPALIVES} == {
        "keepalives": "1",
        "keepalives_idle": "7",
        "keepalives_interval": "10",
        "keepalives_count": "2",
    }


def test_setup_reads_and_the_state_store_work_under_low_timeouts(
    database: Database, low_timeouts: LowTimeouts
) -> None:
    """The short statements need no setting of their own: each runs well within 1 s."""
    with unlimited(database) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    hook = PgReplicationHook(postgres_conn_id=low_timeouts.conn_id(database, "low_source"))
    slot = f"s_{database.name}"
    hook.preflight(slot_name=slot, tables=["t"], publication_name="pub")
    assert hook.ensure_publication("pub", ["t"]) == "created"
    assert hook.ensure_slot(slot).created
    assert hook.slot_info(slot) is not None
    positions = hook.wal_positions()
    store = PostgresStateStore(hook)
    saved = store.save(PipelineState("shop").with_slot(slot, positions.flush))
    assert store.load("shop") == saved
    with hook.peek(slot, ["pub"], upto_lsn=positions.flush, upto_nchanges=None) as rows:
        assert list(rows) == []
    assert hook.advance_slot(slot, hook.wal_positions().flush) >= positions.flush
    assert hook.drop_slot(slot) and hook.drop_publication("pub")
